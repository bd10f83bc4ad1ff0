//! An approval at the moment of effect: a step approved and not called yet, or waiting to
//! be tried again, is not called once its approval is withdrawn or has expired, and what
//! it had done decides what follows (asked again, or in doubt). Scripted events, no clock.

use serde_json::Value;

use super::event_tests::state;
use super::model::{Forward, Phase, Undo};
use super::tests::{approval_of_pause, ok, saga_from, start};
use super::*;

const T0: i64 = 1_800_000_000_000;
/// The review step of the plan below, which needs approval.
const REVIEW: usize = 2;

/// A saga approved at its review (valid until `T0 + 60 s`) whose first attempt answered
/// `outcome`: it waits to try again. The events it took, in order, for replay.
fn approved_then(outcome: CallOutcome) -> (Saga, Vec<Event>) {
    let (mut saga, mut events) = paused_for_review();
    let approve = Event::Resolve {
        resolution: Resolution::Approve,
        now_ms: T0 + 100,
        decider: Some(approval_of_pause(&saga, "alice", T0 + 60_000)),
    };
    let result = Event::Result {
        target: Target::Forward(REVIEW),
        attempt: 1,
        outcome,
        now_ms: T0 + 200,
    };
    let proceed = Event::Proceed { now_ms: T0 + 110 };
    for event in [approve, proceed, result] {
        saga.step(event.clone());
        events.push(event);
    }
    assert!(
        matches!(saga.records[REVIEW].forward, Forward::WaitingRetry { .. }),
        "{:?}",
        saga.records[REVIEW].forward
    );
    (saga, events)
}

fn transient() -> CallOutcome {
    CallOutcome::Failed {
        reason: "busy".into(),
        failure: Some(FailureClass::Transient),
    }
}

fn timed_out() -> CallOutcome {
    CallOutcome::Unknown {
        reason: "timed out".into(),
    }
}

fn withdrawal(saga: &Saga, by: &str, step: usize, now_ms: i64) -> Event {
    Event::Resolve {
        resolution: Resolution::Withdraw,
        now_ms,
        decider: Some(Decider {
            by: by.into(),
            approval: None,
            withdrawal: Some(Withdrawal {
                saga_id: saga.spec.saga_id.clone(),
                step_id: saga.spec.steps[step].id.clone(),
            }),
            message_id: None,
        }),
    }
}

fn retry_fires(now_ms: i64) -> Event {
    Event::TimerFired {
        timer: Timer::Retry {
            target: Target::Forward(REVIEW),
            attempt: 2,
        },
        now_ms,
    }
}

fn invokes(commands: &[Command]) -> Vec<(Target, u32)> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Invoke(i) => Some((i.target, i.attempt)),
            _ => None,
        })
        .collect()
}

/// Asserts that `commands` put the review to a person for approval again, `why`.
fn asked_again(saga: &Saga, commands: &[Command], why: &str) {
    let Some(Command::Pause { reason }) = commands.last() else {
        panic!("{commands:?}");
    };
    assert!(
        reason.contains(&format!("needs approval again: {why}")),
        "{reason}"
    );
    assert_eq!(saga.records[REVIEW].forward, Forward::AwaitingApproval);
}

fn ignored(commands: &[Command]) -> bool {
    matches!(commands, [Command::Ignored { .. }])
}

/// The same saga, rebuilt from `events` alone.
fn replayed(events: &[Event]) -> Saga {
    let mut saga = saga_from("examples/plans/invalid/undo-ttl-too-short.json");
    for event in events {
        saga.step(event.clone());
    }
    saga
}

#[test]
fn a_withdrawn_approval_of_a_step_that_failed_is_asked_again_and_the_step_not_called() {
    let (mut saga, mut events) = approved_then(transient());
    let withdraw = withdrawal(&saga, "carol", REVIEW, T0 + 300);
    let commands = saga.step(withdraw.clone());
    events.push(withdraw);
    assert_eq!(invokes(&commands), []);
    assert!(commands.iter().any(
        |c| matches!(c, Command::Report { what, .. } if what == "approval withdrawn by carol")
    ));
    assert!(commands.contains(&Command::StartTimer {
        timer: Timer::ApprovalTimeout {
            step: REVIEW,
            round: 1
        },
        after_ms: saga.spec.steps[REVIEW].approval_timeout_ms.unwrap(),
    }));
    asked_again(&saga, &commands, "its approval was withdrawn by carol");
    // The retry it waited for, and the first wait's timeout, change nothing now.
    for stale in [
        retry_fires(T0 + 400),
        Event::TimerFired {
            timer: Timer::ApprovalTimeout {
                step: REVIEW,
                round: 0,
            },
            now_ms: T0 + 500,
        },
    ] {
        assert!(ignored(&saga.step(stale.clone())), "{stale:?}");
        events.push(stale);
    }
    // Approved again: the next attempt under the same key.
    let approve = Event::Resolve {
        resolution: Resolution::Approve,
        now_ms: T0 + 600,
        decider: Some(approval_of_pause(&saga, "alice", T0 + 60_000)),
    };
    assert_eq!(invokes(&saga.step(approve.clone())), []);
    events.push(approve);
    let proceed = Event::Proceed { now_ms: T0 + 610 };
    let commands = saga.step(proceed.clone());
    events.push(proceed);
    assert_eq!(invokes(&commands), [(Target::Forward(REVIEW), 2)]);
    let decisions = &saga.ledger()["steps"][REVIEW]["decisions"];
    let said: Vec<&Value> = decisions
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["resolution"])
        .collect();
    assert_eq!(said, ["approve", "withdraw", "approve"]);
    assert_eq!(decisions[1]["by"], "carol");
    assert_eq!(
        state(&replayed(&events)),
        state(&saga),
        "the journal rebuilds it"
    );
}

#[test]
fn asked_again_after_a_withdrawal_a_refusal_unwinds_with_nothing_of_the_step_to_undo() {
    let (mut saga, _) = approved_then(transient());
    saga.step(withdrawal(&saga, "carol", REVIEW, T0 + 300));
    let run = super::tests::drive(
        &mut saga,
        Event::Resolve {
            resolution: Resolution::Compensate,
            now_ms: T0 + 400,
            decider: None,
        },
        &mut ok,
    );
    assert_eq!(run.skills(), ["budget.release", "vendor.archive"]);
    assert_eq!(run.ending(), Some(Ending::Compensated));
    assert!(matches!(
        saga.records[REVIEW].undo,
        Undo::NothingToUndo | Undo::NotNeeded
    ));
    // Asked again, unanswered: the new wait times out on its own timer.
    let (mut saga, _) = approved_then(transient());
    saga.step(withdrawal(&saga, "carol", REVIEW, T0 + 300));
    let run = super::tests::drive(
        &mut saga,
        Event::TimerFired {
            timer: Timer::ApprovalTimeout {
                step: REVIEW,
                round: 1,
            },
            now_ms: T0 + 900,
        },
        &mut ok,
    );
    assert_eq!(run.skills(), ["budget.release", "vendor.archive"]);
    assert_eq!(run.ending(), Some(Ending::Compensated));
}

#[test]
fn a_withdrawn_approval_of_a_step_in_doubt_is_not_tried_again_and_the_doubt_is_settled_as_any() {
    let (mut saga, _) = approved_then(timed_out());
    let commands = saga.step(withdrawal(&saga, "carol", REVIEW, T0 + 300));
    // Not called again: its outcome stays unknown, and before the pivot the saga unwinds.
    assert_eq!(
        invokes(&commands),
        [(Target::Compensation(1), 1)],
        "{commands:?}"
    );
    let Forward::Unknown { reason } = &saga.records[REVIEW].forward else {
        panic!("{:?}", saga.records[REVIEW].forward);
    };
    assert!(
        reason.contains("its retry was not made: its approval was withdrawn by carol"),
        "{reason}"
    );
    assert!(matches!(saga.phase, Phase::Unwinding { .. }));
}

#[test]
fn an_approval_that_expired_while_its_step_waited_to_retry_is_asked_again() {
    let (mut saga, _) = approved_then(transient());
    // The approval lasted until T0 + 60 s; the retry comes later.
    let commands = saga.step(retry_fires(T0 + 61_000));
    assert_eq!(invokes(&commands), []);
    asked_again(&saga, &commands, "its approval by alice expired at");
    // Within its life, the retry is made.
    let (mut saga, _) = approved_then(transient());
    let commands = saga.step(retry_fires(T0 + 59_000));
    assert_eq!(invokes(&commands), [(Target::Forward(REVIEW), 2)]);
}

#[test]
fn a_call_lost_in_a_stop_is_not_sent_again_once_its_approval_expired() {
    let mut saga = saga_from("examples/plans/invalid/undo-ttl-too-short.json");
    start(&mut saga, &mut ok);
    let decider = approval_of_pause(&saga, "alice", T0 + 60_000);
    saga.step(Event::Resolve {
        resolution: Resolution::Approve,
        now_ms: T0 + 100,
        decider: Some(decider),
    });
    saga.step(Event::Proceed { now_ms: T0 + 110 });
    let lost = |now_ms| Event::InFlightLost {
        target: Target::Forward(REVIEW),
        attempt: 1,
        now_ms,
    };
    let mut within = saga.clone();
    assert_eq!(
        invokes(&within.step(lost(T0 + 30_000))),
        [(Target::Forward(REVIEW), 1)],
        "an idempotent call is sent again while its approval holds"
    );
    let commands = saga.step(lost(T0 + 61_000));
    assert!(!invokes(&commands).contains(&(Target::Forward(REVIEW), 1)));
    let Forward::Unknown { reason } = &saga.records[REVIEW].forward else {
        panic!("{:?}", saga.records[REVIEW].forward);
    };
    assert!(reason.contains("its approval by alice expired"), "{reason}");
}

#[test]
fn a_withdrawal_of_a_call_out_made_or_never_approved_changes_nothing() {
    // Waiting for its approval: nothing to withdraw.
    let mut saga = saga_from("examples/plans/invalid/undo-ttl-too-short.json");
    start(&mut saga, &mut ok);
    let before = state(&saga);
    assert!(ignored(&saga.step(withdrawal(
        &saga,
        "carol",
        REVIEW,
        T0 + 50
    ))));
    assert_eq!(state(&saga), before);
    // Approved, its call out: too late.
    saga.step(Event::Resolve {
        resolution: Resolution::Approve,
        now_ms: T0 + 100,
        decider: Some(approval_of_pause(&saga, "alice", T0 + 60_000)),
    });
    saga.step(Event::Proceed { now_ms: T0 + 110 });
    let before = state(&saga);
    assert!(ignored(&saga.step(withdrawal(
        &saga,
        "carol",
        REVIEW,
        T0 + 150
    ))));
    assert_eq!(state(&saga), before);
    // Another saga's step, or a step without approval.
    let (mut saga, _) = approved_then(transient());
    let before = state(&saga);
    let mut elsewhere = withdrawal(&saga, "carol", REVIEW, T0 + 300);
    if let Event::Resolve {
        decider: Some(d), ..
    } = &mut elsewhere
        && let Some(w) = d.withdrawal.as_mut()
    {
        w.saga_id = "sg_other".into();
    }
    assert!(ignored(&saga.step(elsewhere)));
    assert!(ignored(&saga.step(withdrawal(&saga, "carol", 1, T0 + 300))));
    assert_eq!(state(&saga), before);
}

#[test]
fn a_revocation_while_a_step_waits_to_retry_after_a_definite_failure_undoes_nothing_of_it() {
    let mut saga = super::tests::supplier();
    let first = saga.step(Event::Start { now_ms: T0 });
    assert_eq!(invokes(&first), [(Target::Forward(0), 1)]);
    saga.step(Event::Result {
        target: Target::Forward(0),
        attempt: 1,
        outcome: ok_of("vendor.create"),
        now_ms: T0 + 10,
    });
    saga.step(Event::Result {
        target: Target::Forward(1),
        attempt: 1,
        outcome: transient(),
        now_ms: T0 + 20,
    });
    // Heard while the step waits: its retry is abandoned when its timer fires.
    let heard = saga.step(Event::MandateRevoked { now_ms: T0 + 30 });
    assert_eq!(invokes(&heard), []);
    let retry = Event::TimerFired {
        timer: Timer::Retry {
            target: Target::Forward(1),
            attempt: 2,
        },
        now_ms: T0 + 40,
    };
    let run = super::tests::drive(&mut saga, retry, &mut ok);
    assert_eq!(
        run.skills(),
        ["vendor.archive"],
        "budget.reserve took no effect"
    );
    assert_eq!(run.ending(), Some(Ending::Compensated));
    assert!(matches!(saga.records[1].forward, Forward::Failed { .. }));
    assert_eq!(saga.records[1].undo, Undo::NothingToUndo);
}

fn ok_of(skill: &str) -> CallOutcome {
    CallOutcome::Succeeded {
        response: super::tests::response(skill),
    }
}

/// The saga as it pauses for the review's approval, and the events it took.
fn paused_for_review() -> (Saga, Vec<Event>) {
    let mut saga = saga_from("examples/plans/invalid/undo-ttl-too-short.json");
    let mut events = vec![Event::Start { now_ms: T0 }];
    start(&mut saga, &mut ok);
    for (i, skill) in ["vendor.create", "budget.reserve"].iter().enumerate() {
        events.push(Event::Result {
            target: Target::Forward(i),
            attempt: 1,
            outcome: CallOutcome::Succeeded {
                response: super::tests::response(skill),
            },
            now_ms: T0 + 10 * (i as i64 + 1),
        });
    }
    assert_eq!(saga.records[REVIEW].forward, Forward::AwaitingApproval);
    (saga, events)
}

#[test]
fn an_approval_withdrawn_before_its_step_is_called_makes_no_call_and_is_asked_again() {
    let (mut saga, mut events) = paused_for_review();
    let approve = Event::Resolve {
        resolution: Resolution::Approve,
        now_ms: T0 + 100,
        decider: Some(approval_of_pause(&saga, "alice", T0 + 60_000)),
    };
    // Approved: journaled and shown, and nothing called until the driver has a slot.
    let commands = saga.step(approve.clone());
    events.push(approve);
    assert_eq!(invokes(&commands), []);
    assert!(
        commands
            .iter()
            .any(|c| matches!(c, Command::Report { what, .. }
        if what == "approved by alice; called once the saga has a slot"))
    );
    assert_eq!(saga.records[REVIEW].forward, Forward::Approved);
    assert_eq!(saga.records[REVIEW].attempts, 0);
    assert!(saga.awaits_slot_to_call());
    assert_eq!(saga.spent_minor(), 0, "nothing of it took effect");

    let withdraw = withdrawal(&saga, "carol", REVIEW, T0 + 200);
    let commands = saga.step(withdraw.clone());
    events.push(withdraw);
    assert_eq!(invokes(&commands), []);
    asked_again(&saga, &commands, "its approval was withdrawn by carol");
    assert!(!saga.awaits_slot_to_call());
    // A slot that comes after the withdrawal calls nothing.
    let late = Event::Proceed { now_ms: T0 + 300 };
    assert!(ignored(&saga.step(late.clone())));
    events.push(late);
    assert_eq!(
        saga.records[REVIEW].attempts, 0,
        "the review was never called"
    );
    assert_eq!(
        state(&replayed(&events)),
        state(&saga),
        "the journal rebuilds it"
    );
}

#[test]
fn an_approval_that_expired_while_its_step_waited_for_a_slot_is_asked_again() {
    let (mut saga, _) = paused_for_review();
    saga.step(Event::Resolve {
        resolution: Resolution::Approve,
        now_ms: T0 + 100,
        decider: Some(approval_of_pause(&saga, "alice", T0 + 60_000)),
    });
    let commands = saga.step(Event::Proceed {
        now_ms: T0 + 61_000,
    });
    assert_eq!(invokes(&commands), []);
    asked_again(&saga, &commands, "its approval by alice expired at");
}

#[test]
fn a_cancel_while_an_approved_step_waits_for_a_slot_unwinds_with_nothing_of_it_to_undo() {
    let (mut saga, _) = paused_for_review();
    saga.step(Event::Resolve {
        resolution: Resolution::Approve,
        now_ms: T0 + 100,
        decider: Some(approval_of_pause(&saga, "alice", T0 + 60_000)),
    });
    let run = super::tests::drive(&mut saga, Event::Cancel { now_ms: T0 + 200 }, &mut ok);
    assert_eq!(run.skills(), ["budget.release", "vendor.archive"]);
    assert_eq!(run.ending(), Some(Ending::Canceled));
    assert_eq!(saga.records[REVIEW].forward, Forward::Pending);
    assert!(matches!(
        saga.records[REVIEW].undo,
        Undo::NothingToUndo | Undo::NotNeeded
    ));
}
