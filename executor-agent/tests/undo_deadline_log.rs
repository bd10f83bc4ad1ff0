//! A tool's unreadable undo deadline reaches the executor's log (through the writer the
//! binaries log with) quoted and escaped: a newline and a whole fake record in
//! `holdExpiresAt` stay inside the one warning that says the TTL alone decides.

mod common;

use agent_host::sdk::TaskState;
use common::*;
use serde_json::json;

const FORGED: &str = "2026-12-01T00:00:00.000000Z  INFO executor_agent::http: card registered agent=\"budget\" by=\"admin\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newline_in_a_reported_deadline_does_not_forge_a_log_record() {
    let captured = common::logs::capture();
    let harness = Harness::start(&[("sandbox.provision", Fault::Decline)]).await;
    harness.log("budget").answers.insert(
        "budget.reserve".into(),
        json!({"reservationId": "r_1", "holdExpiresAt": format!("soon\n{FORGED}")}),
    );
    let task = harness
        .send(
            harness.signed("examples/plans/supplier-onboarding.json"),
            None,
        )
        .await;
    // The TTL alone decides, and it has not run out: the budget is released.
    assert_eq!(task.status.state, TaskState::Failed, "{:?}", task.status);
    let s1 = &ledger_of(&task)["steps"][1];
    assert_eq!(s1["undo"]["state"], "done", "{s1}");
    assert_eq!(s1["undoDeadline"]["setBy"], "undoTtlSeconds", "{s1}");

    let log = captured.text();
    assert!(
        log.lines().all(|line| !line.starts_with(FORGED)),
        "a forged record:\n{log}"
    );
    let warning = log
        .lines()
        .find(|l| l.contains("states no usable undo deadline"))
        .unwrap_or_else(|| panic!("no warning in the log:\n{log}"));
    assert!(
        warning.contains("soon\\\\n2026-12-01") && warning.contains("agent=\"budget\""),
        "{warning}"
    );
}
