//! Events that do not apply: each is answered with `Command::Ignored` and a reason, and
//! changes nothing; an event naming a step the saga does not have is one of them, never
//! an index past the saga's steps. A property test feeds arbitrary event sequences.

use proptest::prelude::*;

use super::tests::supplier;
use super::*;

const T0: i64 = 1_800_000_000_000;

fn ignored(commands: &[Command]) -> Option<&str> {
    match commands {
        [Command::Ignored { why, .. }] => Some(why),
        _ => None,
    }
}

/// The saga's whole state, to compare: all of it but the count of events stepped, which
/// every event moves, one that does not apply too.
pub(super) fn state(saga: &Saga) -> Saga {
    Saga {
        events: 0,
        ..saga.clone()
    }
}

fn first_call(saga: &mut Saga) -> Invocation {
    saga.step(Event::Start { now_ms: T0 })
        .into_iter()
        .find_map(|c| match c {
            Command::Invoke(invocation) => Some(invocation),
            _ => None,
        })
        .expect("the first step is called")
}

#[test]
fn events_that_do_not_apply_are_answered_with_why_and_change_nothing() {
    let mut saga = supplier();
    let call = first_call(&mut saga);
    let cases = [
        (Event::Start { now_ms: T0 + 1 }, "started already"),
        (
            // An answer to an attempt that is not out.
            Event::Result {
                target: call.target,
                attempt: call.attempt + 1,
                outcome: CallOutcome::Succeeded {
                    response: serde_json::json!({}),
                },
                now_ms: T0 + 2,
            },
            "not out",
        ),
        (
            Event::Resolve {
                resolution: Resolution::Retry,
                now_ms: T0 + 3,
                decider: None,
            },
            "does not wait for a person",
        ),
        (
            Event::TimerFired {
                timer: Timer::Retry {
                    target: call.target,
                    attempt: 2,
                },
                now_ms: T0 + 4,
            },
            "no longer awaited",
        ),
        (
            Event::TimerFired {
                timer: Timer::ApprovalTimeout { step: 0, round: 0 },
                now_ms: T0 + 5,
            },
            "no longer waits",
        ),
        (
            Event::Result {
                target: Target::Compensation(40),
                attempt: 1,
                outcome: CallOutcome::Unknown { reason: "x".into() },
                now_ms: T0 + 6,
            },
            "names step 41 of a saga of 6 step(s)",
        ),
    ];
    for (event, why) in cases {
        let before = state(&saga);
        let commands = saga.step(event.clone());
        let said = ignored(&commands).unwrap_or_else(|| panic!("{event:?} gave {commands:?}"));
        assert!(said.contains(why), "{event:?}: {said}");
        assert_eq!(state(&saga), before, "{event:?} changed the saga");
    }
}

#[test]
fn a_second_cancel_while_unwinding_is_ignored() {
    let mut saga = supplier();
    let call = first_call(&mut saga);
    // Canceled while s0 is out: the unwind waits for its answer (nothing to do yet, but
    // the cancel applied).
    assert!(ignored(&saga.step(Event::Cancel { now_ms: T0 + 1 })).is_none());
    saga.step(Event::Result {
        target: call.target,
        attempt: call.attempt,
        outcome: CallOutcome::Succeeded {
            response: serde_json::json!({"vendorId": "v_1"}),
        },
        now_ms: T0 + 2,
    });
    assert!(
        matches!(saga.phase, model::Phase::Unwinding { .. }),
        "{:?}",
        saga.phase
    );
    let before = state(&saga);
    let again = saga.step(Event::Cancel { now_ms: T0 + 3 });
    assert_eq!(ignored(&again), Some("the saga unwinds already"));
    assert_eq!(state(&saga), before);
}

#[test]
fn a_journal_whose_event_names_a_step_the_saga_lacks_is_refused_by_replay() {
    let spec = supplier().spec;
    let entries = [
        crate::journal::Entry::Event(Event::Start { now_ms: T0 }),
        crate::journal::Entry::Event(Event::Result {
            target: Target::Forward(17),
            attempt: 1,
            outcome: CallOutcome::failed("x"),
            now_ms: T0 + 1,
        }),
    ];
    let refused = crate::recovery::replay(spec, &entries, T0 + 2)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        refused.contains("entry 2 (result): the event names step 18 of a saga of 6 step(s)"),
        "{refused}"
    );
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        (0usize..9).prop_map(Target::Forward),
        (0usize..9).prop_map(Target::Compensation),
        (0usize..9).prop_map(Target::Verification),
    ]
}

fn outcome() -> impl Strategy<Value = CallOutcome> {
    prop_oneof![
        Just(CallOutcome::Succeeded {
            response: serde_json::json!({"vendorId": "v_1", "reservationId": "r_1"}),
        }),
        Just(CallOutcome::failed("no")),
        Just(CallOutcome::Unknown { reason: "?".into() }),
        Just(CallOutcome::Succeeded {
            response: serde_json::json!({"status": "applied", "response": {"captureId": "c", "amountMinor": 1, "currency": "EUR"}}),
        }),
        Just(CallOutcome::Succeeded {
            response: serde_json::json!({"status": "not-applied"}),
        }),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    let now = T0..T0 + 10_000_000;
    prop_oneof![
        now.clone().prop_map(|now_ms| Event::Start { now_ms }),
        (target(), 1u32..5, outcome(), now.clone()).prop_map(
            |(target, attempt, outcome, now_ms)| {
                Event::Result {
                    target,
                    attempt,
                    outcome,
                    now_ms,
                }
            }
        ),
        (target(), 1u32..5, now.clone()).prop_map(|(target, attempt, now_ms)| Event::TimerFired {
            timer: Timer::Retry { target, attempt },
            now_ms,
        }),
        (0usize..9, 0u32..3, now.clone()).prop_map(|(step, round, now_ms)| Event::TimerFired {
            timer: Timer::ApprovalTimeout { step, round },
            now_ms,
        }),
        (0usize..9, now.clone()).prop_map(|(step, now_ms)| Event::Resolve {
            resolution: Resolution::Withdraw,
            now_ms,
            decider: Some(Decider {
                by: "carol".into(),
                approval: None,
                withdrawal: Some(Withdrawal {
                    saga_id: "sg_demo_supplier_onboarding".into(),
                    step_id: ["s0", "s1", "s1r", "s2", "s3", "s4", "s5", "s6", "s7"][step].into(),
                }),
                message_id: None,
            }),
        }),
        now.clone().prop_map(|now_ms| Event::TimerFired {
            timer: Timer::MandateExpiry,
            now_ms,
        }),
        (
            prop_oneof![
                Just(Resolution::Retry),
                Just(Resolution::ResolvedManually),
                Just(Resolution::Compensate),
                Just(Resolution::Approve),
            ],
            now.clone()
        )
            .prop_map(|(resolution, now_ms)| Event::Resolve {
                resolution,
                now_ms,
                decider: None,
            }),
        now.clone().prop_map(|now_ms| Event::Cancel { now_ms }),
        now.clone().prop_map(|now_ms| Event::Proceed { now_ms }),
        now.clone()
            .prop_map(|now_ms| Event::MandateRevoked { now_ms }),
        (target(), 1u32..5, now).prop_map(|(target, attempt, now_ms)| Event::InFlightLost {
            target,
            attempt,
            now_ms,
        }),
    ]
}

proptest! {
    /// Whatever arrives, in whatever order (steps the saga does not have included), the
    /// engine does not panic, and an event it answers with `Ignored` changed nothing.
    #[test]
    fn arbitrary_events_never_panic_and_an_ignored_one_changes_nothing(
        events in proptest::collection::vec(event(), 1..40),
        with_approval in proptest::bool::ANY,
    ) {
        // The supplier saga, or the same with a step that needs approval (`s1r`).
        let mut saga = if with_approval {
            super::tests::saga_from("examples/plans/invalid/undo-ttl-too-short.json")
        } else {
            supplier()
        };
        for event in events {
            let before = state(&saga);
            let commands = saga.step(event.clone());
            if ignored(&commands).is_some() {
                prop_assert_eq!(state(&saga), before, "{:?}", event);
            }
        }
    }
}
