//! Parts of media types the agent's card does not take are refused with A2A's
//! ContentTypeNotSupportedError (-32005 on JSON-RPC, HTTP 415 on HTTP+JSON) before any
//! task exists or changes; what the card takes still goes through.

mod common;

use agent_host::InboundAuth;
use common::*;
use serde_json::{Value, json};

fn message(parts: Value) -> Value {
    json!({"message": {"role": "ROLE_USER",
        "messageId": agent_host::sdk::new_message_id(), "parts": parts}})
}

fn unsupported() -> Value {
    json!([{"raw": "dGNr", "mediaType": "application/x-unsupported"}])
}

async fn rest(url: &str, path: &str, body: &Value) -> (u16, Option<String>, Value) {
    let response = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .header("A2A-Version", "1.0")
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned());
    (
        status,
        content_type,
        response.json().await.unwrap_or(Value::Null),
    )
}

fn reason(error: &Value, details: &str) -> Option<String> {
    error
        .get(details)?
        .as_array()?
        .iter()
        .find_map(|d| d.get("reason")?.as_str().map(str::to_owned))
}

#[tokio::test]
async fn an_unsupported_media_type_is_content_type_not_supported_on_both_bindings() {
    let agent = start(InboundAuth::Open).await;
    let url = agent.url.as_str();

    for method in ["SendMessage", "SendStreamingMessage"] {
        let (status, body) = rpc(url, method, message(unsupported()), None).await;
        assert_eq!(status, 200, "{method}: {body}");
        assert_eq!(body["error"]["code"], -32005, "{method}: {body}");
        assert_eq!(
            reason(&body["error"], "data").as_deref(),
            Some("CONTENT_TYPE_NOT_SUPPORTED")
        );
        let said = body["error"]["message"].as_str().unwrap();
        assert!(said.contains("application/x-unsupported"), "{said}");
        assert!(said.contains("text/plain"), "says what it takes: {said}");
    }

    for path in ["/message:send", "/message:stream"] {
        let (status, content_type, body) = rest(url, path, &message(unsupported())).await;
        assert_eq!(status, 415, "{path}: {body}");
        assert_eq!(content_type.as_deref(), Some("application/json"));
        assert_eq!(body["error"]["code"], 415, "{body}");
        assert_eq!(
            reason(&body["error"], "details").as_deref(),
            Some("CONTENT_TYPE_NOT_SUPPORTED")
        );
    }
    assert_eq!(task_count(url, None).await, 0, "no task was created");
    agent.shutdown.cancel();
}

#[tokio::test]
async fn every_part_must_be_taken_and_unnamed_parts_are_read_by_kind() {
    // The echo card takes text/plain only.
    let agent = start(InboundAuth::Open).await;
    let url = agent.url.as_str();
    let refused = [
        json!([{"data": {"amountMinor": 1}}]),
        json!([{"text": "hi"}, {"raw": "dGNr"}]),
        json!([{"url": "https://files.invalid/f"}]),
        json!([{"text": "# hi", "mediaType": "text/markdown"}]),
    ];
    for parts in refused {
        let (_, body) = rpc(url, "SendMessage", message(parts.clone()), None).await;
        assert_eq!(body["error"]["code"], -32005, "{parts}: {body}");
    }
    assert_eq!(task_count(url, None).await, 0);

    let taken = [
        json!([{"text": "complete"}]),
        json!([{"text": "complete", "mediaType": "Text/Plain; charset=utf-8"}]),
        json!([{"text": "complete", "mediaType": ""}]),
    ];
    for parts in taken {
        let (_, body) = rpc(url, "SendMessage", message(parts.clone()), None).await;
        assert_eq!(
            body.pointer("/result/task/status/state"),
            Some(&json!("TASK_STATE_COMPLETED")),
            "{parts}: {body}"
        );
    }
    assert_eq!(task_count(url, None).await, 3);
    agent.shutdown.cancel();
}

#[tokio::test]
async fn a_follow_up_with_an_unsupported_part_leaves_the_task_as_it_was() {
    let agent = start(InboundAuth::Open).await;
    let url = agent.url.as_str();
    let (_, body) = rpc(url, "SendMessage", user_message("pause"), None).await;
    let task = &body["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{body}"
    );
    let id = task["id"].as_str().unwrap();

    let mut follow_up = message(unsupported());
    follow_up["message"]["taskId"] = json!(id);
    let (_, body) = rpc(url, "SendMessage", follow_up, None).await;
    assert_eq!(body["error"]["code"], -32005, "{body}");

    let (_, after) = rpc(url, "GetTask", json!({"id": id}), None).await;
    assert_eq!(
        after["result"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{after}"
    );
    assert_eq!(
        after["result"]["history"].as_array().map(Vec::len),
        task["history"].as_array().map(Vec::len),
        "nothing was added to the history"
    );
    agent.shutdown.cancel();
}

#[tokio::test]
async fn a_card_takes_what_its_defaults_and_skills_declare() {
    // Like the planner's card: text goals, data parameters, from defaults and a skill.
    let mut card = card();
    card["defaultInputModes"] = json!(["text/plain"]);
    card["skills"][0]["inputModes"] = json!(["application/json"]);
    let agent = start_card(InboundAuth::Open, card, None).await;
    let url = agent.url.as_str();
    let (_, body) = rpc(
        url,
        "SendMessage",
        message(json!([{"text": "complete"}, {"data": {"maxSpend": "10 EUR"}}])),
        None,
    )
    .await;
    assert_eq!(
        body.pointer("/result/task/status/state"),
        Some(&json!("TASK_STATE_COMPLETED")),
        "{body}"
    );
    let (_, body) = rpc(url, "SendMessage", message(unsupported()), None).await;
    assert_eq!(body["error"]["code"], -32005, "{body}");
    agent.shutdown.cancel();

    // A card that declares no modes takes any part (every Sagaplane agent declares its own).
    let mut card = common::card();
    card["defaultInputModes"] = json!([]);
    let agent = start_card(InboundAuth::Open, card, None).await;
    let (_, body) = rpc(&agent.url, "SendMessage", message(unsupported()), None).await;
    assert!(body.get("result").is_some(), "{body}");
    agent.shutdown.cancel();
}
