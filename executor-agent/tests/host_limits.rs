//! The executor as it is served, against bodies built to cost it: a signed plan with a
//! duplicate member name, a data part of 480,000 zeros, and an admin body beyond the one
//! body limit. Each is refused before anything runs.

mod common;

use agent_host::mint_jwt;
use common::read;
use common::served::*;
use serde_json::{Value, json};

fn jwt(served: &Served) -> String {
    mint_jwt(&served.planner, "planner-1", "executor", 60).unwrap()
}

/// A JSON-RPC request written out by hand (so that it can say what serde would not).
async fn post_rpc(served: &Served, bearer: Option<String>, body: String) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}/", served.url))
        .header("A2A-Version", "1.0")
        .header("Content-Type", "application/json")
        .body(body);
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn send_message(id: &str, data: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":"{id}","method":"SendMessage","params":{{"message":{{"messageId":"m-{id}","role":"ROLE_USER","parts":[{{"data":{data}}}]}}}}}}"#
    )
}

async fn task_total(served: &Served) -> i64 {
    let body = json!({"jsonrpc": "2.0", "id": "list", "method": "ListTasks", "params": {}});
    let (_, answer) = post_rpc(served, Some(jwt(served)), body.to_string()).await;
    let result = answer
        .get("result")
        .unwrap_or_else(|| panic!("ListTasks: {answer}"));
    result.get("totalSize").and_then(Value::as_i64).unwrap_or(0)
}

fn shown(body: &Value) -> String {
    body.to_string().chars().take(600).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_plan_with_a_duplicate_member_runs_nothing() {
    let served = serve().await;
    let mut plan = read("examples/plans/supplier-onboarding.json");
    common::sign_plan(&served.planner, &mut plan);
    let text = serde_json::to_string(&plan).unwrap();
    // The signed amount comes last, so a reader where the last member wins sees exactly
    // what was signed: the signature verifies, and only the duplicate is wrong.
    let signed = r#""amountMinor":12000"#;
    assert!(text.contains(signed), "{text}");
    let forged = text.replacen(signed, r#""amountMinor":1,"amountMinor":12000"#, 1);

    let (status, body) =
        post_rpc(&served, Some(jwt(&served)), send_message("dup-1", &forged)).await;
    assert_eq!(status, 200, "{}", shown(&body));
    assert_eq!(body["id"], "dup-1", "{}", shown(&body));
    assert_eq!(body["error"]["code"], -32602, "{}", shown(&body));
    assert_eq!(
        body["error"]["data"][0]["reason"],
        "SCHEMA_INVALID",
        "{}",
        shown(&body)
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"amountMinor\"") && message.contains("/params/message/parts/0/data/"),
        "{message}"
    );
    assert_eq!(calls_seen(&served), 0, "no tool was called");
    assert_eq!(task_total(&served).await, 0, "no task was created");

    // The same plan without the duplicate runs.
    let (_, body) = post_rpc(&served, Some(jwt(&served)), send_message("ok-1", &text)).await;
    assert_eq!(
        body["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{}",
        shown(&body)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_part_of_480000_zeros_is_refused_before_the_sdk_builds_it() {
    let served = serve().await;
    let zeros = format!("[{}0]", "0,".repeat(479_999));
    let body = send_message("zeros-1", &zeros);
    assert!(body.len() < 1024 * 1024, "under the body limit");

    let (status, _) = post_rpc(&served, None, body.clone()).await;
    assert_eq!(status, 401, "no credential, nothing read");
    let (status, answer) = post_rpc(&served, Some(jwt(&served)), body).await;
    assert_eq!(status, 200, "{}", shown(&answer));
    assert_eq!(answer["id"], "zeros-1");
    assert_eq!(answer["error"]["code"], -32602, "{}", shown(&answer));
    assert_eq!(
        answer["error"]["data"][0]["reason"],
        "REQUEST_LIMIT_EXCEEDED"
    );
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("maxValues"),
        "{}",
        shown(&answer)
    );
    assert_eq!(calls_seen(&served), 0);
    assert_eq!(task_total(&served).await, 0, "no task was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_has_the_same_body_limit_as_a2a() {
    let served = serve().await;
    let mut card = read("examples/plans/supplier-onboarding.json");
    card["padding"] = json!("x".repeat(1536 * 1024));
    assert_eq!(
        declared_length_status(&served, "/admin/cards", 1536 * 1024).await,
        413
    );
    // Sent without a length up front, the body is cut off at the same limit.
    assert_eq!(
        chunked_status(&served, "/admin/cards", 24, 64 * 1024).await,
        413
    );
    let response = reqwest::Client::new()
        .post(format!("{}/", served.url))
        .bearer_auth(jwt(&served))
        .header("A2A-Version", "1.0")
        .json(&card)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413, "A2A: the same limit");
    assert_eq!(calls_seen(&served), 0);
}
