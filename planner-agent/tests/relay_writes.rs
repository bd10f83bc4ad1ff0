//! What following a saga costs the planner's task store: relayed progress gathers into one
//! write, and an end (its metadata and status) is one write, with every status the
//! executor reported kept in the planner's task, in order. Alone in its process: it reads
//! the process's count of task-store writes.

mod common;

use std::time::Duration;

use agent_host::sdk::{StreamResponse, TaskState};
use common::*;
use planner_agent::service::Settings;
use sagaplane_storage::sqlite::writes;

/// Runs the supplier goal through a planner whose progress gathers for `gather`, against a
/// fake executor that reports each step and completes; returns the planner's task-store
/// writes, the texts of its task's history, and the states its stream announced.
async fn one_goal(gather: Duration) -> (u64, Vec<String>, Vec<TaskState>) {
    let identity = planner_identity();
    let executor = FakeExecutor::start(Script::Complete, &identity).await;
    let dir = tempfile::tempdir().unwrap();
    let before = writes("task-store");
    let planner = start_configured(|url| Settings {
        data_dir: Some(dir.path().to_owned()),
        identity: identity.clone(),
        executor_urls: vec![executor.url.clone()],
        executor_id: "executor".into(),
        public_url: url.to_owned(),
        auth: agent_host::InboundAuth::Open,
        mandate: Some(test_mandate()),
        llm: None,
        templates: planner_agent::Templates::builtin(),
        executor_retry: planner_agent::DEFAULT_EXECUTOR_RETRY,
        gather_progress: gather,
        max_replans: planner_agent::replan::DEFAULT_MAX_REPLANS,
        otlp_endpoint: None,
    })
    .await;
    let events = stream(&planner.client, SUPPLIER_GOAL, None).await;
    let Some(StreamResponse::Task(first)) = events.first() else {
        panic!("a stream begins with the task: {events:?}");
    };
    let task = settled(&planner, &first.id).await;
    assert_eq!(
        task.status.state,
        TaskState::Completed,
        "{}",
        status_text(&task)
    );
    let written = writes("task-store") - before;
    let history = task
        .history
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m.parts.iter().find_map(|p| p.as_text().map(str::to_owned)))
        .collect();
    let announced = events
        .iter()
        .filter_map(|e| match e {
            StreamResponse::StatusUpdate(u) => Some(u.status.state.clone()),
            _ => None,
        })
        .collect();
    planner.shutdown.cancel();
    executor.shutdown.cancel();
    (written, history, announced)
}

fn relayed(history: &[String]) -> Vec<&String> {
    history
        .iter()
        .filter(|t| t.ends_with(" succeeded"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sagas_progress_is_gathered_into_one_write_and_its_end_is_one_write() {
    // Gathering longer than the saga lasts: every step's status waits for the end.
    let (gathered, gathered_history, gathered_announced) = one_goal(Duration::from_secs(60)).await;
    let (each, each_history, each_announced) = one_goal(Duration::ZERO).await;

    eprintln!("planner task writes per saga: {gathered} gathered, {each} written at once");
    // Nothing the executor said is lost or reordered by gathering.
    let steps = relayed(&each_history);
    assert_eq!(steps.len(), 6, "one status per step: {each_history:#?}");
    assert_eq!(relayed(&gathered_history), steps);
    assert!(
        gathered_history
            .last()
            .is_some_and(|t| t.starts_with("the executor completed its task")),
        "{gathered_history:#?}"
    );
    assert_eq!(
        gathered_announced, each_announced,
        "a stream sees every status"
    );

    // Six statuses, one write; and the end is one write: created, planning, the plan,
    // its saga id, submitting, taken by the executor, the progress, the end.
    assert_eq!(
        each - gathered,
        5,
        "six relayed statuses cost one write, not six"
    );
    assert!(
        gathered <= 8,
        "the planner wrote its task {gathered} times for one saga"
    );
}
