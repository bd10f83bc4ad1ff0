//! A planner restarted on the same data directory picks up its unfinished tasks: it
//! follows an executor task it had submitted to, submits a plan it had composed but
//! perhaps not submitted, completes an interrupted dry run without submitting it, and
//! fails a task that had no plan yet.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use agent_host::sdk::{Artifact, Part, Task, TaskState, TaskStatus, new_context_id, new_task_id};
use agent_host::store::Expected;
use agent_host::{OutboundCall, SqliteTaskStore, TaskStore};
use common::*;
use futures::StreamExt;
use serde_json::{Value, json};

async fn stop(planner: RunningPlanner) {
    let RunningPlanner {
        shutdown, served, ..
    } = planner;
    shutdown.cancel();
    served.await.unwrap();
}

#[tokio::test]
async fn a_restarted_planner_follows_the_executors_task_to_its_end() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Hold, &identity).await;
    let dir = tempfile::tempdir().unwrap();
    let first = start_planner(
        &executor.url,
        identity.clone(),
        Some(dir.path().to_owned()),
        "executor",
    )
    .await;
    let (task_id, executor_task) = until_submitted(&first).await;
    stop(first).await;

    let second = start_planner(
        &executor.url,
        identity,
        Some(dir.path().to_owned()),
        "executor",
    )
    .await;
    let stored = second
        .client
        .get_task(&OutboundCall::default(), &task_id)
        .await
        .unwrap();
    assert_eq!(stored.status.state, TaskState::Working);
    assert_eq!(
        metadata(&stored, "executorTaskId"),
        Some(json!(executor_task))
    );

    let mut watching = second
        .client
        .subscribe(&OutboundCall::default(), &task_id)
        .await
        .unwrap();
    executor.complete_held().await;
    let mut last = None;
    while let Some(event) = watching.next().await {
        last = Some(event.unwrap());
    }
    match last {
        Some(agent_host::sdk::StreamResponse::StatusUpdate(u)) => {
            assert_eq!(u.status.state, TaskState::Completed)
        }
        other => panic!("expected the final status update, got {other:?}"),
    }
    assert_eq!(executor.plans().len(), 1, "the plan was submitted once");
}

/// A signed plan from a dry run of the supplier goal.
async fn signed_plan(executor_url: &str) -> Value {
    let planner = start_planner(executor_url, planner_identity(), None, "executor").await;
    let task = send(
        &planner.client,
        SUPPLIER_GOAL,
        Some(json!({"dryRun": true})),
    )
    .await;
    plan_artifact(&task).unwrap()
}

/// A planner task as a crash would leave it: WORKING, with `plan` and `metadata`.
fn interrupted(plan: Option<&Value>, metadata: &[(&str, Value)]) -> Task {
    Task {
        id: new_task_id(),
        context_id: new_context_id(),
        status: TaskStatus {
            state: TaskState::Working,
            message: None,
            timestamp: Some(chrono::Utc::now()),
        },
        artifacts: plan.map(|p| {
            vec![Artifact {
                artifact_id: "plan".into(),
                name: Some("plan".into()),
                description: None,
                parts: vec![Part::data(p.clone())],
                metadata: None,
                extensions: None,
            }]
        }),
        history: None,
        // The sender's, as the hosting layer records it (an open planner's callers are
        // all "anonymous").
        metadata: Some(
            metadata
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .chain([("owner".to_owned(), json!("anonymous"))])
                .collect::<HashMap<_, _>>(),
        ),
    }
}

async fn store_tasks(dir: &Path, tasks: &[Task]) {
    let store = Arc::new(SqliteTaskStore::open(&dir.join("tasks.db")).unwrap());
    for task in tasks {
        store.put(task, Expected::Absent).await.unwrap();
    }
}

#[tokio::test]
async fn composed_plans_are_submitted_dry_runs_completed_and_planless_tasks_failed() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let plan = signed_plan(&executor.url).await;
    let dir = tempfile::tempdir().unwrap();
    let composed = interrupted(Some(&plan), &[("sagaId", plan["sagaId"].clone())]);
    let dry_run = interrupted(Some(&plan), &[("dryRun", json!(true))]);
    let planless = interrupted(None, &[]);
    store_tasks(
        dir.path(),
        &[composed.clone(), dry_run.clone(), planless.clone()],
    )
    .await;

    let planner = start_planner(
        &executor.url,
        identity,
        Some(dir.path().to_owned()),
        "executor",
    )
    .await;
    let task = settled(&planner, &composed.id).await;
    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{}",
        status_text(&task)
    );
    assert!(metadata(&task, "executorTaskId").is_some());
    let received = executor.plans();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].0, plan);

    let task = settled(&planner, &dry_run.id).await;
    assert_eq!(task.status.state, TaskState::Completed);
    assert!(status_text(&task).contains("not submitted"));

    let task = settled(&planner, &planless.id).await;
    assert_eq!(task.status.state, TaskState::Failed);
    assert!(status_text(&task).contains("send the goal again"));
    assert_eq!(
        executor.plans().len(),
        1,
        "only the composed plan was submitted"
    );
}

/// A planner stopped between recording a goal's next attempt (the ended attempt in
/// `attempts`, the next plan and its saga id) and submitting it: restarted, it submits
/// the recorded plan, plans nothing, and the goal ends listing both attempts.
#[tokio::test]
async fn a_recorded_next_attempt_is_submitted_as_recorded_after_a_restart() {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let plan = signed_plan(&executor.url).await;
    let first = json!({"attempt": 1, "sagaId": "sg_first_attempt", "executorTaskId": "t-first",
        "state": "TASK_STATE_FAILED", "outcome": "compensated", "failedStep": "s3",
        "reason": "s3 failed", "planSha256": "00"});
    let recorded = interrupted(
        Some(&plan),
        &[
            ("sagaId", plan["sagaId"].clone()),
            ("attempts", json!([first.clone()])),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    store_tasks(dir.path(), std::slice::from_ref(&recorded)).await;

    let planner = start_planner(
        &executor.url,
        identity,
        Some(dir.path().to_owned()),
        "executor",
    )
    .await;
    let task = settled(&planner, &recorded.id).await;
    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{}",
        status_text(&task)
    );
    let received = executor.plans();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].0, plan, "the recorded plan, not a new one");
    let mut attempts = metadata(&task, "attempts").unwrap();
    // A2A carries numbers as doubles.
    shared_types::json::normalize_integers(&mut attempts);
    assert_eq!(attempts[0], first);
    assert_eq!(attempts[1]["attempt"], json!(2));
    assert_eq!(attempts[1]["sagaId"], plan["sagaId"]);
    assert_eq!(attempts[1]["state"], json!("TASK_STATE_COMPLETED"));
}
