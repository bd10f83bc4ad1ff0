//! Our `SendMessage` encoding against the SDK's ProtoJSON conversion: the request we write
//! is the one the SDK's transport would write, and we read an answer the SDK's server
//! writes as the SDK's client reads it.

use std::collections::HashMap;

use a2a_pb::protojson_conv;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::sdk::numbers_as_doubles;
use crate::sdk::{Artifact, Part, Role, TaskState, TaskStatus};

fn request_with(data: Value, metadata: Value) -> SendMessageRequest {
    SendMessageRequest {
        message: Message {
            message_id: "m-1".into(),
            context_id: Some("ctx-1".into()),
            task_id: None,
            role: Role::User,
            parts: vec![Part::data(data), Part::text("hello \u{1F600} \"quoted\"")],
            metadata: Some(HashMap::from([("https://x.example/ext".into(), metadata)])),
            extensions: Some(vec!["https://x.example/ext".into()]),
            reference_task_ids: None,
        },
        configuration: None,
        metadata: None,
        tenant: None,
    }
}

fn our_params(request: &SendMessageRequest) -> Value {
    let body: Value = serde_json::from_slice(&encode(request).unwrap()).unwrap();
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["method"], "SendMessage");
    assert!(body["id"].is_u64());
    body["params"].clone()
}

#[test]
fn the_request_is_the_one_the_sdk_writes() {
    let request = request_with(
        json!({"skill": "vendor.create", "args": {"name": "Acme", "amount": 12.5, "count": 3,
               "tags": ["a", "b"], "nested": {"deep": [1, {"x": null}]}, "ok": true}}),
        json!({"sagaId": "sg_1", "stepId": "s0", "idempotencyKey": "k:s0", "causedBy": null,
               "compensation": false}),
    );
    let sdk = protojson_conv::to_value(&request).unwrap();
    assert_eq!(
        numbers_as_doubles(&our_params(&request)),
        numbers_as_doubles(&sdk)
    );
}

fn rich_task() -> Task {
    Task {
        id: "t-1".into(),
        context_id: "ctx-1".into(),
        status: TaskStatus {
            state: TaskState::Completed,
            message: Some(Message {
                message_id: "m-2".into(),
                context_id: Some("ctx-1".into()),
                task_id: Some("t-1".into()),
                role: Role::Agent,
                parts: vec![Part::text("done")],
                metadata: None,
                extensions: None,
                reference_task_ids: None,
            }),
            timestamp: Some(
                chrono::DateTime::parse_from_rfc3339("2026-11-30T07:00:00.123Z")
                    .unwrap()
                    .into(),
            ),
        },
        artifacts: Some(vec![Artifact {
            artifact_id: "a-1".into(),
            name: Some("result".into()),
            description: None,
            parts: vec![Part::data(
                json!({"vendorId": "v-9", "amount": 1250.0, "list": [1.5, "x"]}),
            )],
            metadata: Some(HashMap::from([("k".into(), json!({"v": 1.0}))])),
            extensions: None,
        }]),
        history: None,
        metadata: Some(HashMap::from([("trace".into(), json!("abc"))])),
    }
}

/// The bytes an SDK server writes for this answer.
fn sdk_answer(answer: &SendMessageResponse) -> Vec<u8> {
    let result = protojson_conv::to_value(answer).unwrap();
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 7, "result": result})).unwrap()
}

/// How the SDK's client reads those bytes.
fn sdk_reading(bytes: &[u8]) -> SendMessageResponse {
    let envelope: Value = serde_json::from_slice(bytes).unwrap();
    protojson_conv::from_value(envelope["result"].clone()).unwrap()
}

#[test]
fn a_task_answer_reads_as_the_sdk_reads_it() {
    let bytes = sdk_answer(&SendMessageResponse::Task(rich_task()));
    let ours = decode(StatusCode::OK, &bytes).unwrap();
    assert_eq!(ours, sdk_reading(&bytes));
    let SendMessageResponse::Task(task) = ours else {
        panic!("expected a task");
    };
    assert_eq!(task.status.state, TaskState::Completed);
}

#[test]
fn a_message_answer_reads_as_the_sdk_reads_it() {
    let message = request_with(json!({"result": {"id": 4.0}}), json!({})).message;
    let bytes = sdk_answer(&SendMessageResponse::Message(message));
    assert_eq!(decode(StatusCode::OK, &bytes).unwrap(), sdk_reading(&bytes));
}

fn error_body(error: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "error": error})).unwrap()
}

#[test]
fn an_a2a_reason_names_the_precise_code() {
    let body = error_body(json!({"code": -32603, "message": "no such task", "data": [{
        "@type": ERROR_INFO_TYPE, "reason": "TASK_NOT_FOUND", "domain": PROTOCOL_DOMAIN}]}));
    let Err(Error::Protocol(e)) = decode(StatusCode::OK, &body) else {
        panic!("expected a protocol error");
    };
    assert_eq!(e.code, error_code::TASK_NOT_FOUND);
    assert_eq!(e.message, "no such task");
}

#[test]
fn field_violations_make_invalid_params_and_are_named() {
    let body = error_body(json!({"code": -32603, "message": "bad request", "data": [{
        "@type": BAD_REQUEST_TYPE,
        "fieldViolations": [{"field": "message.parts", "description": "empty"}]}]}));
    let Err(Error::Protocol(e)) = decode(StatusCode::OK, &body) else {
        panic!("expected a protocol error");
    };
    assert_eq!(e.code, error_code::INVALID_PARAMS);
    assert_eq!(e.message, "bad request: message.parts: empty");
}

#[test]
fn a_plain_error_keeps_its_code() {
    let body = error_body(json!({"code": -32602, "message": "unknown skill"}));
    let Err(Error::Protocol(e)) = decode(StatusCode::OK, &body) else {
        panic!("expected a protocol error");
    };
    assert_eq!((e.code, e.message.as_str()), (-32602, "unknown skill"));
}

#[test]
fn an_answer_that_is_not_json_rpc_names_the_status() {
    let Err(Error::Transport(reason)) =
        decode(StatusCode::SERVICE_UNAVAILABLE, b"<html>busy</html>")
    else {
        panic!("expected a transport error");
    };
    assert!(reason.contains("503"), "{reason}");
}

#[test]
fn a_result_without_task_or_message_is_refused() {
    let body = br#"{"jsonrpc":"2.0","id":1,"result":{"other":1}}"#;
    let Err(Error::Protocol(e)) = decode(StatusCode::OK, body) else {
        panic!("expected a protocol error");
    };
    assert!(e.message.contains("neither"), "{}", e.message);
}

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-1.0e12..1.0e12f64).prop_map(|f| json!(f)),
        any::<i32>().prop_map(|i| json!(i)),
        ".{0,12}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Any data and metadata: our request equals the SDK's, number representation aside.
    #[test]
    fn any_request_matches_the_sdk(data in json_value(), metadata in json_value()) {
        let request = request_with(data, metadata);
        let sdk = protojson_conv::to_value(&request).unwrap();
        prop_assert_eq!(numbers_as_doubles(&our_params(&request)), numbers_as_doubles(&sdk));
    }

    /// Any bytes with any status: an answer or a clear error, never a panic.
    #[test]
    fn any_bytes_decode_or_fail_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..256),
                                        status in 100u16..600) {
        let status = StatusCode::from_u16(status).unwrap();
        let _ = decode(status, &bytes);
    }
}
