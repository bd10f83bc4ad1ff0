//! An internal failure reaches the caller as a short text with an error id, and only the
//! log has its cause (a path, what the disk said) under that id. A plan whose accepting
//! write fails for a moment is taken in again, not lost.

mod common;

use agent_host::sdk::{PartContent, TaskState};
use common::Harness;

const SECRET_PATH: &str = "/var/lib/sagaplane/secret-volume/executor.db";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_the_journal_cannot_record_fails_with_an_error_id_and_no_internal_text() {
    let captured = common::logs::capture();

    let setup = Harness::start(&[]).await;
    setup.journal.fail_begins(SECRET_PATH);
    let task = setup
        .send(
            setup.signed("examples/plans/supplier-onboarding.json"),
            None,
        )
        .await;
    assert_eq!(task.status.state, TaskState::Failed);
    let said: String = task
        .status
        .message
        .iter()
        .flat_map(|m| &m.parts)
        .filter_map(|p| match &p.content {
            PartContent::Text(text) => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert!(
        !said.contains(SECRET_PATH) && !said.contains("No space"),
        "{said}"
    );
    let id = said
        .split("error id ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("no error id in {said:?}"));
    assert_eq!(id.len(), 12, "{said}");
    assert!(
        setup.log("vendor-registry").calls.is_empty(),
        "nothing was called"
    );

    // The log line with that id has the cause.
    let log = captured.text();
    let line = log
        .lines()
        .find(|line| line.contains(id))
        .unwrap_or_else(|| panic!("no log line with {id}:\n{log}"));
    assert!(
        line.contains(SECRET_PATH) && line.contains("No space left on device"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_whose_accepting_write_fails_for_a_moment_begins_once_it_can_be_written() {
    let setup = Harness::start(&[]).await;
    setup.journal.fail_begins(SECRET_PATH);
    let client = agent_host::AgentClient::new(&setup.url).unwrap();
    let call = setup.as_planner();
    let request = common::data_message(
        setup.signed("examples/plans/supplier-onboarding.json"),
        None,
    );
    let sending = tokio::spawn(async move { client.send(&call, &request).await });
    // The first accepting write failed; the task was answered SUBMITTED already.
    setup.journal.begin_failed.notified().await;
    setup.journal.begin_failed.notified().await;
    setup.journal.stop_failing_begins();
    let task = match sending.await.unwrap().unwrap() {
        agent_host::sdk::SendMessageResponse::Task(task) => task,
        other => panic!("expected a task, got {other:?}"),
    };
    assert_eq!(task.status.state, TaskState::Completed, "{:?}", task.status);
    for agent in common::AGENTS {
        assert_eq!(
            setup.log(agent).effects.len(),
            1,
            "{agent} applied its step once"
        );
    }
}
