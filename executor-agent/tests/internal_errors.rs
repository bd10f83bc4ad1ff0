//! An internal failure reaches the caller as a short text with an error id, and only the
//! log has its cause (a path, what the disk said) under that id.

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
