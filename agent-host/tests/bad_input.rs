//! Bad input over real HTTP: every case gets the right error, and none creates a task.

mod common;

use std::sync::Arc;

use agent_host::{InboundAuth, JwtPolicy, mint_jwt};
use common::*;
use serde_json::{Value, json};
use shared_types::SigningIdentity;

async fn raw(url: &str, body: &'static str, version: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/"))
        .header("content-type", "application/json")
        .body(body);
    if let Some(v) = version {
        request = request.header("A2A-Version", v);
    }
    let response = request.send().await.unwrap();
    (
        response.status().as_u16(),
        response.json().await.unwrap_or(Value::Null),
    )
}

fn error_code(body: &Value) -> i64 {
    body.pointer("/error/code")
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("no error in {body}"))
}

#[tokio::test]
async fn protocol_errors_have_the_right_codes_and_create_nothing() {
    let agent = start(InboundAuth::Open).await;
    let url = agent.url.as_str();

    let (_, body) = raw(url, "{not json", Some("1.0")).await;
    assert_eq!(error_code(&body), -32700);

    let (_, body) = raw(
        url,
        r#"{"jsonrpc":"2.0","id":1,"method":"DoesNotExist","params":{}}"#,
        Some("1.0"),
    )
    .await;
    assert_eq!(error_code(&body), -32601);

    let (_, body) = raw(
        url,
        r#"{"jsonrpc":"2.0","id":3,"method":"SendMessage","params":{}}"#,
        Some("1.0"),
    )
    .await;
    assert_eq!(error_code(&body), -32602);
    assert!(
        body.pointer("/error/message")
            .unwrap()
            .as_str()
            .unwrap()
            .contains("message"),
        "{body}"
    );
    assert_eq!(
        body.pointer("/error/data/0/@type"),
        Some(&json!("type.googleapis.com/google.rpc.ErrorInfo"))
    );

    let empty_parts = r#"{"jsonrpc":"2.0","id":4,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m","parts":[]}}}"#;
    let (_, body) = raw(url, empty_parts, Some("1.0")).await;
    assert_eq!(error_code(&body), -32602);
    assert!(body.to_string().contains("parts"), "{body}");

    let (_, body) = raw(
        url,
        r#"{"jsonrpc":"2.0","id":5,"method":"GetTask","params":{}}"#,
        None,
    )
    .await;
    assert_eq!(error_code(&body), -32009);
    assert_eq!(body["id"], 5, "the error echoes the request id");
    assert!(
        body.to_string().contains("A2A-Version: 1.0"),
        "tells the caller what to send: {body}"
    );
    let (_, body) = raw(
        url,
        r#"{"jsonrpc":"2.0","id":6,"method":"GetTask","params":{}}"#,
        Some("0.3"),
    )
    .await;
    assert_eq!(error_code(&body), -32009);

    let rest = reqwest::Client::new()
        .post(format!("{url}/message:send"))
        .header("A2A-Version", "99.0")
        .json(&user_message("complete"))
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status().as_u16(), 400);
    let body: Value = rest.json().await.unwrap();
    assert_eq!(
        body.pointer("/error/details/0/reason"),
        Some(&json!("VERSION_NOT_SUPPORTED"))
    );

    let big = "x".repeat(2 * 1024 * 1024);
    let oversize = reqwest::Client::new()
        .post(format!("{url}/"))
        .header("A2A-Version", "1.0")
        .header("content-type", "application/json")
        .body(format!(r#"{{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{{"message":{{"role":"ROLE_USER","messageId":"m","parts":[{{"text":"{big}"}}]}}}}}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(oversize.status().as_u16(), 413);

    assert_eq!(
        task_count(url, None).await,
        0,
        "no bad request created a task"
    );
    let (_, body) = rpc(url, "SendMessage", user_message("complete"), None).await;
    assert_eq!(
        body.pointer("/result/task/status/state"),
        Some(&json!("TASK_STATE_COMPLETED")),
        "{body}"
    );
    assert_eq!(task_count(url, None).await, 1);
    agent.shutdown.cancel();
    agent.server.await.unwrap().unwrap();
}

#[tokio::test]
async fn jwt_authentication() {
    let planner = SigningIdentity::from_seed([1; 32], Some("planner".into()));
    let stranger = SigningIdentity::from_seed([2; 32], Some("stranger".into()));
    let policy = JwtPolicy::new(
        "executor",
        &[("planner@local".to_owned(), planner.public_jwk())],
    )
    .unwrap();
    let agent = start(InboundAuth::Jwt(Arc::new(policy))).await;
    let url = agent.url.as_str();
    let good = || mint_jwt(&planner, "planner@local", "executor", 60).unwrap();

    // The card needs no credentials.
    let card = reqwest::get(format!("{url}/.well-known/agent-card.json"))
        .await
        .unwrap();
    assert_eq!(card.status().as_u16(), 200);

    let cases: Vec<(&str, Option<String>, &str)> = vec![
        ("missing", None, "requires Authorization"),
        ("garbage", Some("not-a-jwt".into()), "not a JWT"),
        (
            "wrong audience",
            Some(mint_jwt(&planner, "planner@local", "someone-else", 60).unwrap()),
            "refused",
        ),
        (
            "untrusted issuer",
            Some(mint_jwt(&stranger, "stranger", "executor", 60).unwrap()),
            "not signed by an issuer this agent trusts",
        ),
        (
            "forged key",
            Some(mint_jwt(&stranger, "planner@local", "executor", 60).unwrap()),
            "not signed by an issuer this agent trusts",
        ),
        (
            "expired",
            Some(mint_jwt(&planner, "planner@local", "executor", -120).unwrap()),
            "refused",
        ),
    ];
    for (name, token, reason) in cases {
        let (status, body) = rpc(
            url,
            "SendMessage",
            user_message("complete"),
            token.as_deref(),
        )
        .await;
        assert_eq!(status, 401, "{name}: {body}");
        let message = body
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(message.contains(reason), "{name}: {message}");
    }

    let token = good();
    let (status, body) = rpc(url, "SendMessage", user_message("complete"), Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = rpc(url, "GetTask", json!({"id": "x"}), Some(&token)).await;
    assert_eq!(status, 401, "a token is good once: {body}");
    assert!(body.to_string().contains("already used"));
    assert_eq!(
        task_count(url, Some(&good())).await,
        1,
        "only the authenticated request made a task"
    );
    agent.shutdown.cancel();
}

#[tokio::test]
async fn static_bearer_token() {
    let agent = start(InboundAuth::StaticBearer {
        name: "executor".into(),
        token: "s3cret".into(),
    })
    .await;
    let (status, _) = rpc(&agent.url, "ListTasks", json!({}), Some("wrong")).await;
    assert_eq!(status, 401);
    let (status, _) = rpc(&agent.url, "ListTasks", json!({}), Some("s3cret")).await;
    assert_eq!(status, 200);
    agent.shutdown.cancel();
}

/// `SendMessage` is read with serde only in the form every official client sends; any
/// other form still reaches the SDK's reading, which takes or refuses it as it always did.
#[tokio::test]
async fn a_send_in_a_form_official_clients_do_not_send_is_read_or_refused_by_the_sdk() {
    let agent = start(InboundAuth::Open).await;
    let url = agent.url.as_str();
    let mut message = user_message("complete");
    // The proto's own name for contextId: the SDK reads it, serde alone would not.
    message["message"]["context_id"] = json!("ctx-snake");
    let (_, body) = rpc(url, "SendMessage", message, None).await;
    assert_eq!(
        body.pointer("/result/task/contextId"),
        Some(&json!("ctx-snake")),
        "{body}"
    );

    // A part with two contents: serde alone would take the text; the SDK refuses it.
    let mut two_contents = user_message("complete");
    two_contents["message"]["parts"][0]["data"] = json!({"also": 1});
    let before = task_count(url, None).await;
    let (_, body) = rpc(url, "SendMessage", two_contents, None).await;
    assert_eq!(error_code(&body), -32602, "{body}");
    assert_eq!(
        task_count(url, None).await,
        before,
        "a refused send creates nothing"
    );

    // Forms the SDK takes: a member it does not know, a role by its number.
    let mut unknown = user_message("complete");
    unknown["message"]["colour"] = json!("red");
    let mut numbered_role = user_message("complete");
    numbered_role["message"]["role"] = json!(1);
    for params in [unknown, numbered_role] {
        let (_, body) = rpc(url, "SendMessage", params, None).await;
        assert_eq!(
            body.pointer("/result/task/status/state"),
            Some(&json!("TASK_STATE_COMPLETED")),
            "{body}"
        );
    }
}

/// A `SendStreamingMessage` with `A2A-Version: 1.0`.
async fn stream_raw(url: &str, params: Value) -> (u16, String, String) {
    stream_call(url, "SendStreamingMessage", params).await
}

/// A streaming method's call with `A2A-Version: 1.0`: the HTTP status, the content type
/// and the body.
async fn stream_call(url: &str, method: &str, params: Value) -> (u16, String, String) {
    let body = json!({"jsonrpc": "2.0", "id": "s-1", "method": method, "params": params});
    let response = reqwest::Client::new()
        .post(format!("{url}/"))
        .header("A2A-Version", "1.0")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, content_type, response.text().await.unwrap())
}

/// Each SSE event's `id` and the JSON-RPC envelope in its `data`.
fn sse_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|frame| frame.lines().any(|line| line.starts_with("data:")))
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

/// `SendStreamingMessage` is read and written here as `SendMessage` is: the wire's form
/// streams its events framed as the SDK frames them, any other form still reaches the
/// SDK, and what the SDK refuses is refused with a JSON answer that creates nothing.
#[tokio::test]
async fn a_stream_is_served_as_the_sdk_serves_it_and_refused_as_it_refuses() {
    let agent = start(InboundAuth::Open).await;
    let url = agent.url.as_str();

    let (status, content_type, body) = stream_raw(url, user_message("complete")).await;
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let events = sse_events(&body);
    let ids: Vec<&str> = events.iter().map(|(id, _)| id.as_str()).collect();
    let counted: Vec<String> = (1..=events.len()).map(|n| n.to_string()).collect();
    assert_eq!(ids, counted, "{body}");
    assert!(events.len() >= 2, "{body}");
    for (_, envelope) in &events {
        assert_eq!(envelope["jsonrpc"], "2.0");
        assert_eq!(envelope["id"], "s-1");
    }
    assert!(events[0].1.pointer("/result/task/id").is_some(), "{body}");
    let last = &events[events.len() - 1].1;
    assert_eq!(
        last.pointer("/result/statusUpdate/status/state"),
        Some(&json!("TASK_STATE_COMPLETED")),
        "{body}"
    );

    // The proto's own name for contextId: the SDK reads it, serde alone would not.
    let mut snake = user_message("complete");
    snake["message"]["context_id"] = json!("ctx-snake-stream");
    let (_, _, body) = stream_raw(url, snake).await;
    assert_eq!(
        sse_events(&body)[0].1.pointer("/result/task/contextId"),
        Some(&json!("ctx-snake-stream")),
        "{body}"
    );

    // A part with two contents: refused before any event, and nothing is created.
    let mut two_contents = user_message("complete");
    two_contents["message"]["parts"][0]["data"] = json!({"also": 1});
    let before = task_count(url, None).await;
    let (status, content_type, body) = stream_raw(url, two_contents).await;
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    let refusal: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error_code(&refusal), -32602, "{body}");
    assert_eq!(
        task_count(url, None).await,
        before,
        "a refused stream creates nothing"
    );
}

/// `SubscribeToTask`'s events are written here too: a subscription to a task that is not
/// there, or with parameters the SDK refuses, is refused with a JSON answer.
#[tokio::test]
async fn a_subscription_to_no_task_or_with_bad_parameters_is_refused() {
    let agent = start(InboundAuth::Open).await;
    let url = agent.url.as_str();
    for (params, code) in [
        (json!({"id": "no-such-task"}), -32001),
        (json!({"id": ["not", "a", "string"]}), -32602),
    ] {
        let (status, content_type, body) = stream_call(url, "SubscribeToTask", params).await;
        assert_eq!(status, 200);
        assert!(
            content_type.starts_with("application/json"),
            "{content_type}"
        );
        let refusal: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error_code(&refusal), code, "{body}");
    }
}
