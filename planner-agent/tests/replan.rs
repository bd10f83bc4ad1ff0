//! Planning again after an unwinding, with a scripted model and a fake executor that
//! unwinds the first plan it gets: the new plan is drafted from the failure and the
//! plan that ended, names the saga it supersedes, and runs; the goal's task lists every
//! attempt. No replan with a bound of 0, past the bound, for a plan already tried, or
//! for a saga waiting for a person.

mod common;

use agent_host::sdk::{Task, TaskState};
use common::model::*;
use common::*;
use serde_json::{Value, json};

fn goal() -> String {
    format!("{SUPPLIER_GOAL}, max spend 250 EUR")
}

/// `example_draft` with these `after` members, by step index: the same calls in
/// another order, so another plan.
fn reordered(after: &[(usize, Value)]) -> Value {
    let mut draft = example_draft();
    for (i, waits) in after {
        draft["steps"][*i]["after"] = waits.clone();
    }
    draft
}

/// Budget and sandbox side by side after the vendor.
fn side_by_side() -> Value {
    reordered(&[
        (1, json!(["s0"])),
        (2, json!(["s0"])),
        (3, json!(["s1", "s2"])),
    ])
}

/// The compliance check beside the budget.
fn check_beside_budget() -> Value {
    reordered(&[
        (1, json!(["s0"])),
        (2, json!(["s0"])),
        (3, json!(["s2"])),
        (4, json!(["s1", "s3"])),
    ])
}

/// A planner asking `model`, in front of `executor`, planning again at most
/// `max_replans` times; sends the goal and returns its task once it stopped.
async fn run_goal(model: &ScriptedModel, executor: &FakeExecutor, max_replans: u32) -> Task {
    let identity = planner_identity();
    let llm = Some(llm_config(&model.url, 0));
    let planner = start_configured(|url| planner_agent::Settings {
        max_replans,
        ..test_settings(url, &executor.url, identity, llm)
    })
    .await;
    send(&planner.client, &goal(), None).await
}

/// Runs the goal with a model that answers `drafts` in turn, in front of an executor
/// that runs the plans it gets by `scripts`, planning again at most `max_replans` times.
async fn goal_run(
    drafts: &[Value],
    scripts: Vec<Script>,
    max_replans: u32,
) -> (Task, ScriptedModel, FakeExecutor) {
    let replies = drafts.iter().map(Reply::draft).collect();
    let model = ScriptedModel::start(replies, false).await;
    let executor = FakeExecutor::start_each(scripts, &planner_identity()).await;
    let task = run_goal(&model, &executor, max_replans).await;
    (task, model, executor)
}

fn attempts(task: &Task) -> Vec<Value> {
    metadata(task, "attempts")
        .and_then(|a| a.as_array().cloned())
        .unwrap_or_default()
}

#[tokio::test]
async fn an_unwound_saga_is_planned_again_from_its_failure_and_the_new_plan_supersedes_it() {
    let (task, model, executor) = goal_run(
        &[example_draft(), side_by_side()],
        vec![Script::Compensate, Script::Complete],
        2,
    )
    .await;
    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{}",
        status_text(&task)
    );

    // Two plans reached the executor, each valid there; the second supersedes the first.
    let plans = executor.plans();
    assert_eq!(plans.len(), 2);
    assert!(
        plans.iter().all(|(_, violations)| violations.is_empty()),
        "{plans:?}"
    );
    let (first, second) = (&plans[0].0, &plans[1].0);
    assert_ne!(first["sagaId"], second["sagaId"]);
    assert!(first.get("supersedes").is_none());
    let superseded = &second["supersedes"];
    assert_eq!(superseded["sagaId"], first["sagaId"]);
    assert_eq!(superseded["failedStep"], json!("s3"));
    let reason = superseded["reason"].as_str().unwrap();
    assert!(reason.contains("the registry is down"), "{reason}");
    assert_eq!(
        second["mandate"], first["mandate"],
        "under the same mandate"
    );
    assert_eq!(plan_artifact(&task).as_ref(), Some(second));
    assert_eq!(metadata(&task, "sagaId"), Some(second["sagaId"].clone()));

    // The model was shown the failure and the plan that unwound.
    let requests = model.received();
    assert_eq!(requests.len(), 2);
    let user: Value =
        serde_json::from_str(requests[1].body["messages"][1]["content"].as_str().unwrap()).unwrap();
    let replanning = &user["replanning"];
    assert_eq!(replanning["attempt"], json!(2));
    assert_eq!(replanning["failure"]["failedStep"], json!("s3"));
    assert_eq!(
        replanning["previousPlan"]["steps"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    assert_eq!(
        replanning["previousPlan"]["steps"][3]["skill"],
        json!("compliance.check")
    );
    let first_user: Value =
        serde_json::from_str(requests[0].body["messages"][1]["content"].as_str().unwrap()).unwrap();
    assert!(first_user.get("replanning").is_none());

    // The goal's task lists both attempts and said which one ran.
    let listed = attempts(&task);
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0]["attempt"], json!(1));
    assert_eq!(listed[0]["sagaId"], first["sagaId"]);
    assert_eq!(listed[0]["state"], json!("TASK_STATE_FAILED"));
    assert_eq!(listed[0]["outcome"], json!("compensated"));
    assert_eq!(listed[0]["failedStep"], json!("s3"));
    assert_eq!(listed[1]["attempt"], json!(2));
    assert_eq!(listed[1]["sagaId"], second["sagaId"]);
    assert_eq!(listed[1]["state"], json!("TASK_STATE_COMPLETED"));
    assert_eq!(
        metadata(&task, "outcome"),
        None,
        "the first attempt's outcome is not the goal's"
    );
    let said = history_text(&task);
    assert!(said.contains("planning attempt 2 of at most 3"), "{said}");
    assert!(
        said.contains(&format!(
            "attempt 2: plan {} supersedes {}",
            second["sagaId"].as_str().unwrap(),
            first["sagaId"].as_str().unwrap()
        )),
        "{said}"
    );
}

#[tokio::test]
async fn a_replan_bound_of_zero_ends_as_before() {
    let (task, model, executor) = goal_run(&[example_draft()], vec![Script::Compensate], 0).await;
    assert_eq!(task.status.state, TaskState::Failed);
    assert_eq!(metadata(&task, "outcome"), Some(json!("compensated")));
    assert_eq!(executor.plans().len(), 1);
    assert_eq!(model.received().len(), 1);
    assert!(attempts(&task).is_empty());
    assert!(!history_text(&task).contains("planning attempt"));
}

#[tokio::test]
async fn the_bound_stops_replanning_and_the_end_lists_every_attempt() {
    let (task, model, executor) = goal_run(
        &[example_draft(), side_by_side(), check_beside_budget()],
        vec![Script::Compensate],
        1,
    )
    .await;
    assert_eq!(task.status.state, TaskState::Failed);
    assert_eq!(metadata(&task, "outcome"), Some(json!("compensated")));
    let text = status_text(&task);
    assert!(
        text.contains("attempt 2: no replan left (--max-replans 1)"),
        "{text}"
    );
    let plans = executor.plans();
    assert_eq!(plans.len(), 2);
    assert_eq!(model.received().len(), 2, "no third draft is asked for");
    let listed = attempts(&task);
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1]["sagaId"], plans[1].0["sagaId"]);
    assert_eq!(plans[1].0["supersedes"]["sagaId"], plans[0].0["sagaId"]);
}

#[tokio::test]
async fn a_plan_already_tried_is_not_run_again() {
    // The model drafts the same calls again: a new saga id and time, the same plan.
    let (task, model, executor) = goal_run(
        &[example_draft(), example_draft()],
        vec![Script::Compensate],
        2,
    )
    .await;
    assert_eq!(task.status.state, TaskState::Failed);
    assert_eq!(metadata(&task, "outcome"), Some(json!("compensated")));
    let text = status_text(&task);
    assert!(text.contains("found no plan it had not tried"), "{text}");
    assert_eq!(executor.plans().len(), 1);
    assert_eq!(model.received().len(), 2);
}

#[tokio::test]
async fn a_saga_waiting_for_a_person_is_not_planned_again() {
    let (task, model, executor) = goal_run(
        &[example_draft(), side_by_side()],
        vec![Script::Escalate],
        2,
    )
    .await;
    assert_eq!(task.status.state, TaskState::AuthRequired);
    assert_eq!(executor.plans().len(), 1);
    assert_eq!(model.received().len(), 1);
}

/// Every status text the task's history holds, one per line.
fn history_text(task: &Task) -> String {
    task.history
        .iter()
        .flatten()
        .map(message_text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A cancel during the second attempt cancels the executor's task for it (which unwinds)
/// and plans nothing more; the goal ends CANCELED, listing both attempts.
#[tokio::test]
async fn a_cancel_during_the_second_attempt_ends_it_and_plans_nothing_more() {
    let model = ScriptedModel::start(
        vec![
            Reply::draft(&example_draft()),
            Reply::draft(&side_by_side()),
            Reply::draft(&check_beside_budget()),
        ],
        false,
    )
    .await;
    let identity = planner_identity();
    let executor =
        FakeExecutor::start_each(vec![Script::Compensate, Script::Hold], &identity).await;
    let llm = Some(llm_config(&model.url, 0));
    let planner = start_configured(|url| test_settings(url, &executor.url, identity, llm)).await;
    let task_id = send_at_once(&planner.client, &goal()).await;
    let call = agent_host::OutboundCall::default();
    executor.a_task_held().await;
    let canceled = planner.client.cancel_task(&call, &task_id).await.unwrap();
    assert_eq!(
        canceled.status.state,
        TaskState::Canceled,
        "{}",
        status_text(&canceled)
    );
    let held = executor.seen.lock().unwrap().held[0].clone();
    assert_eq!(held.state().await.unwrap(), TaskState::Canceled);

    let task = planner.client.get_task(&call, &task_id).await.unwrap();
    assert_eq!(task.status.state, TaskState::Canceled);
    assert_eq!(executor.plans().len(), 2);
    assert_eq!(
        model.received().len(),
        2,
        "nothing planned after the cancel"
    );
    let listed = attempts(&task);
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[1]["state"], json!("TASK_STATE_CANCELED"));
}
