//! Definite failures and their class (the extension's `failure`): a transient one is
//! tried again under the same key per the skill's policy, then counts as permanent; a
//! permanent one is not tried again; a compensation the tool says will fail again goes
//! to a person at once. Scripted on the supplier saga.

use super::model::{Forward, Phase, Undo};
use super::tests::{ok, start, supplier};
use super::*;

fn failing(class: Option<FailureClass>) -> CallOutcome {
    CallOutcome::Failed {
        reason: "the ledger is locked".into(),
        failure: class,
    }
}

/// A tool that answers `outcome` for `skill` the first `times` calls, then succeeds.
fn fails_first(
    skill: &'static str,
    times: usize,
    outcome: CallOutcome,
) -> impl FnMut(&Invocation) -> CallOutcome {
    let mut seen = 0;
    move |inv| {
        if inv.call.skill == skill && seen < times {
            seen += 1;
            outcome.clone()
        } else {
            ok(inv)
        }
    }
}

fn keys_of<'a>(run: &'a tests::Run, skill: &str) -> Vec<&'a str> {
    run.calls
        .iter()
        .filter(|(s, _, _)| s == skill)
        .map(|(_, k, _)| k.as_str())
        .collect()
}

#[test]
fn a_transient_failure_is_tried_again_under_the_same_key_and_the_saga_completes() {
    let mut saga = supplier();
    let run = start(
        &mut saga,
        &mut fails_first(
            "compliance.check",
            2,
            failing(Some(FailureClass::Transient)),
        ),
    );
    assert_eq!(
        keys_of(&run, "compliance.check"),
        ["sg_demo_supplier_onboarding:s3"; 3]
    );
    assert_eq!(run.ending(), Some(Ending::Completed));
}

#[test]
fn transient_failures_past_the_attempts_count_as_permanent_and_the_saga_unwinds() {
    let mut saga = supplier();
    let run = start(
        &mut saga,
        &mut fails_first(
            "compliance.check",
            9,
            failing(Some(FailureClass::Transient)),
        ),
    );
    let attempts = keys_of(&run, "compliance.check").len() as u32;
    assert_eq!(attempts, saga.spec.steps[3].call.retry.max_attempts);
    assert_eq!(run.ending(), Some(Ending::Compensated));
    assert!(matches!(saga.records[3].forward, Forward::Failed { .. }));
}

#[test]
fn a_permanent_or_unstated_failure_is_not_tried_again() {
    for class in [Some(FailureClass::Permanent), None] {
        let mut saga = supplier();
        let run = start(
            &mut saga,
            &mut fails_first("compliance.check", 9, failing(class)),
        );
        assert_eq!(keys_of(&run, "compliance.check").len(), 1, "{class:?}");
        assert_eq!(run.ending(), Some(Ending::Compensated), "{class:?}");
    }
}

#[test]
fn a_transient_failure_of_the_pivot_is_tried_again_and_nothing_is_unwound() {
    let mut saga = supplier();
    let run = start(
        &mut saga,
        &mut fails_first(
            "payments.capture",
            1,
            failing(Some(FailureClass::Transient)),
        ),
    );
    assert_eq!(keys_of(&run, "payments.capture").len(), 2);
    assert_eq!(run.ending(), Some(Ending::Completed));
}

#[test]
fn a_compensation_the_tool_says_will_fail_again_goes_to_a_person_at_once() {
    let mut saga = supplier();
    let mut tool = |inv: &Invocation| match inv.call.skill.as_str() {
        "compliance.check" => failing(Some(FailureClass::Permanent)),
        "budget.release" => failing(Some(FailureClass::Permanent)),
        _ => ok(inv),
    };
    let run = start(&mut saga, &mut tool);
    assert_eq!(keys_of(&run, "budget.release").len(), 1, "not tried again");
    assert!(matches!(saga.records[1].undo, Undo::DeadLettered { .. }));
    let Phase::Paused { reason, .. } = &saga.phase else {
        panic!("{:?}", saga.phase)
    };
    assert!(reason.contains("will fail again"), "{reason}");
    // Unstated, it is tried again per its policy, as before.
    let mut saga = supplier();
    let mut tool = |inv: &Invocation| match inv.call.skill.as_str() {
        "compliance.check" => failing(Some(FailureClass::Permanent)),
        "budget.release" => failing(None),
        _ => ok(inv),
    };
    let run = start(&mut saga, &mut tool);
    assert_eq!(
        keys_of(&run, "budget.release").len() as u32,
        saga.spec.steps[1]
            .compensation
            .as_ref()
            .unwrap()
            .call
            .retry
            .max_attempts
    );
}

#[test]
fn a_journal_from_before_failure_classes_replays_as_it_ran() {
    // A `failed` result journaled without `failure` reads as unstated.
    let old: CallOutcome =
        serde_json::from_value(serde_json::json!({"outcome": "failed", "reason": "declined"}))
            .unwrap();
    assert_eq!(old, CallOutcome::failed("declined"));
    let new = serde_json::to_value(failing(Some(FailureClass::Transient))).unwrap();
    assert_eq!(new["failure"], "transient");
}
