//! The engine asking a tool whether a compensation in doubt took effect, rather than
//! making it again: the supplier saga, its budget declined (so the vendor is archived),
//! with `vendor.archive` declaring `vendor.status` (read-only) as its verification.

use serde_json::json;

use super::model::{PauseOn, Phase, Undo};
use super::spec::VerificationSpec;
use super::tests::{drive, ok, start, supplier};
use super::*;

const T0: i64 = 1_800_000_000_000;

/// The supplier saga whose vendor's compensation declares a verification; `idempotent`
/// says whether the compensation itself is.
fn archive_verified(idempotent: bool) -> Saga {
    let mut saga = supplier();
    let compensation = saga.spec_mut().steps[0].compensation.as_mut().unwrap();
    compensation.call.idempotent = idempotent;
    let mut call = compensation.call.clone();
    call.skill = "vendor.status".into();
    call.idempotent = true;
    compensation.verification = Some(VerificationSpec {
        call,
        args: json!({"forwardKey": "$step.idempotencyKey"}),
        response_schema: Some(json!({"type": "object", "required": ["archived"]})),
    });
    saga
}

/// The budget declines, every archive times out, and the status call answers `status`.
fn archive_in_doubt(status: CallOutcome) -> impl FnMut(&Invocation) -> CallOutcome {
    move |inv| match inv.call.skill.as_str() {
        "budget.reserve" => CallOutcome::Failed {
            reason: "declined".into(),
            failure: Some(FailureClass::Permanent),
        },
        "vendor.archive" => CallOutcome::Unknown {
            reason: "timed out".into(),
        },
        "vendor.status" => status.clone(),
        _ => ok(inv),
    }
}

fn answered(body: serde_json::Value) -> CallOutcome {
    CallOutcome::Succeeded { response: body }
}

#[test]
fn a_compensation_that_is_not_idempotent_is_verified_at_once_and_not_made_again() {
    let mut saga = archive_verified(false);
    let status = answered(json!({"status": "applied", "response": {"archived": true}}));
    let run = start(&mut saga, &mut archive_in_doubt(status));
    assert_eq!(
        run.skills(),
        [
            "vendor.create",
            "budget.reserve",
            "vendor.archive",
            "vendor.status"
        ]
    );
    // Asked under a key of its own, about the compensation's key.
    let undo_key = &saga.spec.steps[0]
        .compensation
        .as_ref()
        .unwrap()
        .idempotency_key;
    let (_, key, args) = &run.calls[3];
    assert_eq!(key, &format!("{undo_key}:verify:1"));
    assert_eq!(args, &json!({"forwardKey": undo_key}));
    assert_eq!(run.ending(), Some(Ending::Compensated));
    assert_eq!(saga.records[0].undo, Undo::Done);
    assert_eq!(
        saga.records[0].undo_response.as_deref(),
        Some(&json!({"archived": true}))
    );
}

#[test]
fn an_idempotent_compensation_is_tried_again_under_its_key_then_verified() {
    let mut saga = archive_verified(true);
    let status = answered(json!({"status": "applied", "response": {"archived": true}}));
    let run = start(&mut saga, &mut archive_in_doubt(status));
    let attempts = saga.spec.steps[0]
        .compensation
        .as_ref()
        .unwrap()
        .call
        .retry
        .max_attempts;
    let archives = run
        .skills()
        .iter()
        .filter(|s| **s == "vendor.archive")
        .count();
    assert_eq!(archives, attempts as usize);
    assert_eq!(run.skills().last(), Some(&"vendor.status"));
    assert_eq!(run.ending(), Some(Ending::Compensated));
}

#[test]
fn a_compensation_verified_not_applied_or_unsettled_goes_to_a_person_who_may_retry_it() {
    for status in [
        answered(json!({"status": "not-applied"})),
        answered(json!({"status": "unknown"})),
        answered(json!({"status": "applied", "response": {"other": 1}})),
        CallOutcome::failed("503"),
    ] {
        let mut saga = archive_verified(false);
        let run = start(&mut saga, &mut archive_in_doubt(status.clone()));
        assert_eq!(run.skills().last(), Some(&"vendor.status"), "{status:?}");
        assert!(
            matches!(
                saga.phase,
                Phase::Paused {
                    on: PauseOn::Compensation { step: 0, .. },
                    ..
                }
            ),
            "{status:?}: {:?}",
            saga.phase
        );
        assert!(matches!(saga.records[0].undo, Undo::DeadLettered { .. }));
        let run = drive(
            &mut saga,
            Event::Resolve {
                resolution: Resolution::Retry,
                now_ms: T0 + 1_000,
                decider: None,
            },
            &mut ok,
        );
        assert_eq!(run.skills(), ["vendor.archive"], "{status:?}");
        assert_eq!(run.ending(), Some(Ending::Compensated));
    }
}

#[test]
fn without_a_verification_a_compensation_that_is_not_idempotent_goes_to_a_person_at_once() {
    let mut saga = archive_verified(false);
    saga.spec_mut().steps[0]
        .compensation
        .as_mut()
        .unwrap()
        .verification = None;
    let never = answered(json!({}));
    let run = start(&mut saga, &mut archive_in_doubt(never));
    let archives = run
        .skills()
        .iter()
        .filter(|s| **s == "vendor.archive")
        .count();
    assert_eq!(archives, 1, "not made again blindly: {:?}", run.skills());
    assert!(matches!(saga.records[0].undo, Undo::DeadLettered { .. }));
    assert!(matches!(run.last(), Command::Pause { .. }));
}

#[test]
fn a_stop_while_a_compensation_or_its_verification_is_out_asks_the_tool() {
    // The archive (not idempotent) out when the process stopped: asked, not made again.
    let mut saga = archive_verified(false);
    let held = |inv: &Invocation| match inv.call.skill.as_str() {
        "vendor.archive" => None,
        _ => Some(archive_in_doubt(answered(json!({})))(inv)),
    };
    let mut queue = vec![Event::Start { now_ms: T0 }];
    let mut out_call = None;
    while let Some(event) = queue.pop() {
        for command in saga.step(event) {
            if let Command::Invoke(inv) = command {
                match held(&inv) {
                    Some(outcome) => queue.push(Event::Result {
                        target: inv.target,
                        attempt: inv.attempt,
                        outcome,
                        now_ms: T0 + 10,
                    }),
                    None => out_call = Some(inv),
                }
            }
        }
    }
    let archive = out_call.expect("the archive is out");
    let lost = saga.step(Event::InFlightLost {
        target: archive.target,
        attempt: archive.attempt,
        now_ms: T0 + 20,
    });
    let asked: Vec<&Invocation> = lost
        .iter()
        .filter_map(|c| match c {
            Command::Invoke(inv) => Some(inv),
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 1, "{lost:?}");
    assert_eq!(asked[0].call.skill, "vendor.status");
    assert_eq!(asked[0].target, Target::Verification(0));
    // Its verification lost in turn: asked again, under the same key.
    let again = saga.step(Event::InFlightLost {
        target: Target::Verification(0),
        attempt: asked[0].attempt,
        now_ms: T0 + 30,
    });
    assert!(
        again.iter().any(|c| matches!(c, Command::Invoke(inv)
            if inv.call.skill == "vendor.status" && inv.idempotency_key == asked[0].idempotency_key)),
        "{again:?}"
    );
    let run = drive(
        &mut saga,
        Event::Result {
            target: Target::Verification(0),
            attempt: asked[0].attempt,
            outcome: answered(json!({"status": "applied", "response": {"archived": true}})),
            now_ms: T0 + 40,
        },
        &mut ok,
    );
    assert_eq!(run.ending(), Some(Ending::Compensated));
}
