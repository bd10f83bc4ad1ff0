//! Plans being taken in: from their task's creation until their saga is live (or the
//! plan is answered otherwise). A cancel that arrives meanwhile must not mark the task
//! canceled while its saga is about to begin: it drops a plan that waits for its store to
//! answer again (nothing journaled), and otherwise waits until the saga is live, to
//! cancel it there. A plan waiting for a saga slot is not here: it is journaled, and
//! its saga is live, waiting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::sync;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[derive(Debug)]
enum Stage {
    /// Waiting for the store to answer again, nothing journaled: a cancel drops it.
    Waiting(CancellationToken),
    /// Being checked or begun: a cancel waits until the sender drops (the saga is live,
    /// or the plan was answered).
    Starting(watch::Receiver<()>),
}

#[derive(Debug, Default)]
struct Plans {
    /// Every plan being taken in, by task id.
    stages: HashMap<String, Stage>,
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

    /// For a cancel of `task_id`: `true` if it dropped the plan, which waited for its
    /// store (the caller ends the task); `false` once the plan is not being taken in, after
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

    /// The plan waits for its store to answer again; the token is cancelled if a cancel
    /// drops it.
    pub fn waiting(&self) -> CancellationToken {
        let token = CancellationToken::new();
        self.owner.set(&self.task_id, Stage::Waiting(token.clone()));
        token
    }

    /// The wait is over: `false` if a cancel dropped the plan first.
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
        self.owner.plans().stages.remove(&self.task_id);
    }
}

#[cfg(test)]
mod tests {
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
}
