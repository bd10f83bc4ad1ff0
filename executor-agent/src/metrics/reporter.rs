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
mod tests {
    use serde_json::json;

    use super::*;
    use crate::saga::tests::{response, supplier, supplier_unverified};
    use crate::saga::{CallOutcome, Decider, Event, Invocation, Resolution, Target, Timer};

    const T0: i64 = 1_800_000_000_000;
    const CAPTURE: usize = 4;

    struct Silent;

    #[async_trait]
    impl Reporter for Silent {
        async fn report(&self, _: &Command, _: &Saga) {}
    }

    fn metered(saga: &Saga) -> (Arc<Metrics>, MeteredReporter) {
        let metrics = Arc::new(Metrics::default());
        let reporter = MeteredReporter::new(Arc::new(Silent), metrics.clone(), saga);
        (metrics, reporter)
    }

    /// Steps `saga` from `first` as a driver would, answering each call with `tool` and
    /// firing each retry at once, `seen` observing it after every step, until it stops.
    fn run(
        saga: &mut Saga,
        seen: &MeteredReporter,
        first: Event,
        tool: &dyn Fn(&Invocation) -> CallOutcome,
    ) {
        let mut queue = vec![first];
        while let Some(event) = queue.pop() {
            for command in saga.step(event) {
                match command {
                    Command::Invoke(call) => queue.push(Event::Result {
                        target: call.target,
                        attempt: call.attempt,
                        outcome: tool(&call),
                        now_ms: T0,
                    }),
                    Command::StartTimer {
                        timer: timer @ Timer::Retry { .. },
                        ..
                    } => queue.push(Event::TimerFired { timer, now_ms: T0 }),
                    _ => {}
                }
            }
            seen.observe(saga);
        }
    }

    /// A tool whose `skill` never answers; every other call succeeds.
    fn lost(skill: &'static str) -> impl Fn(&Invocation) -> CallOutcome {
        move |call| {
            if call.call.skill == skill && call.target == Target::Forward(call.target.step()) {
                CallOutcome::Unknown {
                    reason: "timed out".into(),
                }
            } else {
                CallOutcome::Succeeded {
                    response: response(&call.call.skill),
                }
            }
        }
    }

    /// The `sagaplane_unknown_outcomes_total` series, as `/metrics` shows them.
    fn unknown_outcomes(metrics: &Metrics) -> Vec<String> {
        let text = metrics.encode(super::super::Now::default()).unwrap();
        text.lines()
            .filter(|l| l.starts_with("sagaplane_unknown_outcomes_total{"))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn an_unknown_outcome_put_to_a_person_is_counted_once_whatever_follows() {
        let mut saga = supplier_unverified();
        let (metrics, seen) = metered(&saga);
        run(
            &mut saga,
            &seen,
            Event::Start { now_ms: T0 },
            &lost("payments.capture"),
        );
        assert!(
            matches!(saga.phase, Phase::Paused { .. }),
            "{:?}",
            saga.phase
        );
        let once = ["sagaplane_unknown_outcomes_total{agent=\"payments\",settled_by=\"person\"} 1"];
        assert_eq!(unknown_outcomes(&metrics), once);
        // A resumed saga's past is not counted again.
        let (resumed, _resumed_seen) = metered(&saga);
        assert!(unknown_outcomes(&resumed).is_empty());
        // Asked again (the mandate ended while it waited), then answered: the same one.
        run(
            &mut saga,
            &seen,
            Event::MandateRevoked { now_ms: T0 },
            &|_| unreachable!("no call"),
        );
        let answer = Event::Resolve {
            resolution: Resolution::ResolvedManually,
            now_ms: T0,
            decider: Some(Decider {
                by: "alice".into(),
                approval: None,
                withdrawal: None,
                message_id: None,
            }),
        };
        run(&mut saga, &seen, answer, &lost("payments.capture"));
        assert!(matches!(saga.phase, Phase::Done { .. }), "{:?}", saga.phase);
        assert_eq!(unknown_outcomes(&metrics), once);
    }

    #[test]
    fn an_unknown_outcome_a_verification_settles_is_counted_as_settled_by_it() {
        let mut saga = supplier();
        let (metrics, seen) = metered(&saga);
        let tool = |call: &Invocation| match call.target {
            Target::Verification(_) => CallOutcome::Succeeded {
                response: json!({"status": "applied", "response": response("payments.capture")}),
            },
            _ => lost("payments.capture")(call),
        };
        run(&mut saga, &seen, Event::Start { now_ms: T0 }, &tool);
        assert!(matches!(saga.phase, Phase::Done { .. }), "{:?}", saga.phase);
        assert!(matches!(
            saga.records[CAPTURE].forward,
            Forward::Succeeded { .. }
        ));
        assert_eq!(
            unknown_outcomes(&metrics),
            ["sagaplane_unknown_outcomes_total{agent=\"payments\",settled_by=\"verification\"} 1"]
        );
    }

    #[test]
    fn an_unknown_outcome_before_the_point_of_no_return_is_settled_by_the_unwind() {
        let unwound =
            ["sagaplane_unknown_outcomes_total{agent=\"sandbox\",settled_by=\"unwinding\"} 1"];
        let mut saga = supplier_unverified();
        let (metrics, seen) = metered(&saga);
        run(
            &mut saga,
            &seen,
            Event::Start { now_ms: T0 },
            &lost("sandbox.provision"),
        );
        assert!(matches!(saga.phase, Phase::Done { .. }), "{:?}", saga.phase);
        assert_eq!(unknown_outcomes(&metrics), unwound);
        // Its undo then fails for good and waits for a person: still the one outcome,
        // settled by the unwind (the dead letter is counted among the compensations).
        let mut saga = supplier_unverified();
        let (metrics, seen) = metered(&saga);
        let tool = |call: &Invocation| match call.target {
            Target::Compensation(_) if call.call.skill == "sandbox.deprovision" => {
                CallOutcome::failed("no such tenant")
            }
            _ => lost("sandbox.provision")(call),
        };
        run(&mut saga, &seen, Event::Start { now_ms: T0 }, &tool);
        assert!(
            matches!(
                saga.phase,
                Phase::Paused {
                    on: PauseOn::Compensation { step: 2, .. },
                    ..
                }
            ),
            "{:?}",
            saga.phase
        );
        assert_eq!(unknown_outcomes(&metrics), unwound);
    }
}
