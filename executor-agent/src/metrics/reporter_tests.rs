//! The reporter's counts over scripted sagas.
use serde_json::json;

use super::*;
use crate::saga::tests::{FORWARD, response, supplier, supplier_unverified};
use crate::saga::{CallOutcome, Decider, Event, Invocation, Resolution, Target, Timer};

const T0: i64 = 1_800_000_000_000;
const CAPTURE: usize = 4;
/// The demo's names, taken from the engine's tests: the executor names no tool.
const CAPTURE_SKILL: &str = FORWARD[CAPTURE];
const SANDBOX_SKILL: &str = FORWARD[2];

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

/// `saga` started and run as far as `tool` takes it, with its metrics and the reporter
/// that observed it.
fn started(
    mut saga: Saga,
    tool: &dyn Fn(&Invocation) -> CallOutcome,
) -> (Saga, Arc<Metrics>, MeteredReporter) {
    let (metrics, seen) = metered(&saga);
    run(&mut saga, &seen, Event::Start { now_ms: T0 }, tool);
    (saga, metrics, seen)
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
    let (mut saga, metrics, seen) = started(supplier_unverified(), &lost(CAPTURE_SKILL));
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
    run(&mut saga, &seen, answer, &lost(CAPTURE_SKILL));
    assert!(matches!(saga.phase, Phase::Done { .. }), "{:?}", saga.phase);
    assert_eq!(unknown_outcomes(&metrics), once);
}

#[test]
fn an_unknown_outcome_a_verification_settles_is_counted_as_settled_by_it() {
    let tool = |call: &Invocation| match call.target {
        Target::Verification(_) => CallOutcome::Succeeded {
            response: json!({"status": "applied", "response": response(CAPTURE_SKILL)}),
        },
        _ => lost(CAPTURE_SKILL)(call),
    };
    let (saga, metrics, _) = started(supplier(), &tool);
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
    let (saga, metrics, _) = started(supplier_unverified(), &lost(SANDBOX_SKILL));
    assert!(matches!(saga.phase, Phase::Done { .. }), "{:?}", saga.phase);
    assert_eq!(unknown_outcomes(&metrics), unwound);
    // Its undo then fails for good and waits for a person: still the one outcome,
    // settled by the unwind (the dead letter is counted among the compensations).
    let tool = |call: &Invocation| match call.target {
        Target::Compensation(_) if call.call.skill == "sandbox.deprovision" => {
            CallOutcome::failed("no such tenant")
        }
        _ => lost(SANDBOX_SKILL)(call),
    };
    let (saga, metrics, _) = started(supplier_unverified(), &tool);
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
