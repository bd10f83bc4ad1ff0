//! A stream's events read here against the SDK's reading of the same bytes: each kind of
//! event an SDK server writes, split anywhere, framed every way SSE allows, refused, cut.

use std::collections::HashMap;
use std::convert::Infallible;

use serde_json::{Value, json};

use super::*;
use crate::sdk::numbers_as_doubles;
use crate::sdk::{
    Artifact, Message, Part, Role, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent,
};

fn message(text: &str) -> Message {
    Message {
        message_id: "m-1".into(),
        context_id: Some("ctx-1".into()),
        task_id: Some("t-1".into()),
        role: Role::Agent,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

fn status(state: TaskState) -> TaskStatus {
    TaskStatus {
        state,
        message: Some(message("s1: done \u{1F600} \"q\"")),
        timestamp: Some(
            chrono::DateTime::parse_from_rfc3339("2026-11-30T07:00:00.125Z")
                .unwrap()
                .into(),
        ),
    }
}

/// One event of each kind, as a saga's stream carries them.
fn events_sent() -> Vec<StreamResponse> {
    let ledger = json!({"phase": "running", "steps": [{"amountMinor": 25000, "rate": 2.5}]});
    let artifact = Artifact {
        artifact_id: "saga-ledger".into(),
        name: Some("saga-ledger".into()),
        description: None,
        parts: vec![Part::data(ledger.clone())],
        metadata: None,
        extensions: None,
    };
    vec![
        StreamResponse::Task(Task {
            id: "t-1".into(),
            context_id: "ctx-1".into(),
            status: status(TaskState::Working),
            artifacts: Some(vec![artifact.clone()]),
            history: Some(vec![message("the plan")]),
            metadata: Some(HashMap::from([("sagaId".into(), json!("sg_1"))])),
        }),
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t-1".into(),
            context_id: "ctx-1".into(),
            status: status(TaskState::InputRequired),
            metadata: Some(HashMap::from([("k".into(), json!({"n": 3}))])),
        }),
        StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: "t-1".into(),
            context_id: "ctx-1".into(),
            artifact,
            append: None,
            last_chunk: Some(true),
            metadata: None,
        }),
        StreamResponse::Message(message("a direct answer")),
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t-1".into(),
            context_id: "ctx-1".into(),
            status: status(TaskState::Completed),
            metadata: None,
        }),
    ]
}

/// An event's `data` as the SDK's server writes it.
fn sdk_data(event: &StreamResponse) -> String {
    let result = protojson_conv::to_value(event).unwrap();
    serde_json::to_string(&JsonRpcResponse::success(a2a::JsonRpcId::Number(1), result)).unwrap()
}

/// The body an SDK server streams for `events`, with `separator` after each.
fn sdk_body(events: &[StreamResponse], separator: &str) -> String {
    events
        .iter()
        .enumerate()
        .map(|(n, event)| format!("id: {}\ndata: {}{separator}", n + 1, sdk_data(event)))
        .collect::<Vec<_>>()
        .join(": keep-alive\n\n")
}

fn read_all(chunks: Vec<Vec<u8>>) -> Vec<Result<StreamResponse, A2AError>> {
    let frames = stream::iter(
        chunks
            .into_iter()
            .map(|chunk| Ok::<_, Infallible>(Bytes::from(chunk))),
    );
    futures::executor::block_on(events(frames).collect())
}

/// An event as the SDK's client reads it, as JSON with numbers as doubles.
fn comparable(event: &StreamResponse) -> Value {
    numbers_as_doubles(&serde_json::to_value(event).unwrap())
}

fn sdk_reads(event: &StreamResponse) -> Value {
    let read: StreamResponse =
        protojson_conv::from_value(protojson_conv::to_value(event).unwrap()).unwrap();
    comparable(&read)
}

fn assert_read_as_the_sdk_reads(read: &[Result<StreamResponse, A2AError>]) {
    let sent = events_sent();
    assert_eq!(read.len(), sent.len(), "{read:?}");
    for (read, sent) in read.iter().zip(&sent) {
        let read = read.as_ref().unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(comparable(read), sdk_reads(sent));
    }
}

#[test]
fn each_kind_of_event_is_read_as_the_sdk_reads_it_however_the_bytes_are_split() {
    let body = sdk_body(&events_sent(), "\n\n");
    assert_read_as_the_sdk_reads(&read_all(vec![body.clone().into_bytes()]));
    // One byte at a time: a boundary, a data line and a UTF-8 character split anywhere.
    let bytes: Vec<Vec<u8>> = body.bytes().map(|b| vec![b]).collect();
    assert_read_as_the_sdk_reads(&read_all(bytes));
}

#[test]
fn every_separator_sse_allows_ends_an_event() {
    for separator in ["\r\n\r\n", "\r\r", "\n\n"] {
        let body = sdk_body(&events_sent(), separator).replace(": keep-alive\n\n", "");
        assert_read_as_the_sdk_reads(&read_all(vec![body.into_bytes()]));
    }
}

#[test]
fn an_event_over_several_data_lines_is_joined_and_a_last_one_unterminated_is_read() {
    let sent = events_sent();
    let data = sdk_data(&sent[0]);
    let (head, rest) = data.split_at(data.find(',').unwrap() + 1);
    let mut body = format!("data: {head}\ndata:{rest}\n\n");
    for event in &sent[1..] {
        body.push_str(&format!("data: {}\n\n", sdk_data(event)));
    }
    // The last event's blank line never comes.
    let body = body.trim_end().to_owned();
    assert_read_as_the_sdk_reads(&read_all(vec![body.into_bytes()]));
}

#[test]
fn a_json_rpc_error_is_an_err_item_and_comments_are_skipped() {
    let error = serde_json::to_string(&JsonRpcResponse::error(
        a2a::JsonRpcId::Number(1),
        A2AError::task_not_found("t-9").to_jsonrpc_error(),
    ))
    .unwrap();
    let body = format!(
        ": hello\n\ndata: {}\n\ndata: {error}\n\n  \n",
        sdk_data(&events_sent()[0])
    );
    let read = read_all(vec![body.into_bytes()]);
    assert_eq!(read.len(), 2, "{read:?}");
    assert!(read[0].is_ok());
    let refused = read[1].as_ref().unwrap_err();
    assert_eq!(refused.code, crate::sdk::error_code::TASK_NOT_FOUND);
}

#[test]
fn a_stream_cut_in_an_event_or_its_body_failing_ends_with_an_err_item() {
    let data = sdk_data(&events_sent()[0]);
    for cut in [
        format!("data: {}\n\ndata: {}", data, &data[..data.len() / 2]),
        format!("data: {data}\n\n{{\"jsonrpc\":\"2.0\",\"res"),
    ] {
        let read = read_all(vec![cut.into_bytes()]);
        assert_eq!(read.len(), 2, "{read:?}");
        assert!(read[0].is_ok());
        assert_eq!(
            read[1].as_ref().unwrap_err().code,
            crate::sdk::error_code::INTERNAL_ERROR
        );
    }
    let failing = stream::iter(vec![
        Ok(Bytes::from(format!("data: {data}\n\n"))),
        Err("connection reset"),
    ]);
    let read: Vec<_> = futures::executor::block_on(events(failing).collect());
    assert_eq!(read.len(), 2, "{read:?}");
    assert!(
        read[1]
            .as_ref()
            .unwrap_err()
            .message
            .contains("connection reset")
    );
}

#[test]
fn an_event_that_never_ends_is_refused_past_the_bound() {
    let chunk = vec![b'x'; 1024 * 1024];
    let chunks: Vec<Vec<u8>> = (0..=MAX_ANSWER_BYTES / chunk.len())
        .map(|_| chunk.clone())
        .collect();
    let read = read_all(chunks);
    assert_eq!(read.len(), 1, "one refusal, then the end");
    assert!(read[0].as_ref().unwrap_err().message.contains("grew past"));
}

#[test]
fn a_json_answer_instead_of_a_stream_is_a_refusal_or_a_transport_failure() {
    let refusal = serde_json::to_vec(&JsonRpcResponse::error(
        a2a::JsonRpcId::Number(1),
        A2AError::invalid_params("no plan").to_jsonrpc_error(),
    ))
    .unwrap();
    match not_a_stream(StatusCode::OK, &refusal) {
        Error::Protocol(e) => assert_eq!(e.code, crate::sdk::error_code::INVALID_PARAMS),
        other => panic!("{other:?}"),
    }
    let result = br#"{"jsonrpc":"2.0","id":1,"result":{"task":{}}}"#;
    assert!(matches!(
        not_a_stream(StatusCode::OK, result),
        Error::Protocol(e) if e.code == crate::sdk::error_code::INTERNAL_ERROR
    ));
    assert!(matches!(
        not_a_stream(StatusCode::BAD_GATEWAY, b"<html>bad gateway</html>"),
        Error::Transport(_)
    ));
}
