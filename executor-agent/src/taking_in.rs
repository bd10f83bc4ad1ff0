//! Plans being taken in: from their task's creation until their saga is live (or the
//! plan is answered otherwise). A cancel that arrives meanwhile must not mark the task
//! canceled while its saga is about to begin: it drops a plan that still waits for a
//! slot, and otherwise waits until the saga is live, to cancel it there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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

/// Every plan being taken in, by task id.
#[derive(Debug, Default)]
pub struct TakingIn {
    plans: Mutex<HashMap<String, Stage>>,
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

    fn set(&self, task_id: &str, stage: Stage) {
        if let Ok(mut plans) = self.plans.lock() {
            plans.insert(task_id.to_owned(), stage);
        }
    }

    /// For a cancel of `task_id`: `true` if it dropped the plan, which waited for a slot
    /// (the caller ends the task); `false` once the plan is not being taken in, after
    /// waiting for one being begun to go live.
    pub async fn cancel(&self, task_id: &str) -> bool {
        loop {
            let mut starting = {
                let Ok(mut plans) = self.plans.lock() else {
                    return false;
                };
                match plans.remove(task_id) {
                    None => return false,
                    Some(Stage::Waiting(token)) => {
                        token.cancel();
                        return true;
                    }
                    Some(Stage::Starting(watched)) => {
                        plans.insert(task_id.to_owned(), Stage::Starting(watched.clone()));
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
    /// The plan waits for a slot; the token is cancelled if a cancel drops it.
    pub fn waiting(&self) -> CancellationToken {
        let token = CancellationToken::new();
        self.owner.set(&self.task_id, Stage::Waiting(token.clone()));
        token
    }

    /// The wait is over with a slot: `false` if a cancel dropped the plan first.
    pub fn slot_taken(&self) -> bool {
        let Ok(mut plans) = self.owner.plans.lock() else {
            return false;
        };
        match plans.get(&self.task_id) {
            Some(Stage::Waiting(_)) => {
                plans.insert(self.task_id.clone(), Stage::Starting(self.done.subscribe()));
                true
            }
            _ => false,
        }
    }
}

impl Drop for Intake {
    fn drop(&mut self) {
        if let Ok(mut plans) = self.owner.plans.lock() {
            plans.remove(&self.task_id);
        }
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
        assert!(!intake.slot_taken(), "the plan was dropped");
        drop(intake);

        let intake = taking_in.start("t2");
        let _token = intake.waiting();
        assert!(intake.slot_taken());
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
