//! A plan that supersedes an unwound one: the member is typed strictly and checked.

use super::*;

fn superseding(supersedes: Value) -> Value {
    let mut plan = example();
    plan["supersedes"] = supersedes;
    plan
}

fn refusals(plan: Value) -> Vec<String> {
    validator()
        .validate(&signed(plan), now())
        .violations
        .into_iter()
        .map(|v| format!("{} {}", v.code, v.message))
        .collect()
}

#[test]
fn a_plan_naming_the_saga_it_supersedes_is_valid_and_keeps_it_signed() {
    let plan = superseding(
        serde_json::json!({"sagaId": "sg_first", "executorTaskId": "t-1",
        "failedStep": "s3", "reason": "s3: compliance.check failed: \"registry down\""}),
    );
    let report = validator().validate(&signed(plan), now());
    assert_eq!(report.violations, vec![]);
    let superseded = report.plan.unwrap().supersedes.unwrap();
    assert_eq!(superseded.saga_id, "sg_first");
    assert_eq!(superseded.failed_step.as_deref(), Some("s3"));
}

#[test]
fn a_malformed_supersedes_is_refused_for_what_is_wrong() {
    let own = example()["sagaId"].clone();
    let cases = [
        (
            serde_json::json!({"sagaId": own, "executorTaskId": "t", "reason": "r"}),
            "names this plan's own saga",
        ),
        (
            serde_json::json!({"sagaId": "sg bad", "executorTaskId": "t", "reason": "r"}),
            "supersedes.sagaId \"sg bad\" must be",
        ),
        (
            serde_json::json!({"sagaId": "sg_a", "executorTaskId": "", "reason": "r"}),
            "executorTaskId must be 1-128 bytes",
        ),
        (
            serde_json::json!({"sagaId": "sg_a", "executorTaskId": "t", "failedStep": "s 3", "reason": "r"}),
            "supersedes.failedStep \"s 3\" must be",
        ),
        (
            serde_json::json!({"sagaId": "sg_a", "executorTaskId": "t",
                "reason": "x".repeat(MAX_SUPERSEDES_REASON_CHARS + 1)}),
            "supersedes.reason is longer than 2000 characters",
        ),
    ];
    for (supersedes, expected) in cases {
        let found = refusals(superseding(supersedes));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("SCHEMA_INVALID ") && found[0].contains(expected),
            "{found:?}"
        );
    }
    // Unknown members, a missing reason and a string do not type.
    for (supersedes, expected) in [
        (
            serde_json::json!({"sagaId": "sg_a", "executorTaskId": "t", "reason": "r", "extra": 1}),
            "unknown field `extra`",
        ),
        (
            serde_json::json!({"sagaId": "sg_a", "executorTaskId": "t"}),
            "missing field `reason`",
        ),
        (serde_json::json!("sg_a"), "supersedes"),
    ] {
        let found = refusals(superseding(supersedes.clone()));
        assert!(
            found.len() == 1
                && found[0].starts_with("SCHEMA_INVALID ")
                && found[0].contains(expected),
            "{supersedes}: {found:?}"
        );
    }
}
