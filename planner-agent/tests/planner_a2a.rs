//! The planner as an A2A agent in front of a fake executor: the signed plan it submits,
//! how it mirrors each way the executor's task can end, dry runs, goals it cannot plan,
//! and cancellation through the executor.

mod common;

use agent_host::OutboundCall;
use agent_host::sdk::{StreamResponse, TaskState};
use common::*;
use serde_json::json;
use shared_types::{Plan, TrustStore};

#[tokio::test]
async fn the_supplier_goal_is_planned_signed_submitted_and_followed() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let planner = start_planner(&executor.url, identity.clone(), None, "executor").await;

    let events = stream(&planner.client, SUPPLIER_GOAL, None).await;
    let StreamResponse::Task(first) = &events[0] else {
        panic!("the stream starts with the task: {events:?}");
    };
    let task = planner
        .client
        .get_task(&OutboundCall::default(), &first.id)
        .await
        .unwrap();
    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{}",
        status_text(&task)
    );

    // The executor got exactly the plan the task reports, signed by the planner, and
    // found nothing wrong with it.
    let plans = executor.plans();
    assert_eq!(plans.len(), 1);
    let (received, violations) = &plans[0];
    assert_eq!(violations, &vec![]);
    let artifact = plan_artifact(&task).expect("artifact plan");
    assert_eq!(&artifact, received);
    let mut trust = TrustStore::new();
    trust.add_jwk(&identity.public_jwk()).unwrap();
    assert_eq!(trust.verify(&artifact).unwrap(), "planner-test");
    let plan = Plan::from_value(&artifact).unwrap();
    assert!(plan.saga_id.starts_with("sg_"));
    assert_eq!(plan.authored_by.agent, "planner-test");
    assert_eq!(plan.steps.len(), 6);
    assert_eq!(plan.pivot_index, Some(4));
    // The principal's mandate, embedded exactly as signed.
    assert_eq!(artifact["mandate"], test_mandate());

    // Task metadata names the saga and the executor's task; every step was relayed.
    assert_eq!(metadata(&task, "sagaId"), Some(json!(plan.saga_id)));
    let executor_task = metadata(&task, "executorTaskId").expect("executorTaskId");
    assert_eq!(metadata(&task, "executorUrl"), Some(json!(executor.url)));
    assert_eq!(
        metadata(&task, "executorState"),
        Some(json!("TASK_STATE_COMPLETED"))
    );
    let relayed: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            StreamResponse::StatusUpdate(u) if u.status.state == TaskState::Working => u
                .status
                .message
                .as_ref()
                .and_then(|m| m.parts.first())
                .and_then(|p| match &p.content {
                    agent_host::sdk::PartContent::Text(t) => Some(t.clone()),
                    _ => None,
                }),
            _ => None,
        })
        .collect();
    let took = format!(
        "the executor took plan {} as its task {}",
        plan.saga_id,
        executor_task.as_str().unwrap()
    );
    assert!(relayed.contains(&took), "{relayed:?}");
    for step in &plan.steps {
        let line = format!("{}: {} succeeded", step.id, step.skill);
        assert!(relayed.contains(&line), "{line} not in {relayed:?}");
    }
    let ended = status_text(&task);
    assert!(
        ended.contains("completed") && ended.contains(executor_task.as_str().unwrap()),
        "{ended}"
    );

    // A second goal gets a saga of its own.
    let second = send(&planner.client, SUPPLIER_GOAL, None).await;
    let second_plan = plan_artifact(&second).unwrap();
    assert_ne!(second_plan["sagaId"], artifact["sagaId"]);
}

#[tokio::test]
async fn a_dry_run_returns_the_signed_plan_and_submits_nothing() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let planner = start_planner(&executor.url, identity, None, "executor").await;
    let task = send(
        &planner.client,
        &format!("{SUPPLIER_GOAL}, dry run"),
        Some(json!({"maxSpend": "250 EUR"})),
    )
    .await;
    assert_eq!(task.status.state, TaskState::Completed);
    assert!(status_text(&task).contains("not submitted"));
    assert_eq!(metadata(&task, "dryRun"), Some(json!(true)));
    assert_eq!(metadata(&task, "executorTaskId"), None);
    let plan = plan_artifact(&task).unwrap();
    assert_eq!(plan["mandate"], test_mandate());
    assert!(executor.plans().is_empty());

    // The same with the parameter in the data part.
    let task = send(
        &planner.client,
        SUPPLIER_GOAL,
        Some(json!({"dryRun": true})),
    )
    .await;
    assert_eq!(task.status.state, TaskState::Completed);
    assert!(executor.plans().is_empty());
}

#[tokio::test]
async fn the_executors_ending_is_mirrored() {
    let identity = planner_identity();

    let executor = FakeExecutor::start(Script::Compensate, &identity).await;
    let planner = start_planner(&executor.url, identity.clone(), None, "executor").await;
    let task = send(&planner.client, SUPPLIER_GOAL, None).await;
    assert_eq!(task.status.state, TaskState::Failed);
    assert_eq!(metadata(&task, "outcome"), Some(json!("compensated")));
    assert!(
        status_text(&task).contains("compensated"),
        "{}",
        status_text(&task)
    );
    // The fake's ledger says s3 (compliance.check) failed: the rules plan again with a
    // person's review instead; that one unwinds too, and the rules have nothing else.
    assert!(
        status_text(&task).contains("the planner found no plan it had not tried (rules-v1"),
        "{}",
        status_text(&task)
    );
    let plans = executor.plans();
    assert_eq!(plans.len(), 2);
    let skills = |plan: &serde_json::Value| plan["steps"].to_string();
    assert!(skills(&plans[0].0).contains("compliance.check"));
    assert!(skills(&plans[1].0).contains("compliance.review"));
    assert!(!skills(&plans[1].0).contains("compliance.check"));

    let executor = FakeExecutor::start(Script::Reject, &identity).await;
    let planner = start_planner(&executor.url, identity.clone(), None, "executor").await;
    let task = send(&planner.client, SUPPLIER_GOAL, None).await;
    assert_eq!(task.status.state, TaskState::Rejected);
    let text = status_text(&task);
    assert!(text.contains("MANDATE_EXCEEDED s4"), "{text}");
    let data = task
        .status
        .message
        .as_ref()
        .and_then(|m| {
            m.parts.iter().find_map(|p| match &p.content {
                agent_host::sdk::PartContent::Data(v) => Some(v.clone()),
                _ => None,
            })
        })
        .expect("the violations travel as data");
    assert_eq!(data["violations"][0]["code"], json!("MANDATE_EXCEEDED"));
}

/// Finding 17 of issue 19: the executor's wait for a person shows on the planner's task
/// as AUTH_REQUIRED (someone else must authorize), naming where the approver answers, and
/// an answer sent to the planner's task is refused without changing it.
#[tokio::test]
async fn a_wait_for_a_person_is_auth_required_and_names_the_executors_task() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Escalate, &identity).await;
    let planner = start_planner(&executor.url, identity, None, "executor").await;
    let task = send(&planner.client, SUPPLIER_GOAL, None).await;
    assert_eq!(task.status.state, TaskState::AuthRequired);
    let executor_task = metadata(&task, "executorTaskId").unwrap();
    let text = status_text(&task);
    assert!(text.contains(executor_task.as_str().unwrap()), "{text}");
    assert!(
        text.contains("resolution") && text.contains("unknown outcome"),
        "{text}"
    );
    assert!(text.contains(&executor.url), "{text}");
    assert!(
        text.contains("approver") && text.contains("never decides"),
        "{text}"
    );

    // The planner's task takes no answers: they belong on the executor's task.
    let mut answer = goal_request("", Some(json!({"resolution": "compensate"})));
    answer.message.task_id = Some(task.id.clone());
    let refused = planner
        .client
        .send(&OutboundCall::default(), &answer)
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains(executor_task.as_str().unwrap()),
        "{refused}"
    );
    let after = planner
        .client
        .get_task(&OutboundCall::default(), &task.id)
        .await
        .unwrap();
    assert_eq!(
        after.status, task.status,
        "the refused answer changed nothing"
    );
    assert_eq!(
        after.history.as_ref().map(Vec::len),
        task.history.as_ref().map(Vec::len),
        "the refused answer is not recorded"
    );
    assert_eq!(executor.plans().len(), 1);
}

#[tokio::test]
async fn goals_that_cannot_be_planned_are_rejected_and_never_submitted() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let planner = start_planner(&executor.url, identity, None, "executor").await;

    let task = send(
        &planner.client,
        "Onboard supplier ACME GmbH, setup fee 120 EUR",
        None,
    )
    .await;
    assert_eq!(task.status.state, TaskState::Rejected);
    assert!(
        status_text(&task).contains("contactEmail"),
        "{}",
        status_text(&task)
    );
    assert!(plan_artifact(&task).is_none());

    let task = send(&planner.client, "Paint the office green", None).await;
    assert_eq!(task.status.state, TaskState::Rejected);
    assert!(
        status_text(&task).contains("no goal template matches"),
        "{}",
        status_text(&task)
    );

    let task = send(
        &planner.client,
        SUPPLIER_GOAL,
        Some(json!({"maxSpend": "a lot"})),
    )
    .await;
    assert_eq!(task.status.state, TaskState::Rejected);
    assert!(
        status_text(&task).contains("maxSpend"),
        "{}",
        status_text(&task)
    );

    assert!(executor.plans().is_empty());

    // A message with neither text nor data is refused before any task exists.
    let mut empty = goal_request("", None);
    empty.message.parts = vec![agent_host::sdk::Part::url("https://example.invalid/goal")];
    assert!(
        planner
            .client
            .send(&OutboundCall::default(), &empty)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_planner_the_executor_does_not_know_fails_without_planning() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    // JWTs for the wrong audience, then from an untrusted key: the catalog stays closed.
    let planner = start_planner(&executor.url, identity, None, "someone-else").await;
    let task = send(&planner.client, SUPPLIER_GOAL, None).await;
    assert_eq!(task.status.state, TaskState::Failed);
    assert!(status_text(&task).contains("401"), "{}", status_text(&task));

    let stranger = shared_types::SigningIdentity::from_seed([9; 32], Some("planner-test".into()));
    let planner = start_planner(&executor.url, stranger, None, "executor").await;
    let task = send(&planner.client, SUPPLIER_GOAL, None).await;
    assert_eq!(task.status.state, TaskState::Failed);
    assert!(executor.plans().is_empty());
}

#[tokio::test]
async fn cancel_goes_through_the_executor() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Hold, &identity).await;
    let planner = start_planner(&executor.url, identity, None, "executor").await;
    let (task_id, _) = until_submitted(&planner).await;
    let canceled = planner
        .client
        .cancel_task(&OutboundCall::default(), &task_id)
        .await
        .unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    assert_eq!(
        metadata(&canceled, "executorState"),
        Some(json!("TASK_STATE_CANCELED"))
    );
    // The executor's task is canceled too.
    let held = executor.seen.lock().unwrap().held[0].clone();
    assert_eq!(
        held.snapshot().await.unwrap().status.state,
        TaskState::Canceled
    );
}
