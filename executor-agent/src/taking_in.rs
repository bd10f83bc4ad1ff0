//! Plans being taken in: from their task's creation until their saga is live (or the
//! plan is answered otherwise). A cancel that arrives meanwhile must not mark the task
//! canceled while its saga is about to begin: it drops a plan that still waits for a
//! slot, and otherwise waits until the saga is live, to cancel it there. A plan waiting
//! for a slot holds its saga id, as a begun saga does in the journal, so that the same
//! plan sent again is pointed at its task instead of waiting a second time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::sync;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[derive(Debug)]
enum Stage {
    /// Waiting for a saga slot, nothing journaled: a cancel drops it.
    Waiting(CancellationToken),
    /// Being checked or begun: a cancel waits until the sender drops (the saga is live,
    /// or the plan was answered).
    Starting(watch::Receiver<()>),
}

#[derive(Debug, Default)]
struct Plans {
    /// Every plan being taken in, by task id.
    stages: HashMap<String, Stage>,
    /// The plans that waited for a slot and are not begun yet, by saga id.
    by_saga: HashMap<String, Held>,
}

/// A plan holding its saga id while it waits for a slot (and until its saga is begun).
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub task_id: String,
    pub plan: Value,
}

#[derive(Debug, Default)]
pub struct TakingIn {
    plans: Mutex<Plans>,
    /// How many cancels wait for a saga being begun.
    cancels_waiting: watch::Sender<usize>,
}

/// One plan being taken in. Dropped once its saga is live or the plan is answered.
#[derive(Debug)]
pub struct Intake {
    owner: Arc<TakingIn>,
    task_id: String,
    /// The saga id this plan holds, once it waited for a slot.
    holds: OnceLock<String>,
    done: watch::Sender<()>,
}

impl TakingIn {
    /// Marks the plan of `task_id` as being taken in until the returned intake drops.
    pub fn start(self: &Arc<Self>, task_id: &str) -> Intake {
        let (done, watched) = watch::channel(());
        self.set(task_id, Stage::Starting(watched));
        Intake {
            owner: self.clone(),
            task_id: task_id.to_owned(),
            holds: OnceLock::new(),
            done,
        }
    }

    /// The lock is held for a map operation at a time, so a poisoned one is taken as is.
    fn plans(&self) -> MutexGuard<'_, Plans> {
        sync::lock(&self.plans)
    }

    fn set(&self, task_id: &str, stage: Stage) {
        self.plans().stages.insert(task_id.to_owned(), stage);
    }

    /// The plan that holds `saga_id` while it waits for a slot, if any.
    pub fn held(&self, saga_id: &str) -> Option<Held> {
        self.plans().by_saga.get(saga_id).cloned()
    }

    /// For a cancel of `task_id`: `true` if it dropped the plan, which waited for a slot
    /// (the caller ends the task); `false` once the plan is not being taken in, after
    /// waiting for one being begun to go live.
    pub async fn cancel(&self, task_id: &str) -> bool {
        loop {
            let mut starting = {
                let mut plans = self.plans();
                match plans.stages.remove(task_id) {
                    None => return false,
                    Some(Stage::Waiting(token)) => {
                        token.cancel();
                        return true;
                    }
                    Some(Stage::Starting(watched)) => {
                        let stage = Stage::Starting(watched.clone());
                        plans.stages.insert(task_id.to_owned(), stage);
                        watched
                    }
                }
            };
            // Changes only when the intake drops its sender.
            self.cancels_waiting.send_modify(|n| *n += 1);
            let _ = starting.changed().await;
            self.cancels_waiting
                .send_modify(|n| *n = n.saturating_sub(1));
        }
    }

    /// The tasks whose plans are being taken in: the submitted tasks this process is
    /// answerable for, whose holds it renews on a store replicas share.
    pub fn task_ids(&self) -> Vec<String> {
        self.plans().stages.keys().cloned().collect()
    }

    /// How many cancels wait for a saga being begun, as it changes.
    pub fn watch_cancels_waiting(&self) -> watch::Receiver<usize> {
        self.cancels_waiting.subscribe()
    }
}

impl Intake {
    /// The task whose plan this is.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// The plan (of `saga_id`) is to wait for a slot: it holds the saga id from now on.
    /// `Err` with the plan that holds it already, on another task.
    pub fn hold(&self, saga_id: &str, plan: &Value) -> Result<(), Held> {
        let mut plans = self.owner.plans();
        match plans.by_saga.get(saga_id) {
            Some(other) if other.task_id != self.task_id => Err(other.clone()),
            Some(_) => Ok(()),
            None => {
                let held = Held {
                    task_id: self.task_id.clone(),
                    plan: plan.clone(),
                };
                plans.by_saga.insert(saga_id.to_owned(), held);
                // A plan has one saga id, so it holds at most one.
                let _ = self.holds.set(saga_id.to_owned());
                Ok(())
            }
        }
    }

    /// The plan waits (for a slot, or for its store to answer again); the token is
    /// cancelled if a cancel drops it.
    pub fn waiting(&self) -> CancellationToken {
        let token = CancellationToken::new();
        self.owner.set(&self.task_id, Stage::Waiting(token.clone()));
        token
    }

    /// The wait is over: `false` if a cancel dropped the plan first. The plan holds its
    /// saga id until it drops, by when the journal holds it.
    pub fn wait_over(&self) -> bool {
        let mut plans = self.owner.plans();
        match plans.stages.get(&self.task_id) {
            Some(Stage::Waiting(_)) => {
                let stage = Stage::Starting(self.done.subscribe());
                plans.stages.insert(self.task_id.clone(), stage);
                true
            }
            _ => false,
        }
    }
}

impl Drop for Intake {
    fn drop(&mut self) {
        let mut plans = self.owner.plans();
        plans.stages.remove(&self.task_id);
        if let Some(saga_id) = self.holds.get() {
            plans.by_saga.remove(saga_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn a_cancel_drops_a_waiting_plan_and_waits_for_a_starting_one() {
        let taking_in = Arc::new(TakingIn::default());
        assert!(!taking_in.cancel("t1").await, "nothing taken in");

        let intake = taking_in.start("t1");
        let token = intake.waiting();
        assert!(taking_in.cancel("t1").await);
        assert!(token.is_cancelled());
        assert!(!intake.wait_over(), "the plan was dropped");
        drop(intake);

        let intake = taking_in.start("t2");
        let _token = intake.waiting();
        assert!(intake.wait_over());
        let cancel = {
            let taking_in = taking_in.clone();
            tokio::spawn(async move { taking_in.cancel("t2").await })
        };
        let mut waiting = taking_in.watch_cancels_waiting();
        waiting.wait_for(|n| *n == 1).await.unwrap();
        assert!(
            !cancel.is_finished(),
            "the cancel waits while the saga starts"
        );
        drop(intake);
        assert!(
            !cancel.await.unwrap(),
            "then finds it live: not dropped here"
        );
    }

    #[test]
    fn a_saga_id_is_held_by_the_first_plan_to_wait_until_its_intake_drops() {
        let taking_in = Arc::new(TakingIn::default());
        let (plan, other_plan) = (json!({"sagaId": "sg_1", "n": 1}), json!({"n": 2}));
        let first = taking_in.start("t1");
        assert_eq!(taking_in.held("sg_1"), None);
        first.hold("sg_1", &plan).unwrap();
        first.hold("sg_1", &plan).unwrap();
        let holder = Held {
            task_id: "t1".into(),
            plan: plan.clone(),
        };
        assert_eq!(taking_in.held("sg_1"), Some(holder.clone()));

        let second = taking_in.start("t2");
        assert_eq!(second.hold("sg_1", &other_plan), Err(holder.clone()));
        second.hold("sg_2", &other_plan).unwrap();
        drop(second);
        assert_eq!(taking_in.held("sg_2"), None);
        assert_eq!(
            taking_in.held("sg_1"),
            Some(holder),
            "a plan refused the saga id does not free it"
        );

        let _token = first.waiting();
        assert!(first.wait_over());
        assert!(
            taking_in.held("sg_1").is_some(),
            "held while its saga is begun"
        );
        drop(first);
        assert_eq!(taking_in.held("sg_1"), None);
        let third = taking_in.start("t3");
        third.hold("sg_1", &other_plan).unwrap();
    }
}
