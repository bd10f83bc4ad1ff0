//! An ended mandate stops every forward attempt at or before the point of no return:
//! scripted paths through the supplier saga (pivot `s4`, `payments.capture`), and a
//! property over random outcomes and random moments of the revocation.

use proptest::prelude::*;

use super::model::{Cause, Forward, Phase};
use super::tests::{response, supplier, supplier_unverified};
use super::*;

const T0: i64 = 1_800_000_000_000;
const PIVOT: usize = 4;

fn succeeded(skill: &str) -> CallOutcome {
    CallOutcome::Succeeded {
        response: response(skill),
    }
}

fn invocations(commands: &[Command]) -> Vec<Invocation> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Invoke(inv) => Some(inv.clone()),
            _ => None,
        })
        .collect()
}

fn retry_timer(commands: &[Command]) -> Option<Timer> {
    commands.iter().find_map(|c| match c {
        Command::StartTimer {
            timer: timer @ Timer::Retry { .. },
            ..
        } => Some(*timer),
        _ => None,
    })
}

/// The supplier saga with s0–s3 done and the pivot's first attempt out.
fn at_pivot() -> (Saga, Invocation) {
    let mut saga = supplier_unverified();
    let mut next = invocations(&saga.step(Event::Start { now_ms: T0 }));
    let mut now = T0;
    loop {
        let call = next.pop().expect("a call out");
        if call.target == Target::Forward(PIVOT) {
            return (saga, call);
        }
        now += 1;
        next = invocations(&saga.step(Event::Result {
            target: call.target,
            attempt: call.attempt,
            outcome: succeeded(&call.call.skill),
            now_ms: now,
        }));
    }
}

fn answer(saga: &mut Saga, call: &Invocation, outcome: CallOutcome) -> Vec<Command> {
    saga.step(Event::Result {
        target: call.target,
        attempt: call.attempt,
        outcome,
        now_ms: T0 + 100,
    })
}

fn revoke(saga: &mut Saga) -> Vec<Command> {
    saga.step(Event::MandateRevoked { now_ms: T0 + 50 })
}

fn resolutions(saga: &Saga) -> Vec<String> {
    let awaiting = saga.awaiting().expect("the saga waits for a person");
    awaiting["escalation"]["resolutions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_revocation_while_the_pivot_is_out_and_then_times_out_starts_no_attempt_and_asks_a_person() {
    let (mut saga, capture) = at_pivot();
    let told = revoke(&mut saga);
    assert!(invocations(&told).is_empty(), "{told:?}");
    assert_eq!(saga.mandate_end_effect(), MandateEndEffect::HeldAtPivot);
    let timed_out = answer(
        &mut saga,
        &capture,
        CallOutcome::Unknown {
            reason: "timed out".into(),
        },
    );
    // The card allows three attempts; none follows the revocation.
    assert!(invocations(&timed_out).is_empty(), "{timed_out:?}");
    assert_eq!(retry_timer(&timed_out), None, "{timed_out:?}");
    let Phase::Paused { reason, .. } = &saga.phase else {
        panic!("{:?}", saga.phase)
    };
    assert!(
        reason.contains("the mandate was revoked while this step's outcome is unknown"),
        "{reason}"
    );
    assert_eq!(resolutions(&saga), ["resolved-manually", "compensate"]);

    // A person's retry is refused; the saga still waits.
    let retried = saga.step(Event::Resolve {
        resolution: Resolution::Retry,
        now_ms: T0 + 200,
        decider: None,
    });
    assert!(invocations(&retried).is_empty(), "{retried:?}");
    assert!(matches!(saga.phase, Phase::Paused { .. }));

    // "It did not happen": the saga unwinds, for the revocation, with no forward call.
    let unwound = saga.step(Event::Resolve {
        resolution: Resolution::Compensate,
        now_ms: T0 + 300,
        decider: None,
    });
    let calls = invocations(&unwound);
    assert_eq!(calls.len(), 1);
    assert!(matches!(calls[0].target, Target::Compensation(_)));
    assert_eq!(
        saga.phase,
        Phase::Unwinding {
            cause: Cause::MandateRevoked
        }
    );
}

#[test]
fn a_pivot_that_answers_success_after_the_revocation_commits_the_saga_which_finishes() {
    let (mut saga, capture) = at_pivot();
    revoke(&mut saga);
    let then = answer(&mut saga, &capture, succeeded(&capture.call.skill.clone()));
    let calls = invocations(&then);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].target, Target::Forward(PIVOT + 1));
    assert_eq!(saga.mandate_end_effect(), MandateEndEffect::Finishes);
}

#[test]
fn a_pivot_declined_after_the_revocation_unwinds_for_the_revocation() {
    let (mut saga, capture) = at_pivot();
    revoke(&mut saga);
    let then = answer(&mut saga, &capture, CallOutcome::failed("declined"));
    assert!(
        invocations(&then)
            .iter()
            .all(|c| matches!(c.target, Target::Compensation(_)))
    );
    assert_eq!(
        saga.phase,
        Phase::Unwinding {
            cause: Cause::MandateRevoked
        }
    );
}

#[test]
fn a_pivot_waiting_to_retry_when_revoked_is_put_to_a_person_and_its_timer_does_nothing() {
    let (mut saga, capture) = at_pivot();
    let timed_out = answer(
        &mut saga,
        &capture,
        CallOutcome::Unknown {
            reason: "timed out".into(),
        },
    );
    let timer = retry_timer(&timed_out).expect("a retry is due");
    let told = revoke(&mut saga);
    assert!(invocations(&told).is_empty());
    assert!(
        matches!(saga.phase, Phase::Paused { .. }),
        "{:?}",
        saga.phase
    );
    assert!(matches!(
        saga.records[PIVOT].forward,
        Forward::Unknown { .. }
    ));
    let fired = saga.step(Event::TimerFired {
        timer,
        now_ms: T0 + 500,
    });
    assert!(invocations(&fired).is_empty(), "{fired:?}");
}

#[test]
fn a_pivot_lost_in_a_restart_after_the_revocation_is_not_sent_again() {
    let (mut saga, capture) = at_pivot();
    revoke(&mut saga);
    let lost = saga.step(Event::InFlightLost {
        target: capture.target,
        attempt: capture.attempt,
        now_ms: T0 + 100,
    });
    assert!(invocations(&lost).is_empty(), "{lost:?}");
    assert!(matches!(saga.phase, Phase::Paused { .. }));
}

#[test]
fn a_revocation_heard_while_a_person_holds_the_pivot_withdraws_the_retry_offer() {
    let (mut saga, capture) = at_pivot();
    // Three timeouts: the card's attempts are spent, and a person decides.
    let mut call = capture;
    loop {
        let commands = answer(
            &mut saga,
            &call,
            CallOutcome::Unknown {
                reason: "timed out".into(),
            },
        );
        let Some(timer) = retry_timer(&commands) else {
            break;
        };
        call = invocations(&saga.step(Event::TimerFired {
            timer,
            now_ms: T0 + 100,
        }))
        .pop()
        .unwrap();
    }
    assert_eq!(
        resolutions(&saga),
        ["retry", "resolved-manually", "compensate"]
    );
    let told = revoke(&mut saga);
    assert!(
        matches!(told.last(), Some(Command::Pause { .. })),
        "{told:?}"
    );
    assert_eq!(resolutions(&saga), ["resolved-manually", "compensate"]);
    // Heard once: a second revocation (or the expiry) changes nothing more.
    let again = saga.step(Event::TimerFired {
        timer: Timer::MandateExpiry,
        now_ms: T0 + 600,
    });
    assert!(matches!(again.as_slice(), [Command::Ignored { .. }]));
}

/// What a tool does with one call, in the property below.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Succeeds,
    Declines,
    TimesOut,
}

fn answer_strategy() -> impl Strategy<Value = Answer> {
    prop_oneof![
        3 => Just(Answer::Succeeds),
        1 => Just(Answer::Declines),
        2 => Just(Answer::TimesOut),
    ]
}

fn outcome_of(answer: Answer, skill: &str) -> CallOutcome {
    match answer {
        Answer::Succeeds => succeeded(skill),
        Answer::Declines => CallOutcome::failed("declined"),
        Answer::TimesOut => CallOutcome::Unknown {
            reason: "timed out".into(),
        },
    }
}

proptest! {
    /// Whatever the tools answer, and whenever the mandate is revoked (or expires), no
    /// forward attempt at or before the point of no return starts after it, and a
    /// forward call past it starts only once the pivot took effect.
    #[test]
    fn no_forward_attempt_before_the_commitment_follows_an_ended_mandate(
        answers in proptest::collection::vec(answer_strategy(), 40),
        revoke_after in 0usize..30,
        by_expiry in any::<bool>(),
        person in proptest::option::of(prop_oneof![
            Just(Resolution::Retry),
            Just(Resolution::ResolvedManually),
            Just(Resolution::Compensate),
        ]),
    ) {
        let mut saga = supplier();
        let mut person = person;
        let mut events = vec![Event::Start { now_ms: T0 }];
        let mut answers = answers.into_iter();
        let mut stepped = 0usize;
        let mut told = false;
        let mut now = T0;
        while let Some(event) = events.pop() {
            now += 1;
            let commands = saga.step(event);
            stepped += 1;
            for command in &commands {
                match command {
                    Command::Invoke(inv) => {
                        if told && let Target::Forward(i) = inv.target {
                            prop_assert!(i > PIVOT && saga.committed(), "{inv:?} after the revocation");
                        }
                        let answer = answers.next().unwrap_or(Answer::Succeeds);
                        events.insert(0, Event::Result {
                            target: inv.target,
                            attempt: inv.attempt,
                            outcome: outcome_of(answer, &inv.call.skill),
                            now_ms: now,
                        });
                    }
                    Command::StartTimer { timer: timer @ Timer::Retry { .. }, .. } => {
                        events.insert(0, Event::TimerFired { timer: *timer, now_ms: now });
                    }
                    _ => {}
                }
            }
            if !told && stepped > revoke_after {
                told = true;
                events.push(if by_expiry {
                    Event::TimerFired { timer: Timer::MandateExpiry, now_ms: now }
                } else {
                    Event::MandateRevoked { now_ms: now }
                });
            }
            if events.is_empty()
                && matches!(saga.phase, Phase::Paused { .. })
                && let Some(resolution) = person.take()
            {
                // One answer from a person, whichever is offered or not.
                events.push(Event::Resolve { resolution, now_ms: now, decider: None });
                stepped += 1;
                if !told {
                    told = true;
                    events.push(Event::MandateRevoked { now_ms: now });
                }
            }
            prop_assert!(stepped < 500, "the saga does not settle");
        }
    }
}

/// Replays `entries` and returns what the driver would do once told of a revocation
/// that the process recorded before it stopped.
fn resumed_after_revocation(entries: &[crate::journal::Entry]) -> (Saga, Vec<Command>, usize) {
    let mut recovered =
        crate::recovery::replay(supplier_unverified().spec, entries, T0 + 1_000).unwrap();
    recovered.tell_revoked(T0 + 1_000);
    let made = recovered.to_invoke.len();
    let mut saga = recovered.saga;
    let commands = recovered
        .lost
        .into_iter()
        .flat_map(|event| saga.step(event))
        .collect();
    (saga, commands, made)
}

#[test]
fn a_revocation_recorded_before_a_restart_is_heard_before_any_call_is_made_again() {
    use crate::journal::Entry;
    // The journal of a saga at its pivot: the pivot decided, its intent not yet written
    // (the process stopped in between): the capture never left.
    let mut saga = supplier_unverified();
    let mut entries = Vec::new();
    let mut event = Event::Start { now_ms: T0 };
    loop {
        let calls = invocations(&saga.step(event.clone()));
        entries.push(Entry::Event(event));
        let call = calls.into_iter().next().unwrap();
        if call.target == Target::Forward(PIVOT) {
            break;
        }
        entries.push(Entry::Intent(call.clone()));
        event = Event::Result {
            target: call.target,
            attempt: call.attempt,
            outcome: succeeded(&call.call.skill),
            now_ms: T0 + 1,
        };
    }
    let (saga, commands, made) = resumed_after_revocation(&entries);
    assert_eq!(made, 0, "the capture decided before the stop is not made");
    assert!(
        invocations(&commands)
            .iter()
            .all(|c| matches!(c.target, Target::Compensation(_))),
        "{commands:?}"
    );
    assert_eq!(
        saga.phase,
        Phase::Unwinding {
            cause: Cause::MandateRevoked
        }
    );

    // Its intent written (the capture may have left), no answer: a person decides.
    let mut sent = entries.clone();
    let capture = invocations(&supplier_at(&entries)).pop().unwrap();
    sent.push(Entry::Intent(capture));
    let (saga, commands, _) = resumed_after_revocation(&sent);
    assert!(invocations(&commands).is_empty(), "{commands:?}");
    assert!(
        matches!(saga.phase, Phase::Paused { .. }),
        "{:?}",
        saga.phase
    );
}

/// The commands of the last event of `entries`, replayed on a fresh supplier saga.
fn supplier_at(entries: &[crate::journal::Entry]) -> Vec<Command> {
    let mut saga = supplier_unverified();
    let mut last = Vec::new();
    for entry in entries {
        if let crate::journal::Entry::Event(event) = entry {
            last = saga.step(event.clone());
        }
    }
    last
}

/// A saga accepted and waiting for a slot (never started) that is canceled or whose
/// mandate is revoked ends there: no call, nothing to undo, and a later start is ignored.
#[test]
fn a_saga_not_started_ends_on_a_cancel_or_a_revocation_without_a_call() {
    let ends: [(Event, Ending); 2] = [
        (Event::Cancel { now_ms: T0 }, Ending::Canceled),
        (Event::MandateRevoked { now_ms: T0 }, Ending::Compensated),
    ];
    for (event, ending) in ends {
        let mut saga = supplier();
        assert_eq!(saga.phase, Phase::NotStarted);
        let commands = saga.step(event.clone());
        assert!(invocations(&commands).is_empty(), "{event:?}: {commands:?}");
        assert_eq!(saga.phase, Phase::Done { ending }, "{event:?}");
        let later = saga.step(Event::Start { now_ms: T0 + 1 });
        assert!(invocations(&later).is_empty(), "{event:?}: {later:?}");
        assert_eq!(saga.phase, Phase::Done { ending });
    }
}
