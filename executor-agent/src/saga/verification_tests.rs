//! The engine asking a tool whether a call in doubt took effect: the supplier saga's
//! capture (the pivot, idempotent, three attempts) declares `payments.status`.

use serde_json::json;

use super::model::{Forward, Undo};
use super::tests::{drive, ok, start, supplier};
use super::*;

const T0: i64 = 1_800_000_000_000;

/// Every call succeeds, but every capture times out, and the status call answers `status`.
fn capture_in_doubt(status: CallOutcome) -> impl FnMut(&Invocation) -> CallOutcome {
    move |inv| match inv.call.skill.as_str() {
        "payments.capture" => CallOutcome::Unknown {
            reason: "timed out".into(),
        },
        "payments.status" => status.clone(),
        _ => ok(inv),
    }
}

fn answered(body: serde_json::Value) -> CallOutcome {
    CallOutcome::Succeeded { response: body }
}

fn capture() -> serde_json::Value {
    json!({"captureId": "cap_0001", "amountMinor": 12000, "currency": "EUR"})
}

#[test]
fn a_capture_verified_applied_succeeds_with_the_response_it_gave_and_the_saga_goes_on() {
    let mut saga = supplier();
    let status = answered(json!({"status": "applied", "response": capture()}));
    let run = start(&mut saga, &mut capture_in_doubt(status));
    assert_eq!(
        &run.skills()[4..],
        [
            "payments.capture",
            "payments.capture",
            "payments.capture",
            "payments.status",
            "email.send"
        ]
    );
    // Asked under a key of its own, for the attempt in doubt, with the capture's key.
    let (_, key, args) = &run.calls[7];
    let capture_key = &saga.spec.steps[4].idempotency_key;
    assert_eq!(key, &format!("{capture_key}:verify:3"));
    assert_eq!(args, &json!({"forwardKey": capture_key}));
    assert_eq!(run.ending(), Some(Ending::Completed));
    assert!(
        matches!(&saga.records[4].forward, Forward::Succeeded { response, .. } if **response == capture())
    );
}

#[test]
fn a_capture_verified_not_applied_fails_definitely_and_the_saga_unwinds() {
    let mut saga = supplier();
    let status = answered(json!({"status": "not-applied"}));
    let run = start(&mut saga, &mut capture_in_doubt(status));
    assert_eq!(
        &run.skills()[7..],
        [
            "payments.status",
            "sandbox.deprovision",
            "budget.release",
            "vendor.archive"
        ]
    );
    assert_eq!(run.ending(), Some(Ending::Compensated));
    assert!(matches!(saga.records[4].forward, Forward::Failed { .. }));
}

#[test]
fn a_verification_that_cannot_say_leaves_the_pivot_to_a_person_and_calls_nothing_more() {
    for status in [
        answered(json!({"status": "unknown"})),
        answered(json!({"status": "applied"})),
        answered(json!({"status": "applied", "response": {"captureId": 7}})),
        answered(json!({"whatever": true})),
        CallOutcome::failed("payments.status is down"),
        CallOutcome::Unknown {
            reason: "timed out".into(),
        },
    ] {
        let mut saga = supplier();
        let run = start(&mut saga, &mut capture_in_doubt(status.clone()));
        assert_eq!(run.skills().last(), Some(&"payments.status"), "{status:?}");
        assert!(
            matches!(run.last(), Command::Pause { .. }),
            "{status:?}: {:?}",
            run.last()
        );
        assert!(
            matches!(&saga.records[4].forward, Forward::Unknown { reason } if reason.contains("the verification did not settle it")),
            "{:?}",
            saga.records[4].forward
        );
        // Nothing before the pivot was undone: it may have happened.
        assert!(saga.records[..4].iter().all(|r| r.undo != Undo::Done));
    }
}

/// Steps a fresh supplier saga, every capture timing out, until the call asking whether
/// the last one took effect is out: that call, and the time reached.
fn to_the_verification(saga: &mut Saga) -> (Invocation, i64) {
    let mut now = T0;
    let mut out = saga.step(Event::Start { now_ms: now });
    loop {
        let Some(Command::Invoke(inv)) = out
            .iter()
            .find(|c| matches!(c, Command::Invoke(_)))
            .cloned()
        else {
            panic!("no call out: {out:?}");
        };
        if inv.target == Target::Verification(4) {
            return (inv, now);
        }
        now += 10;
        let outcome = match inv.call.skill.as_str() {
            "payments.capture" => CallOutcome::Unknown {
                reason: "timed out".into(),
            },
            _ => ok(&inv),
        };
        out = saga.step(Event::Result {
            target: inv.target,
            attempt: inv.attempt,
            outcome,
            now_ms: now,
        });
        let retry = out.iter().find_map(|c| match c {
            Command::StartTimer {
                timer: timer @ Timer::Retry { .. },
                ..
            } => Some(*timer),
            _ => None,
        });
        if let Some(timer) = retry {
            out = saga.step(Event::TimerFired { timer, now_ms: now });
        }
    }
}

#[test]
fn a_verification_lost_in_a_restart_is_asked_again_under_the_same_key() {
    let mut saga = supplier();
    let (asked, now) = to_the_verification(&mut saga);
    let again = saga.step(Event::InFlightLost {
        target: asked.target,
        attempt: asked.attempt,
        now_ms: now + 1,
    });
    let Some(Command::Invoke(reasked)) = again.iter().find(|c| matches!(c, Command::Invoke(_)))
    else {
        panic!("not asked again: {again:?}");
    };
    assert_eq!(reasked, &asked);
    // Its answer settles the step.
    let run = drive(
        &mut saga,
        Event::Result {
            target: reasked.target,
            attempt: reasked.attempt,
            outcome: answered(json!({"status": "applied", "response": capture()})),
            now_ms: now + 2,
        },
        &mut ok,
    );
    assert_eq!(run.skills(), ["email.send"]);
    assert_eq!(run.ending(), Some(Ending::Completed));
}

#[test]
fn a_non_idempotent_call_lost_in_a_restart_is_verified_rather_than_put_to_a_person() {
    let mut saga = supplier();
    for step in &mut saga.spec_mut().steps {
        step.call.idempotent = false;
    }
    let mut out = saga.step(Event::Start { now_ms: T0 });
    let mut now = T0;
    // Up to the capture, every call succeeds.
    let capture = loop {
        let Some(Command::Invoke(inv)) = out
            .iter()
            .find(|c| matches!(c, Command::Invoke(_)))
            .cloned()
        else {
            panic!("no call out: {out:?}");
        };
        if inv.call.skill == "payments.capture" {
            break inv;
        }
        now += 10;
        out = saga.step(Event::Result {
            target: inv.target,
            attempt: inv.attempt,
            outcome: ok(&inv),
            now_ms: now,
        });
    };
    let out = saga.step(Event::InFlightLost {
        target: capture.target,
        attempt: capture.attempt,
        now_ms: now + 1,
    });
    assert!(
        out.iter()
            .any(|c| matches!(c, Command::Invoke(inv) if inv.target == Target::Verification(4))),
        "{out:?}"
    );
}

/// A cancel heard while the pivot's outcome is being verified is refused, as one heard
/// while its call is out is (the saga may be past its point of no return): the
/// verification decides, completed or unwound for the failure.
#[test]
fn a_cancel_while_the_pivot_is_verified_is_refused_and_the_verification_decides() {
    for (status, ending) in [
        (
            answered(json!({"status": "applied", "response": capture()})),
            Ending::Completed,
        ),
        (
            answered(json!({"status": "not-applied"})),
            Ending::Compensated,
        ),
    ] {
        let mut saga = supplier();
        let (held, now) = to_the_verification(&mut saga);
        let heard = saga.step(Event::Cancel { now_ms: now + 1 });
        assert!(
            matches!(heard.as_slice(), [Command::RefuseCancel { .. }]),
            "{heard:?}"
        );
        let run = drive(
            &mut saga,
            Event::Result {
                target: held.target,
                attempt: held.attempt,
                outcome: status,
                now_ms: now + 2,
            },
            &mut ok,
        );
        assert_eq!(run.ending(), Some(ending), "{:?}", run.commands);
    }
}
