//! `SendMessage`'s answer written with serde against the answer the SDK's handler writes
//! (`protojson_conv`): the same JSON, numbers compared by value (the SDK writes each
//! number in a data part as a double).

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::sdk::{
    A2AError, Artifact, Message, Part, Role, Task, TaskState, TaskStatus, error_code,
    numbers_as_doubles,
};

/// `value` with numbers as doubles (`numbers_as_doubles`), and without the time an
/// error's details carry (each writing stamps its own).
fn comparable(value: &Value) -> Value {
    match value {
        Value::Object(map) if map.contains_key("@type") => {
            let mut details = map.clone();
            if let Some(Value::Object(metadata)) = details.get_mut("metadata") {
                metadata.remove("timestamp");
            }
            numbers_as_doubles(&Value::Object(details))
        }
        Value::Array(items) => Value::Array(items.iter().map(comparable).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), comparable(v)))
                .collect(),
        ),
        other => numbers_as_doubles(other),
    }
}

/// What the SDK's handler writes for this answer.
fn sdk_writes(id: &JsonRpcId, answer: &Result<SendMessageResponse, A2AError>) -> Value {
    let response = match answer {
        Ok(result) => {
            JsonRpcResponse::success(id.clone(), protojson_conv::to_value(result).unwrap())
        }
        Err(error) => JsonRpcResponse::error(id.clone(), error.to_jsonrpc_error()),
    };
    serde_json::to_value(response).unwrap()
}

async fn we_write(id: &JsonRpcId, answer: Result<SendMessageResponse, A2AError>) -> Value {
    let response = write(id, answer);
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    serde_json::from_slice(&body).unwrap()
}

fn message(id: &str, role: Role, parts: Vec<Part>) -> Message {
    Message {
        message_id: id.into(),
        context_id: Some("ctx-1".into()),
        task_id: Some("t-1".into()),
        role,
        parts,
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

/// A saga's task as the executor answers it: the plan in the history, progress, the
/// ledger, metadata.
fn task(state: TaskState, timestamp: &str, data: Value) -> Task {
    Task {
        id: "t-1".into(),
        context_id: "ctx-1".into(),
        status: TaskStatus {
            state,
            message: Some(message("m-3", Role::Agent, vec![Part::text("the end")])),
            timestamp: Some(
                chrono::DateTime::parse_from_rfc3339(timestamp)
                    .unwrap()
                    .into(),
            ),
        },
        artifacts: Some(vec![Artifact {
            artifact_id: "saga-ledger".into(),
            name: Some("saga-ledger".into()),
            description: Some("Per step".into()),
            parts: vec![Part::data(
                json!({"phase": "completed", "steps": [data.clone()]}),
            )],
            metadata: Some(HashMap::from([("k".into(), json!({"v": 1}))])),
            extensions: None,
        }]),
        history: Some(vec![
            message("m-1", Role::User, vec![Part::data(json!({"plan": data}))]),
            message(
                "m-2",
                Role::Agent,
                vec![Part::text("s0: started \u{1F600} \"q\"")],
            ),
        ]),
        metadata: Some(HashMap::from([
            ("sagaId".into(), json!("sg_1")),
            ("owner".into(), json!("planner")),
        ])),
    }
}

const STATES: [TaskState; 8] = [
    TaskState::Submitted,
    TaskState::Working,
    TaskState::InputRequired,
    TaskState::AuthRequired,
    TaskState::Completed,
    TaskState::Failed,
    TaskState::Canceled,
    TaskState::Rejected,
];

#[tokio::test]
async fn a_task_a_message_and_a_refusal_are_written_as_the_sdk_writes_them() {
    let data = json!({"amountMinor": 25000, "rate": 2.5, "tags": ["a", null, true], "nested": {}});
    let ids = [
        JsonRpcId::Number(7),
        JsonRpcId::String("req-1".into()),
        JsonRpcId::Null,
    ];
    let stamps = [
        "2026-11-30T07:00:00Z",
        "2026-11-30T07:00:00.100Z",
        "2026-11-30T07:00:00.123456Z",
        "2026-11-30T07:00:00.123456789Z",
    ];
    let mut answers: Vec<Result<SendMessageResponse, A2AError>> = Vec::new();
    for (state, stamp) in STATES.into_iter().zip(stamps.iter().cycle()) {
        answers.push(Ok(SendMessageResponse::Task(task(
            state,
            stamp,
            data.clone(),
        ))));
    }
    answers.push(Ok(SendMessageResponse::Message(message(
        "m-9",
        Role::Agent,
        vec![Part::text("a direct answer"), Part::data(data.clone())],
    ))));
    answers.push(Err(A2AError::task_not_found("t-404")));
    answers.push(Err(A2AError::invalid_params(
        "the task's first message has no plan",
    )));
    for id in &ids {
        for answer in &answers {
            let sdk = sdk_writes(id, answer);
            let ours = we_write(id, answer.clone()).await;
            assert_eq!(
                comparable(&ours),
                comparable(&sdk),
                "\nours {ours}\nsdk  {sdk}"
            );
        }
    }
    let refused = we_write(&ids[0], Err(A2AError::task_not_found("t-404"))).await;
    assert_eq!(refused["error"]["code"], json!(error_code::TASK_NOT_FOUND));
}

proptest! {
    #[test]
    fn any_data_part_is_written_as_the_sdk_writes_it(
        key in "[a-zA-Z_]{1,8}",
        text in "\\PC{0,24}",
        n in -1_000_000_000i64..1_000_000_000,
        x in -1.0e9f64..1.0e9,
        state in 0usize..8,
    ) {
        let data = json!({key: [text.clone(), n, x, {"deep": [n]}], "t": text});
        let answer = Ok(SendMessageResponse::Task(task(STATES[state].clone(), "2026-11-30T07:00:00.5Z", data)));
        let sdk = sdk_writes(&JsonRpcId::Number(1), &answer);
        let ours = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(we_write(&JsonRpcId::Number(1), answer));
        prop_assert_eq!(comparable(&ours), comparable(&sdk));
    }
}
