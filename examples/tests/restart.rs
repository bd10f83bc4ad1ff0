//! A restarted agent still answers for every task it ever had: tasks in every state are
//! created, the process is SIGKILLed, and a new process on the same SQLite file answers
//! GetTask, ListTasks and SubscribeToTask (on the paused task) correctly.

mod common;

use common::*;
use serde_json::{Value, json};

async fn rpc(url: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let response = reqwest::Client::new()
        .post(format!("{url}/"))
        .header("A2A-Version", "1.0")
        .json(&body)
        .send()
        .await
        .expect("request");
    let value: Value = response.json().await.expect("JSON body");
    assert!(value.get("error").is_none(), "{method}: {value}");
    value["result"].clone()
}

async fn send(url: &str, message_id: &str, extra: Value) -> Value {
    let mut message =
        json!({"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": "hi"}]});
    if let (Some(m), Some(extra)) = (message.as_object_mut(), extra.as_object()) {
        m.extend(extra.clone());
    }
    rpc(url, "SendMessage", json!({"message": message})).await["task"].clone()
}

fn state(task: &Value) -> &str {
    task.pointer("/status/state")
        .and_then(Value::as_str)
        .unwrap_or("?")
}

/// Reads SSE `data:` frames until the stream closes; returns each JSON-RPC result.
async fn subscribe(url: &str, task_id: &str, on_first: impl AsyncFnOnce()) -> Vec<Value> {
    let body =
        json!({"jsonrpc": "2.0", "id": 9, "method": "SubscribeToTask", "params": {"id": task_id}});
    let mut response = reqwest::Client::new()
        .post(format!("{url}/"))
        .header("A2A-Version", "1.0")
        .json(&body)
        .send()
        .await
        .expect("subscribe");
    let mut events = Vec::new();
    let mut buffer = String::new();
    let mut on_first = Some(on_first);
    while let Some(chunk) = response.chunk().await.expect("stream") {
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            for line in frame.lines() {
                if let Some(data) = line.strip_prefix("data:") {
                    let value: Value = serde_json::from_str(data.trim()).expect("JSON frame");
                    events.push(value["result"].clone());
                    if let Some(f) = on_first.take() {
                        f().await;
                    }
                }
            }
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tasks.db");

    let agent = AgentProcess::tck_sut(Some(&db));
    let url = agent.url.clone();
    let completed = send(&url, "tck-complete-task-r1", json!({})).await;
    let paused = send(&url, "tck-input-required-r2", json!({})).await;
    let rejected = send(&url, "tck-reject-task-r3", json!({})).await;
    let to_cancel = send(&url, "tck-input-required-r4", json!({})).await;
    let canceled = rpc(&url, "CancelTask", json!({"id": to_cancel["id"]})).await;
    let expected = [
        (completed["id"].clone(), "TASK_STATE_COMPLETED"),
        (paused["id"].clone(), "TASK_STATE_INPUT_REQUIRED"),
        (rejected["id"].clone(), "TASK_STATE_REJECTED"),
        (canceled["id"].clone(), "TASK_STATE_CANCELED"),
    ];
    for (id, want) in &expected {
        assert_eq!(state(&rpc(&url, "GetTask", json!({"id": id})).await), *want);
    }
    agent.kill();

    let agent = AgentProcess::tck_sut(Some(&db));
    let url = agent.url.clone();
    for (id, want) in &expected {
        let task = rpc(&url, "GetTask", json!({"id": id})).await;
        assert_eq!(state(&task), *want, "after restart: {task}");
        assert!(
            task["history"].as_array().is_some_and(|h| !h.is_empty()),
            "history survives: {task}"
        );
    }
    let listed = rpc(&url, "ListTasks", json!({})).await;
    assert_eq!(listed["totalSize"], 4, "{listed}");

    // Subscribe to the paused task: the stream opens with the task as stored, then
    // follows the human's answer to completion.
    let paused_id = paused["id"].as_str().unwrap().to_owned();
    let answer_url = url.clone();
    let answer_id = paused_id.clone();
    let events = subscribe(&url, &paused_id, async move || {
        send(
            &answer_url,
            "tck-complete-task-r5",
            json!({"taskId": answer_id}),
        )
        .await;
    })
    .await;
    assert_eq!(
        state(&events[0]["task"]),
        "TASK_STATE_INPUT_REQUIRED",
        "{events:#?}"
    );
    let last = events.last().unwrap();
    assert_eq!(
        last.pointer("/statusUpdate/status/state"),
        Some(&json!("TASK_STATE_COMPLETED")),
        "the stream ends at completion: {events:#?}"
    );
    assert_eq!(
        state(&rpc(&url, "GetTask", json!({"id": paused_id})).await),
        "TASK_STATE_COMPLETED"
    );
}
