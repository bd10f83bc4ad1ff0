//! A saga id is an identity only a trusted planner's signature may claim, and it carries
//! one plan for good: tried against a running executor over A2A.

mod common;

use agent_host::sdk::TaskState;
use common::served::*;
use serde_json::{Value, json};

fn status_text(task: &agent_host::sdk::Task) -> String {
    format!("{:?}", task.status.message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unverified_copy_of_a_running_plan_gets_no_saga_and_learns_nothing_of_it() {
    let served = serve().await;
    let plan = signed_by(&served.planner, "examples/plans/supplier-onboarding.json");
    let first = send(&served, planner_jwt(&served, "executor"), plan.clone())
        .await
        .unwrap();
    assert_eq!(first.status.state, TaskState::Completed);
    let calls = calls_seen(&served);

    // The same content with its signature zeroed, sent with a valid planner JWT.
    let mut forged = plan.clone();
    let signature = forged["signatures"][0]["signature"].as_str().unwrap();
    forged["signatures"][0]["signature"] = json!("A".repeat(signature.len()));
    let answer = send(&served, planner_jwt(&served, "executor"), forged)
        .await
        .unwrap();
    assert_ne!(
        answer.id, first.id,
        "the forged copy was given the saga's task"
    );
    assert_eq!(answer.status.state, TaskState::Rejected);
    let text = status_text(&answer);
    assert!(text.contains("SIGNATURE_INVALID"), "{text}");
    assert!(!text.contains(&first.id), "{text}");
    assert!(
        answer.artifacts.as_ref().is_none_or(Vec::is_empty),
        "{:?}",
        answer.artifacts
    );
    assert_eq!(calls_seen(&served), calls);

    // The genuine plan sent again still gets its saga's task.
    let again = send(&served, planner_jwt(&served, "executor"), plan)
        .await
        .unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(calls_seen(&served), calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_plan_version_is_refused_with_what_to_do_and_runs_nothing() {
    let served = serve().await;
    let plan = signed_by(&served.planner, "examples/plans/supplier-onboarding.json");
    let first = send(&served, planner_jwt(&served, "executor"), plan)
        .await
        .unwrap();
    assert_eq!(first.status.state, TaskState::Completed);
    let calls = calls_seen(&served);

    let mut second: Value = common::read("examples/plans/supplier-onboarding.json");
    second["planVersion"] = json!(2);
    common::sign_plan(&served.planner, &mut second);
    let answer = send(&served, planner_jwt(&served, "executor"), second)
        .await
        .unwrap();
    assert_eq!(answer.status.state, TaskState::Rejected, "{answer:?}");
    let text = status_text(&answer);
    assert!(text.contains("PLAN_CONFLICT"), "{text}");
    assert!(text.contains("new sagaId"), "{text}");
    assert!(!text.to_lowercase().contains("unique"), "{text}");
    assert_eq!(calls_seen(&served), calls, "version 2 called a tool");
}

/// A plan may name the saga it supersedes, never its own, and only in the bounded shape:
/// each hostile `supersedes` is refused before any call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_superseding_its_own_saga_or_with_an_unbounded_reason_runs_nothing() {
    let served = serve().await;
    let calls = calls_seen(&served);
    for (supersedes, expected) in [
        (
            json!({"sagaId": "sg_demo_supplier_onboarding", "executorTaskId": "t", "reason": "r"}),
            "names this plan's own saga",
        ),
        (
            json!({"sagaId": "sg_other", "executorTaskId": "t", "reason": "x".repeat(2001)}),
            "longer than 2000 characters",
        ),
        (
            json!({"sagaId": "sg_other", "executorTaskId": "t", "reason": "r", "note": "extra"}),
            "unknown field `note`",
        ),
    ] {
        let mut plan: Value = common::read("examples/plans/supplier-onboarding.json");
        plan["supersedes"] = supersedes;
        common::sign_plan(&served.planner, &mut plan);
        let answer = send(&served, planner_jwt(&served, "executor"), plan)
            .await
            .unwrap();
        assert_eq!(answer.status.state, TaskState::Rejected, "{answer:?}");
        let text = status_text(&answer);
        assert!(
            text.contains("SCHEMA_INVALID") && text.contains(expected),
            "{text}"
        );
        assert_eq!(calls_seen(&served), calls, "a refused plan called a tool");
    }
}
