//! `SendMessage`'s answer written with serde against the answer the SDK's handler writes
//! (`protojson_conv`): the same JSON, numbers compared by value (the SDK writes each
//! number in a data part as a double).

use std::collections::HashMap;

use futures::StreamExt;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::sdk::{
    A2AError, Artifact, Message, Part, PartContent, Role, SendMessageResponse, StreamResponse,
    Task, TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent, error_code,
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

/// The request both ways: read here with serde, and by the SDK (`protojson_conv`), ours
/// with its numbers made doubles as the SDK's reading holds them.
fn both_readings(params: &Value) -> (Option<SendMessageRequest>, Option<SendMessageRequest>) {
    let doubles = |map: &mut Option<HashMap<String, Value>>| {
        for value in map.iter_mut().flat_map(|m| m.values_mut()) {
            *value = numbers_as_doubles(value);
        }
    };
    let ours = read::send_message(params).map(|mut request| {
        doubles(&mut request.metadata);
        doubles(&mut request.message.metadata);
        for part in &mut request.message.parts {
            doubles(&mut part.metadata);
            if let PartContent::Data(data) = &mut part.content {
                *data = numbers_as_doubles(data);
            }
        }
        request
    });
    let sdk = protojson_conv::from_value::<SendMessageRequest>(params.clone()).ok();
    (ours, sdk)
}

/// A plan's `SendMessage` as a planner sends it.
fn plan_request() -> Value {
    json!({
        "message": {
            "messageId": "m-1", "role": "ROLE_USER", "contextId": "ctx-1",
            "parts": [{"data": {"plan": {"sagaId": "sg_1", "amountMinor": 25000, "rate": 2.5,
                "steps": [{"id": "s0", "args": {"n": [1, null, true, {}]}}]}},
                "mediaType": "application/json"}],
            "metadata": {"k": {"v": 1}},
            "extensions": ["https://example.test/ext"],
            "referenceTaskIds": ["t-0"]
        },
        "configuration": {"acceptedOutputModes": ["application/json"], "historyLength": 0,
            "returnImmediately": false},
        "metadata": {"trace": "x"},
        "tenant": "t"
    })
}

#[test]
fn a_request_in_the_wire_form_is_read_as_the_sdk_reads_it_with_its_integers_kept() {
    let params = plan_request();
    let (ours, sdk) = both_readings(&params);
    assert!(ours.is_some(), "the wire form is read here");
    assert_eq!(ours, sdk);
    let read = read::send_message(&params).unwrap();
    let PartContent::Data(data) = &read.message.parts[0].content else {
        panic!("a data part");
    };
    // Sent as an integer, held as one (the SDK's reading makes it 25000.0).
    assert!(data["plan"]["amountMinor"].is_u64());
}

#[test]
fn a_request_in_any_other_form_is_left_to_the_sdk() {
    type Alteration = (&'static str, fn(&mut Value));
    let altered: [Alteration; 12] = [
        ("a snake_case name", |p| {
            let id = p["message"]["contextId"].take();
            p["message"].as_object_mut().unwrap().remove("contextId");
            p["message"]["context_id"] = id;
        }),
        ("an unknown member", |p| {
            p["message"]["colour"] = json!("red")
        }),
        ("a part with two contents", |p| {
            p["message"]["parts"][0]["text"] = json!("and text")
        }),
        ("a part with no content", |p| {
            p["message"]["parts"][0]
                .as_object_mut()
                .unwrap()
                .remove("data");
        }),
        ("a null data part", |p| {
            p["message"]["parts"][0]["data"] = Value::Null
        }),
        ("raw bytes", |p| {
            p["message"]["parts"] = json!([{"raw": "aGk="}])
        }),
        ("a role by number", |p| p["message"]["role"] = json!(1)),
        ("a role by another name", |p| {
            p["message"]["role"] = json!("user")
        }),
        ("a history length as a string", |p| {
            p["configuration"]["historyLength"] = json!("5")
        }),
        ("a push notification config", |p| {
            p["configuration"]["taskPushNotificationConfig"] = json!({"url": "http://127.0.0.1:1/"})
        }),
        ("a null context id", |p| {
            p["message"]["contextId"] = Value::Null
        }),
        ("metadata that is not an object", |p| {
            p["metadata"] = json!([1])
        }),
    ];
    for (what, alter) in altered {
        let mut params = plan_request();
        alter(&mut params);
        assert!(read::send_message(&params).is_none(), "{what}: read here");
    }
    for params in [json!(null), json!([]), json!({}), json!({"message": "m"})] {
        assert!(read::send_message(&params).is_none(), "{params}: read here");
    }
}

proptest! {
    #[test]
    fn any_request_read_here_is_read_as_the_sdk_reads_it(
        key in "[a-zA-Z_]{1,8}",
        text in "\\PC{0,24}",
        n in -1_000_000_000i64..1_000_000_000,
        x in -1.0e9f64..1.0e9,
        history in proptest::option::of(-5i32..100),
        immediately in proptest::option::of(any::<bool>()),
        agent in any::<bool>(),
        with_text in any::<bool>(),
        empty in any::<bool>(),
    ) {
        let mut parts = vec![Part::data(json!({key.clone(): [text.clone(), n, x, {"deep": [n]}]}))];
        if with_text {
            let mut part = Part::text(text.clone());
            part.filename = Some(text.clone());
            part.media_type = Some(key.clone());
            part.metadata = Some(HashMap::new());
            parts.push(part);
        }
        let role = if agent { Role::Agent } else { Role::User };
        let mut message = message(&text, role, parts);
        message.context_id = Some(text.clone());
        message.extensions = Some(if empty { vec![] } else { vec![key.clone()] });
        message.reference_task_ids = Some(if empty { vec![] } else { vec![text.clone()] });
        message.metadata = Some(if empty { HashMap::new() } else { HashMap::from([(key.clone(), json!([x]))]) });
        let request = SendMessageRequest {
            message,
            configuration: Some(crate::sdk::SendMessageConfiguration {
                accepted_output_modes: Some(if empty { vec![] } else { vec![key.clone()] }),
                task_push_notification_config: None,
                history_length: history,
                return_immediately: immediately,
            }),
            metadata: Some(HashMap::from([(key.clone(), json!(n))])),
            tenant: Some(if empty { String::new() } else { key.clone() }),
        };
        let params = serde_json::to_value(&request).unwrap();
        let (ours, sdk) = both_readings(&params);
        prop_assert!(ours.is_some());
        prop_assert_eq!(ours, sdk);
    }
}

/// Every kind of event a stream carries, with the members a writer may leave empty.
fn stream_events(data: &Value) -> Vec<StreamResponse> {
    let status = |state: TaskState| TaskStatus {
        state,
        message: Some(message("m-5", Role::Agent, vec![Part::text("s2: done")])),
        timestamp: Some(
            chrono::DateTime::parse_from_rfc3339("2026-11-30T07:00:00.250Z")
                .unwrap()
                .into(),
        ),
    };
    let artifact = |metadata: Option<HashMap<String, Value>>| Artifact {
        artifact_id: "saga-ledger".into(),
        name: Some("saga-ledger".into()),
        description: None,
        parts: vec![Part::data(data.clone())],
        metadata,
        extensions: None,
    };
    let mut events = vec![
        StreamResponse::Task(task(
            TaskState::Working,
            "2026-11-30T07:00:00Z",
            data.clone(),
        )),
        StreamResponse::Message(message("m-9", Role::Agent, vec![Part::text("hello")])),
    ];
    for state in STATES {
        for metadata in [
            None,
            Some(HashMap::new()),
            Some(HashMap::from([("sagaId".into(), json!("sg_1"))])),
        ] {
            events.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: "t-1".into(),
                context_id: "ctx-1".into(),
                status: status(state.clone()),
                metadata,
            }));
        }
    }
    for append in [None, Some(false), Some(true)] {
        for last_chunk in [None, Some(false), Some(true)] {
            events.push(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: "t-1".into(),
                context_id: "ctx-1".into(),
                artifact: artifact(None),
                append,
                last_chunk,
                metadata: None,
            }));
        }
    }
    events.push(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
        task_id: "t-1".into(),
        context_id: "ctx-1".into(),
        artifact: artifact(Some(HashMap::new())),
        append: None,
        last_chunk: None,
        metadata: Some(HashMap::new()),
    }));
    events
}

/// What the SDK writes as a stream's event `data`.
fn sdk_writes_event(id: &JsonRpcId, event: &Result<StreamResponse, A2AError>) -> Value {
    let response = match event {
        Ok(event) => JsonRpcResponse::success(id.clone(), protojson_conv::to_value(event).unwrap()),
        Err(error) => JsonRpcResponse::error(id.clone(), error.to_jsonrpc_error()),
    };
    serde_json::to_value(response).unwrap()
}

#[test]
fn every_kind_of_stream_event_is_written_as_the_sdk_writes_it() {
    let data = json!({"amountMinor": 25000, "rate": 2.5, "steps": [{"s": 1}]});
    let id = JsonRpcId::String("req-7".into());
    let mut events: Vec<Result<StreamResponse, A2AError>> =
        stream_events(&data).into_iter().map(Ok).collect();
    events.push(Err(A2AError::internal("the stream broke")));
    for event in &events {
        let sdk = sdk_writes_event(&id, event);
        let ours: Value = serde_json::from_str(&stream::data(&id, event.clone())).unwrap();
        assert_eq!(
            comparable(&ours),
            comparable(&sdk),
            "\nours {ours}\nsdk  {sdk}"
        );
    }
}

/// The events of one SSE body: each `id` with its `data`, in order.
fn sse_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|frame| !frame.trim().is_empty())
        .map(|frame| {
            let field = |name: &str| {
                frame
                    .lines()
                    .find_map(|line| line.strip_prefix(name))
                    .unwrap_or_else(|| panic!("no {name} in {frame:?}"))
                    .trim_start()
                    .to_owned()
            };
            (field("id:"), serde_json::from_str(&field("data:")).unwrap())
        })
        .collect()
}

async fn body_of(response: Response) -> (HeaderMap, String) {
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (headers, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn a_stream_is_framed_as_the_sdk_frames_it() {
    let data = json!({"amountMinor": 25000, "rate": 2.5});
    let id = JsonRpcId::Number(3);
    let mut events: Vec<Result<StreamResponse, A2AError>> =
        stream_events(&data).into_iter().map(Ok).collect();
    events.push(Err(A2AError::internal("the stream broke")));
    let sdk_events: Vec<Result<Value, A2AError>> = events
        .iter()
        .map(|event| {
            event
                .clone()
                .map(|event| protojson_conv::to_value(&event).unwrap())
        })
        .collect();
    let sdk =
        a2a_server::sse::sse_jsonrpc_stream(id.clone(), futures::stream::iter(sdk_events).boxed())
            .into_response();
    let ours = stream::write(id, futures::stream::iter(events).boxed());
    let (sdk_headers, sdk_body) = body_of(sdk).await;
    let (our_headers, our_body) = body_of(ours).await;
    assert_eq!(our_headers, sdk_headers);
    let (sdk_events, our_events) = (sse_events(&sdk_body), sse_events(&our_body));
    assert_eq!(our_events.len(), sdk_events.len());
    assert_eq!(our_events.len(), stream_events(&data).len() + 1);
    for ((our_id, ours), (sdk_id, sdk)) in our_events.iter().zip(&sdk_events) {
        assert_eq!(our_id, sdk_id);
        assert_eq!(
            comparable(ours),
            comparable(sdk),
            "\nours {ours}\nsdk  {sdk}"
        );
    }
}
