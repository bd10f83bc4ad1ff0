//! The planner's record of a goal's attempts survives a SIGKILL: the `planner-agent`
//! binary, asking a scripted model, in front of a fake executor that unwinds the first
//! plan and holds the second, is killed while the second attempt runs; started again on
//! the same data directory, it follows the second attempt to its end without planning
//! anything more, and the goal ends COMPLETED listing both attempts.

mod common;

use agent_host::sdk::{StreamResponse, TaskState};
use agent_host::{AgentClient, OutboundCall};
use common::model::*;
use common::processes::{planner_binary, planner_files};
use common::*;
use futures::StreamExt;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_killed_during_the_second_attempt_goes_on_with_it_and_plans_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let identity = planner_identity();
    planner_files(dir.path());
    let mut second = example_draft();
    for (i, after) in [
        (1, json!(["s0"])),
        (2, json!(["s0"])),
        (3, json!(["s1", "s2"])),
    ] {
        second["steps"][i]["after"] = after;
    }
    let model = ScriptedModel::start(
        vec![Reply::draft(&example_draft()), Reply::draft(&second)],
        false,
    )
    .await;
    let executor =
        FakeExecutor::start_each(vec![Script::Compensate, Script::Hold], &identity).await;

    let mut planner = planner_binary(dir.path(), &executor.url, &model.url, 2);
    let client = AgentClient::new(planner.url()).unwrap();
    let task_id = send_at_once(&client, &format!("{SUPPLIER_GOAL}, max spend 250 EUR")).await;
    // The second attempt's plan is at the executor, which holds it, and the planner
    // recorded the executor's task for it: kill the planner.
    let mut progress = client
        .subscribe(&OutboundCall::default(), &task_id)
        .await
        .unwrap();
    let second_taken = async {
        let mut taken = 0;
        while let Some(Ok(event)) = progress.next().await {
            if let StreamResponse::StatusUpdate(update) = event
                && update
                    .status
                    .message
                    .as_ref()
                    .map(message_text)
                    .unwrap_or_default()
                    .contains("the executor took plan")
            {
                taken += 1;
                if taken == 2 {
                    return;
                }
            }
        }
        panic!("the planner's stream ended before the second plan was taken");
    };
    if tokio::time::timeout(std::time::Duration::from_secs(30), second_taken)
        .await
        .is_err()
    {
        panic!(
            "the second plan was not taken; the planner logged:\n{}",
            planner.log()
        );
    }
    executor.a_task_held().await;
    planner.kill();
    assert_eq!(model.received().len(), 2);

    let mut planner = planner_binary(dir.path(), &executor.url, &model.url, 2);
    let client = AgentClient::new(planner.url()).unwrap();
    let mut events = client
        .subscribe(&OutboundCall::default(), &task_id)
        .await
        .unwrap();
    executor.complete_held().await;
    let ended = async {
        while let Some(Ok(event)) = events.next().await {
            if let StreamResponse::StatusUpdate(update) = event
                && update.status.state.is_terminal()
            {
                break;
            }
        }
    };
    if tokio::time::timeout(std::time::Duration::from_secs(30), ended)
        .await
        .is_err()
    {
        panic!(
            "the goal did not end; the planner logged:\n{}",
            planner.log()
        );
    }
    let task = client
        .get_task(&OutboundCall::default(), &task_id)
        .await
        .unwrap();
    planner.kill();

    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{}",
        status_text(&task)
    );
    // Nothing planned after the restart: two drafts, two plans.
    assert_eq!(model.received().len(), 2);
    let plans = executor.plans();
    assert_eq!(plans.len(), 2);
    let attempts: Vec<Value> = metadata(&task, "attempts")
        .and_then(|a| a.as_array().cloned())
        .unwrap_or_default();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["sagaId"], plans[0].0["sagaId"]);
    assert_eq!(attempts[1]["sagaId"], plans[1].0["sagaId"]);
    assert_eq!(attempts[1]["state"], json!("TASK_STATE_COMPLETED"));
    assert_eq!(plans[1].0["supersedes"]["sagaId"], plans[0].0["sagaId"]);
}
