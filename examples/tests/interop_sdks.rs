//! The official Python and JavaScript A2A SDKs, clients we did not write, drive an
//! agent built on our hosting layer over both bindings: send, stream, get, list, cancel.

mod common;

use std::process::Command;

use common::*;
use serde_json::{Value, json};

fn assert_client_saw_everything(seen: &Value, binding: &str) {
    assert_eq!(seen["binding"], binding);
    assert_eq!(
        seen["send"],
        json!({"state": "TASK_STATE_COMPLETED", "reply": "Hello from TCK"}),
        "{seen}"
    );
    assert_eq!(
        seen["stream"]["first"], "task",
        "the stream starts with the Task: {seen}"
    );
    assert_eq!(
        seen["stream"]["states"],
        json!([
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED"
        ]),
        "{seen}"
    );
    assert_eq!(seen["stream"]["texts"], json!(["Stream hello from TCK"]));
    assert_eq!(
        seen["get"],
        json!({"state": "TASK_STATE_COMPLETED", "artifacts": 1})
    );
    assert_eq!(seen["list"]["contains_both"], true, "{seen}");
    assert_eq!(
        seen["cancel"],
        json!({"before": "TASK_STATE_INPUT_REQUIRED", "after": "TASK_STATE_CANCELED"})
    );
}

#[test]
fn official_python_sdk() {
    let agent = AgentProcess::tck_sut(None);
    let script = workspace_root().join("tests/interop/python/a2a_sdk_check.py");
    for binding in ["JSONRPC", "HTTP+JSON"] {
        let seen = run_client(
            Command::new(python())
                .arg(&script)
                .arg(&agent.url)
                .arg(binding),
        );
        assert_client_saw_everything(&seen, binding);
    }
}

#[test]
fn official_javascript_sdk() {
    let agent = AgentProcess::tck_sut(None);
    let dir = js_dir();
    for binding in ["JSONRPC", "HTTP+JSON"] {
        let seen = run_client(
            Command::new("node")
                .current_dir(&dir)
                .arg("check.mjs")
                .arg(&agent.url)
                .arg(binding),
        );
        assert_client_saw_everything(&seen, binding);
    }
}
