//! Goals sent to the planner with the official Python A2A SDK client (a client we did not
//! write), the demo's agents as real processes: one runs the whole supplier saga to
//! COMPLETED; one waits for a person, which the client sees as AUTH_REQUIRED naming the
//! executor's task, and its answer on the planner's task is refused without effect.

use std::process::Command;
use std::time::Duration;

use sagaplane_e2e::{Served, python, workspace_root};
use serde_json::Value;

const GOAL: &str = "Onboard supplier ACME GmbH, contact ops@acme.example, setup fee 120 EUR";

/// Runs a script of `tests/interop/python` with `args`; returns the JSON it printed.
fn run_python(script: &str, args: &[&str]) -> Value {
    let output = Command::new(python())
        .arg(workspace_root().join("tests/interop/python").join(script))
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON object")
}

#[test]
fn a_goal_from_the_python_sdk_completes_the_saga() {
    let served = Served::start(&[], Duration::from_secs(300));
    let token = served.folder.join("planner-token");
    let seen = run_python(
        "send_goal.py",
        &[&served.planner, GOAL, token.to_str().unwrap()],
    );
    assert_eq!(seen["final"], "TASK_STATE_COMPLETED", "{seen}");
    assert_eq!(seen["states"][0], "TASK_STATE_SUBMITTED", "{seen}");
    assert_eq!(
        seen["states"].as_array().unwrap().last().unwrap(),
        "TASK_STATE_COMPLETED"
    );
    let texts = seen["texts"].to_string();
    for step in ["s0", "s1", "s2", "s3", "s4", "s5"] {
        assert!(texts.contains(&format!("{step}: succeeded")), "{texts}");
    }
    assert!(seen["executorTaskId"].is_string(), "{seen}");
    assert_eq!(seen["artifacts"], serde_json::json!(["plan"]));
}

/// Finding 17 of issue 19: the capture's outcome is unknown (and its status skill is
/// down, so it cannot be verified), so the executor's saga waits for a person at the
/// pivot.
#[test]
fn a_python_sdk_client_sees_auth_required_and_its_answer_on_the_planner_is_refused() {
    let served = Served::start(
        &["--fail-at", "capture-unverified"],
        Duration::from_secs(300),
    );
    let token = served.folder.join("planner-token");
    let seen = run_python(
        "answer_paused_goal.py",
        &[&served.planner, GOAL, token.to_str().unwrap()],
    );
    assert_eq!(seen["paused"], "TASK_STATE_AUTH_REQUIRED", "{seen}");
    assert_eq!(
        seen["states"].as_array().unwrap().last().unwrap(),
        "TASK_STATE_AUTH_REQUIRED",
        "{seen}"
    );
    assert!(
        !seen["states"].to_string().contains("INPUT_REQUIRED"),
        "the planner's task never invites input: {seen}"
    );
    let executor_task = seen["executorTaskId"].as_str().expect("executorTaskId");
    let text = seen["pausedText"].as_str().unwrap();
    for needed in [
        executor_task,
        served.executor.as_str(),
        "approver",
        "never decides",
    ] {
        assert!(text.contains(needed), "{needed:?} missing from {text:?}");
    }
    let refused = seen["refused"].as_str().expect("the answer was refused");
    assert!(
        refused.contains("takes no further messages") && refused.contains(executor_task),
        "{refused}"
    );
    assert_eq!(seen["after"], "TASK_STATE_AUTH_REQUIRED", "{seen}");
    assert_eq!(seen["afterText"], seen["pausedText"], "{seen}");
    assert_eq!(seen["historyAfter"], seen["historyBefore"], "{seen}");
}
