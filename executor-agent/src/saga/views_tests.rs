//! What people are shown: the point of no return (also when it is not a declared pivot),
//! undo deadlines marked open only while the undo may run, and a waiting saga's question
//! in words for people beside the protocol's shape.

use serde_json::json;

use super::tests::{drive, ok, saga_from, start, supplier};
use super::*;

const T0: i64 = 1_800_000_000_000;

fn with_capture(outcome: CallOutcome) -> impl FnMut(&Invocation) -> CallOutcome {
    move |inv| match inv.call.skill.as_str() {
        "payments.capture" => outcome.clone(),
        _ => ok(inv),
    }
}

#[test]
fn the_ledger_names_the_point_of_no_return_and_whether_it_was_passed() {
    let mut saga = supplier();
    assert_eq!(
        saga.ledger()["pointOfNoReturn"],
        json!({"step": "s4", "skill": "payments.capture", "pivot": true,
               "why": "the pivot: an irreversible step", "passed": false})
    );
    start(&mut saga, &mut ok);
    assert_eq!(saga.ledger()["pointOfNoReturn"]["passed"], true);

    // Without the capture, the email (retriable, it changes something) is where the saga
    // can no longer unwind: not a pivot, and said so.
    let mut spec = SagaSpec::clone(&supplier().spec);
    spec.steps.remove(4);
    spec.point_of_no_return = Some(4);
    let saga = Saga::new(spec);
    assert_eq!(
        saga.ledger()["pointOfNoReturn"],
        json!({"step": "s5", "skill": "email.send", "pivot": false,
               "why": "a retriable step that changes something and has no undo",
               "passed": false})
    );
}

#[test]
fn an_undo_deadline_is_open_only_while_its_undo_may_still_run() {
    // Paused at its pivot, in doubt: the earlier steps' undos may still run.
    let mut saga = supplier_unverified_with_capture_unknown();
    let open = |saga: &Saga, i: usize| saga.ledger()["steps"][i]["undoDeadline"]["open"].clone();
    assert!(matches!(saga.phase, model::Phase::Paused { .. }));
    assert_eq!(open(&saga, 0), json!(true));
    // A person says it happened: past the point of no return, nothing will be undone.
    drive(
        &mut saga,
        Event::Resolve {
            resolution: Resolution::ResolvedManually,
            now_ms: T0 + 1_000,
            decider: None,
        },
        &mut ok,
    );
    assert_eq!(open(&saga, 0), json!(false));
    // Undone: its deadline bounds nothing any more.
    let mut saga = supplier();
    start(
        &mut saga,
        &mut with_capture(CallOutcome::failed("declined")),
    );
    assert!(matches!(
        saga.phase,
        model::Phase::Done {
            ending: Ending::Compensated
        }
    ));
    assert_eq!(open(&saga, 0), json!(false));
}

fn supplier_unverified_with_capture_unknown() -> Saga {
    let mut saga = super::tests::supplier_unverified();
    let unknown = CallOutcome::Unknown {
        reason: "timed out".into(),
    };
    start(&mut saga, &mut with_capture(unknown));
    saga
}

fn question(saga: &Saga) -> String {
    let awaiting = saga.awaiting().expect("the saga waits");
    let about = awaiting.as_object().unwrap().values().next().unwrap();
    about["question"].as_str().unwrap().to_owned()
}

#[test]
fn a_waiting_saga_asks_its_question_in_words_for_people() {
    let mut saga = saga_from("examples/plans/invalid/undo-ttl-too-short.json");
    start(&mut saga, &mut ok);
    assert_eq!(
        question(&saga),
        "May compliance-registry run compliance.review (step s1r) with the arguments shown? \
         Answer approve to let it run, or compensate to refuse: what the saga did is undone \
         and it ends."
    );

    let saga = supplier_unverified_with_capture_unknown();
    let asked = question(&saga);
    assert!(
        asked.starts_with("Did payments.capture on payments (step s4) take effect? Nobody knows: "),
        "{asked}"
    );
    for does in [
        "retry to call it again under the same idempotency key",
        "resolved-manually if it took effect",
        "compensate if it did not take effect",
    ] {
        assert!(asked.contains(does), "{asked}");
    }

    // Past the point of no return: it can only be completed, and the question says so.
    let mut saga = supplier();
    start(
        &mut saga,
        &mut |inv: &Invocation| match inv.call.skill.as_str() {
            "email.send" => CallOutcome::failed("mailbox full"),
            _ => ok(inv),
        },
    );
    let asked = question(&saga);
    assert!(
        asked.starts_with("email.send on mailer (step s5) did not complete"),
        "{asked}"
    );
    assert!(
        asked.ends_with("it cannot be undone, only completed."),
        "{asked}"
    );
    assert!(!asked.contains("compensate"), "{asked}");
}
