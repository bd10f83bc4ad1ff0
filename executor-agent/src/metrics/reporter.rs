//! What the metrics read of each saga as it is shown: a step's record compared with what
//! was seen of it before, so that every change is counted once, and a resumed saga's
//! past not again.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{Metrics, OpenHandle};
use crate::driver::Reporter;
use crate::saga::deadline::UndoDeadline;
use crate::saga::model::{Forward, PauseOn, Phase, StepRecord, Undo};
use crate::saga::{Command, Saga, UNDO_NOT_APPLIED};
use crate::sync;

/// A reporter that feeds the metrics from each saga's state as it is shown, then hands
/// the report on: compensations given up (dead-lettered, unavailable), undo deadlines
/// read from results, and the undo handles the saga holds open. Changes are counted
/// against the saga as this reporter first saw it, so a resumed saga's past is not
/// counted again.
pub struct MeteredReporter {
    inner: Arc<dyn Reporter>,
    metrics: Arc<Metrics>,
    saga_id: String,
    seen: Mutex<Vec<Seen>>,
}

/// What the metrics read of a step's record: compared at every report instead of the
/// whole record (whose requests and responses are JSON compared member by member).
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    succeeded: bool,
    verifying: bool,
    undo: Undo,
    undo_deadline: Option<UndoDeadline>,
    doubt: Doubt,
}

/// What became of a forward call whose outcome stayed unknown (`Forward::Unknown`: no
/// retry under its key, and no verification, settled it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Doubt {
    /// Its outcome is not unknown (or is being verified).
    None,
    /// Unknown, and nothing has come of it yet: the saga waits for its other branches.
    Open,
    /// The saga stopped for a person about it, or about its undo.
    Person,
    /// The saga unwound over it without asking anyone.
    Unwinding,
}

impl Doubt {
    /// Whether it was settled (and counted): it stays so while the outcome stays unknown.
    fn settled(self) -> bool {
        matches!(self, Self::Person | Self::Unwinding)
    }

    /// The `settled_by` label it is counted under.
    fn label(self) -> &'static str {
        match self {
            Self::Person => "person",
            _ => "unwinding",
        }
    }
}

impl Seen {
    fn of(saga: &Saga, i: usize) -> Self {
        let record: &StepRecord = &saga.records[i];
        Self {
            succeeded: matches!(record.forward, Forward::Succeeded { .. }),
            verifying: matches!(record.forward, Forward::Verifying { .. }),
            undo: record.undo.clone(),
            undo_deadline: record.undo_deadline.clone(),
            doubt: doubt_of(saga, i),
        }
    }
}

/// What the saga, as it stands, does about step `i`'s outcome, if it is unknown.
fn doubt_of(saga: &Saga, i: usize) -> Doubt {
    if !matches!(saga.records[i].forward, Forward::Unknown { .. }) {
        return Doubt::None;
    }
    match saga.phase {
        Phase::Paused {
            on: PauseOn::Forward { step } | PauseOn::Compensation { step, .. },
            ..
        } if step == i => Doubt::Person,
        Phase::Unwinding { .. }
        | Phase::Done { .. }
        | Phase::Paused {
            on: PauseOn::Compensation { .. },
            ..
        } => Doubt::Unwinding,
        _ => Doubt::Open,
    }
}

impl MeteredReporter {
    pub fn new(inner: Arc<dyn Reporter>, metrics: Arc<Metrics>, saga: &Saga) -> Self {
        let reporter = Self {
            inner,
            metrics,
            saga_id: saga.spec.saga_id.clone(),
            seen: Mutex::new((0..saga.records.len()).map(|i| Seen::of(saga, i)).collect()),
        };
        reporter.hold(saga);
        reporter
    }

    fn hold(&self, saga: &Saga) {
        let handles = saga
            .open_undo_handles()
            .into_iter()
            .map(|(i, deadline_ms)| OpenHandle {
                step: saga.spec.steps[i].id.clone(),
                agent: saga.spec.steps[i].call.agent.clone(),
                deadline_ms,
            })
            .collect();
        self.metrics.hold_undo_handles(&self.saga_id, handles);
    }

    fn observe(&self, saga: &Saga) {
        let mut seen = sync::lock(&self.seen);
        let mut changed = false;
        for (i, (before, record)) in seen.iter_mut().zip(&saga.records).enumerate() {
            let mut now = Seen::of(saga, i);
            if before.doubt.settled() && now.doubt != Doubt::None {
                // Counted once: a pause asked again, or an unwind after a person's answer,
                // is the same unknown outcome.
                now.doubt = before.doubt;
            }
            if *before == now {
                continue;
            }
            changed = true;
            let agent = &saga.spec.steps[i].call.agent;
            if !before.doubt.settled() && now.doubt.settled() {
                self.metrics.unknown_outcome(agent, now.doubt.label());
            }
            if !before.succeeded
                && let (true, Some(deadline)) = (now.succeeded, &now.undo_deadline)
            {
                self.metrics.undo_deadline_read(saga, i, deadline);
            }
            if before.verifying && !now.verifying {
                let verdict = match record.forward {
                    Forward::Succeeded { .. } => "applied",
                    Forward::Failed { .. } => "not_applied",
                    _ => "unsettled",
                };
                self.metrics.verified(agent, verdict);
                if verdict != "unsettled" {
                    self.metrics.unknown_outcome(agent, "verification");
                }
            }
            if matches!(before.undo, Undo::Verifying { .. })
                && !matches!(now.undo, Undo::Verifying { .. })
            {
                let verdict = match &now.undo {
                    Undo::Done => "applied",
                    Undo::DeadLettered { reason } if reason.ends_with(UNDO_NOT_APPLIED) => {
                        "not_applied"
                    }
                    _ => "unsettled",
                };
                self.metrics.verified(agent, verdict);
            }
            if before.undo != now.undo {
                match now.undo {
                    Undo::DeadLettered { .. } => self.metrics.compensation(agent, "dead_lettered"),
                    Undo::Unavailable { .. } => self.metrics.compensation(agent, "unavailable"),
                    _ => {}
                }
            }
            *before = now;
        }
        drop(seen);
        // The phase decides too (an end, the point of no return passed), and it changes
        // only with what is seen of a record: a step's success or its undo.
        if changed {
            self.hold(saga);
        }
    }
}

impl Drop for MeteredReporter {
    fn drop(&mut self) {
        // The saga has no driver here any more (it ended, or the executor stops).
        self.metrics.hold_undo_handles(&self.saga_id, Vec::new());
    }
}

#[async_trait]
impl Reporter for MeteredReporter {
    async fn report(&self, command: &Command, saga: &Saga) {
        self.observe(saga);
        self.inner.report(command, saga).await;
    }

    async fn report_all(&self, shown: &[Command], saga: &Saga) {
        self.observe(saga);
        self.inner.report_all(shown, saga).await;
    }

    async fn begun(&self, shown: &[Command], saga: &Saga) {
        self.observe(saga);
        self.inner.begun(shown, saga).await;
    }

    async fn written(
        &self,
        shown: &[Command],
        saga: &Saga,
        write: &crate::driver::StepWrite<'_>,
    ) -> crate::error::Result<()> {
        if !shown.is_empty() {
            self.observe(saga);
        }
        self.inner.written(shown, saga, write).await
    }
}

#[cfg(test)]
#[path = "reporter_tests.rs"]
mod tests;
