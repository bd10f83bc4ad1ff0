//! The approved-arguments check at the moment of effect (`Saga::approval_current`): an
//! approval names the arguments it approves by their hash, and an approved step whose
//! next call would carry other arguments is not called, but put to a person again.
//! Scripted events, no clock.
//!
//! Between an approval and its step's call nothing a binding reads changes: the approved
//! step counts as under way, so no other step starts, and the responses of the steps
//! before it are settled. Only replay pinning the step's journaled call
//! (`Event::ReplayDiverged`) makes the next call differ from the binding; the approval
//! is asked for, and checked against, the call that would be made (the pinned one).

use serde_json::{Value, json};

use super::model::Forward;
use super::tests::{approval_of_pause, ok, saga_from, start};
use super::*;

const T0: i64 = 1_800_000_000_000;
/// The review step of the plan below, which needs approval.
const REVIEW: usize = 2;

/// The saga waiting for its review's approval, and the review's arguments as bound.
fn waiting() -> (Saga, Value) {
    let mut saga = saga_from("examples/plans/invalid/undo-ttl-too-short.json");
    start(&mut saga, &mut ok);
    assert_eq!(saga.records[REVIEW].forward, Forward::AwaitingApproval);
    let bound = saga.records[REVIEW].request.as_deref().unwrap().clone();
    (saga, bound)
}

/// What recovery tells the engine when the journal holds the review's first call with
/// `journaled` arguments where replay bound `bound` (an upgrade that binds otherwise).
fn diverged(saga: &Saga, journaled: Value, bound: Value, now_ms: i64) -> Event {
    let step = &saga.spec.steps[REVIEW];
    Event::ReplayDiverged {
        target: Target::Forward(REVIEW),
        attempt: 1,
        journaled: Box::new(Invocation {
            target: Target::Forward(REVIEW),
            attempt: 1,
            call: step.call.clone(),
            args: journaled,
            idempotency_key: step.idempotency_key.clone(),
        }),
        derived_args: bound,
        derived_key: step.idempotency_key.clone(),
        now_ms,
    }
}

/// The saga approved (as its pause shows it) at `now_ms`, and given its slot.
fn approve_and_proceed(saga: &mut Saga, now_ms: i64) -> Vec<Command> {
    let approve = Event::Resolve {
        resolution: Resolution::Approve,
        now_ms,
        decider: Some(approval_of_pause(saga, "alice", T0 + 60_000)),
    };
    let approved = saga.step(approve);
    assert!(
        !approved.iter().any(|c| matches!(c, Command::Invoke(_))),
        "{approved:?}"
    );
    assert_eq!(saga.records[REVIEW].forward, Forward::Approved);
    saga.step(Event::Proceed {
        now_ms: now_ms + 10,
    })
}

fn invoked(commands: &[Command]) -> Vec<&Invocation> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Invoke(invocation) => Some(invocation),
            _ => None,
        })
        .collect()
}

/// Pinned while it waits for its approval, the step is shown, approved and called with
/// the journaled arguments: the approval names the call that is made.
#[test]
fn a_step_pinned_while_it_waits_is_approved_and_called_with_the_journaled_arguments() {
    let (mut saga, bound) = waiting();
    let mut journaled = bound.clone();
    journaled["vendorId"] = json!("v_journaled");
    saga.step(diverged(&saga, journaled.clone(), bound.clone(), T0 + 50));
    // Still waiting for the approval, which is now asked for the journaled arguments.
    let shown = saga.awaiting().unwrap();
    assert_eq!(shown["approval"]["args"], journaled);

    let commands = approve_and_proceed(&mut saga, T0 + 100);
    let called: Vec<&Value> = invoked(&commands).iter().map(|i| &i.args).collect();
    assert_eq!(called, [&journaled], "{commands:?}");
    let decisions = &saga.records[REVIEW].decisions;
    assert_eq!(
        decisions[0].args_sha256.as_deref(),
        shared_types::json::canonical_sha256(&journaled)
            .ok()
            .as_deref()
    );
}

/// Approved with the arguments it binds, then pinned by replay to other journaled ones:
/// the call that would be made is not the one approved, so it is not made, and the step
/// is put to a person again, for the journaled arguments.
#[test]
fn an_approved_step_whose_call_replay_pinned_to_other_arguments_is_not_called() {
    let (mut saga, bound) = waiting();
    let approve = Event::Resolve {
        resolution: Resolution::Approve,
        now_ms: T0 + 100,
        decider: Some(approval_of_pause(&saga, "alice", T0 + 60_000)),
    };
    saga.step(approve);
    assert_eq!(saga.records[REVIEW].forward, Forward::Approved);
    let mut journaled = bound.clone();
    journaled["vendorId"] = json!("v_journaled");
    saga.step(diverged(&saga, journaled.clone(), bound.clone(), T0 + 150));
    // The divergence stops the saga for a person: no slot is asked for meanwhile, and a
    // late one calls nothing.
    assert!(!saga.awaits_slot_to_call());
    let late = saga.step(Event::Proceed { now_ms: T0 + 160 });
    assert!(
        matches!(late.as_slice(), [Command::Ignored { .. }]),
        "{late:?}"
    );
    // Told to try it, the saga calls the step only once it is approved for what is sent.
    let commands = saga.step(Event::Resolve {
        resolution: Resolution::Retry,
        now_ms: T0 + 200,
        decider: None,
    });
    assert_eq!(invoked(&commands), Vec::<&Invocation>::new());
    let Some(Command::Pause { reason }) = commands.last() else {
        panic!("{commands:?}");
    };
    assert!(
        reason.contains(
            "needs approval again: the arguments it would be sent are not those approved"
        ),
        "{reason}"
    );
    assert_eq!(saga.records[REVIEW].forward, Forward::AwaitingApproval);
    assert_eq!(saga.awaiting().unwrap()["approval"]["args"], journaled);
    assert!(commands.contains(&Command::StartTimer {
        timer: Timer::ApprovalTimeout {
            step: REVIEW,
            round: 1
        },
        after_ms: saga.spec.steps[REVIEW].approval_timeout_ms.unwrap(),
    }));
}
