//! The outbound client: our headers reach the agent, deadlines hold, cards verify.

mod common;

use std::time::Duration;

use agent_host::sdk::{SendMessageRequest, SendMessageResponse, StreamResponse, TaskState};
use agent_host::{AgentClient, Error, InboundAuth, OutboundCall};
use common::*;
use futures::StreamExt;
use serde_json::json;
use shared_types::{SigningIdentity, TrustStore};

fn request(text: &str) -> SendMessageRequest {
    agent_host::user_request(Some(text), None, None)
}

/// The token the agent `start_for_call` starts accepts, and `call` sends.
const TOKEN: &str = "s3cret";

/// An agent that accepts `call()`'s bearer token.
async fn start_for_call() -> Running {
    start(InboundAuth::StaticBearer {
        name: "executor".into(),
        token: TOKEN.into(),
    })
    .await
}

fn call() -> OutboundCall {
    OutboundCall {
        bearer: Some(TOKEN.into()),
        idempotency_key: Some("sg_1:s0".into()),
        traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
        baggage: vec![
            ("sagaplane.saga".into(), "sg_1".into()),
            ("sagaplane.caused-by".into(), "s0 failed".into()),
        ],
        extensions: vec!["urn:sagaplane:ext:reversibility:v1".into()],
        timeout: Duration::from_secs(10),
    }
}

#[tokio::test]
async fn headers_reach_the_agent() {
    let agent = start_for_call().await;
    let client = AgentClient::new(&agent.url).unwrap();
    let SendMessageResponse::Task(task) = client.send(&call(), &request("headers")).await.unwrap()
    else {
        panic!("expected a task");
    };
    assert_eq!(task.status.state, TaskState::Completed);
    let seen = match &task.artifacts.unwrap()[0].parts[0].content {
        agent_host::sdk::PartContent::Data(value) => value.clone(),
        other => panic!("expected a data part, got {other:?}"),
    };
    assert_eq!(
        seen,
        json!({
            "caller": "executor",
            "idempotencyKey": "sg_1:s0",
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "baggage": "sagaplane.saga=sg_1,sagaplane.caused-by=s0%20failed",
            "extensions": "urn:sagaplane:ext:reversibility:v1",
        })
    );

    // Get, cancel and stream through the same client.
    let got = client.get_task(&call(), &task.id).await.unwrap();
    assert_eq!(got.id, task.id);
    let SendMessageResponse::Task(paused) = client.send(&call(), &request("pause")).await.unwrap()
    else {
        panic!("expected a task");
    };
    assert_eq!(paused.status.state, TaskState::InputRequired);
    assert_eq!(
        client
            .cancel_task(&call(), &paused.id)
            .await
            .unwrap()
            .status
            .state,
        TaskState::Canceled
    );
    let events: Vec<_> = client
        .stream(&call(), &request("complete"))
        .await
        .unwrap()
        .collect()
        .await;
    assert!(
        matches!(events.first(), Some(Ok(StreamResponse::Task(_)))),
        "{events:?}"
    );
    assert!(
        matches!(events.last(), Some(Ok(StreamResponse::StatusUpdate(u))) if u.status.state == TaskState::Completed),
        "{events:?}"
    );

    // A wrong credential is an error from the agent, not a task.
    let wrong = OutboundCall {
        bearer: Some("nope".into()),
        ..call()
    };
    assert!(client.send(&wrong, &request("complete")).await.is_err());
    agent.shutdown.cancel();
}

#[tokio::test]
async fn a_call_without_an_answer_hits_its_deadline() {
    let agent = start(InboundAuth::Open).await;
    let client = AgentClient::new(&agent.url).unwrap();
    let quick = OutboundCall {
        timeout: Duration::from_millis(200),
        ..OutboundCall::default()
    };
    match client.send(&quick, &request("hang")).await {
        Err(Error::Transport(message)) => {
            assert!(message.contains("no answer within 200 ms"), "{message}")
        }
        other => panic!("expected a deadline error, got {other:?}"),
    }
    // Nothing listens here any more: a transport error, not a hang.
    agent.shutdown.cancel();
    let gone = AgentClient::new("http://127.0.0.1:9").unwrap();
    assert!(
        gone.send(&OutboundCall::default(), &request("complete"))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn cards_are_served_signed_and_verified() {
    let platform = SigningIdentity::from_seed([5; 32], Some("platform".into()));
    let agent = start_signed(InboundAuth::Open, Some(&platform)).await;
    let client = AgentClient::new(&agent.url).unwrap();
    let mut trust = TrustStore::new();
    trust.add_jwk(&platform.public_jwk()).unwrap();
    let (card, kid) = client.fetch_verified_card(&trust).await.unwrap();
    assert_eq!(kid, "platform");
    assert_eq!(card["supportedInterfaces"][0]["url"], agent.url.as_str());
    assert!(
        card.get("securitySchemes").is_none(),
        "an open agent declares no scheme"
    );

    let mut other = TrustStore::new();
    other
        .add_jwk(&SigningIdentity::from_seed([6; 32], None).public_jwk())
        .unwrap();
    let err = client
        .fetch_verified_card(&other)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not trusted"), "{err}");

    // Conditional requests: the ETag validates.
    let http = reqwest::Client::new();
    let first = http
        .get(format!("{}/.well-known/agent-card.json", agent.url))
        .send()
        .await
        .unwrap();
    let etag = first.headers()["etag"].clone();
    assert!(first.headers().contains_key("last-modified"));
    assert!(
        first.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("max-age")
    );
    let again = http
        .get(format!("{}/.well-known/agent-card.json", agent.url))
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 304);
    agent.shutdown.cancel();
}

#[tokio::test]
async fn shutdown_ends_open_streams_and_in_flight_requests() {
    let agent = start(InboundAuth::Open).await;
    let client = AgentClient::new(&agent.url).unwrap();
    let SendMessageResponse::Task(paused) = client
        .send(&OutboundCall::default(), &request("pause"))
        .await
        .unwrap()
    else {
        panic!("expected a task");
    };
    let mut subscription = client
        .subscribe(&OutboundCall::default(), &paused.id)
        .await
        .unwrap();
    assert!(matches!(
        subscription.next().await,
        Some(Ok(StreamResponse::Task(_)))
    ));
    let hanging = {
        let client = AgentClient::new(&agent.url).unwrap();
        tokio::spawn(async move {
            client
                .send(&OutboundCall::default(), &request("hang"))
                .await
        })
    };
    // Wait until the hanging request's task exists, so it is truly in flight.
    let store_has_two = async {
        loop {
            if task_count(&agent.url, None).await == 2 {
                break;
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), store_has_two)
        .await
        .expect("the hanging task appears");

    agent.shutdown.cancel();
    // The server stops: streams end instead of holding the graceful shutdown open.
    tokio::time::timeout(Duration::from_secs(10), agent.server)
        .await
        .expect("server stops")
        .unwrap()
        .unwrap();
    assert!(
        subscription.next().await.is_none(),
        "the subscription ended"
    );
    let answered = hanging.await.unwrap().unwrap();
    let SendMessageResponse::Task(task) = answered else {
        panic!("expected a task")
    };
    assert_eq!(
        task.status.state,
        TaskState::Submitted,
        "answered with the task as it stood"
    );
}

/// What `accept` took of a message that opens a task (`Accepted`) is not handed to `run`
/// again: its parts move to the task's history, and `run` gets the message without them;
/// a message `accept` kept nothing of reaches `run` whole.
#[tokio::test]
async fn a_message_accept_took_reaches_run_without_its_parts_and_the_task_keeps_them() {
    let agent = start_for_call().await;
    let client = AgentClient::new(&agent.url).unwrap();
    let send = |text: &'static str| {
        let client = &client;
        async move {
            match client.send(&call(), &request(text)).await.unwrap() {
                SendMessageResponse::Task(task) => task,
                other => panic!("expected a task, got {other:?}"),
            }
        }
    };
    let reply = |task: &agent_host::sdk::Task| {
        task.status
            .message
            .as_ref()
            .and_then(|m| m.parts.iter().find_map(|p| p.as_text()))
            .unwrap_or_default()
            .to_owned()
    };
    let first_text = |task: &agent_host::sdk::Task| {
        task.history.as_ref().unwrap()[0]
            .parts
            .iter()
            .find_map(|p| p.as_text())
            .map(str::to_owned)
    };

    let taken = send(common::TAKEN_AT_ACCEPT).await;
    assert_eq!(taken.status.state, TaskState::Completed);
    assert_eq!(reply(&taken), "taken at accept; parts in run: 0");
    assert_eq!(first_text(&taken).as_deref(), Some(common::TAKEN_AT_ACCEPT));
    let read = client.get_task(&call(), &taken.id).await.unwrap();
    assert_eq!(
        first_text(&read).as_deref(),
        Some(common::TAKEN_AT_ACCEPT),
        "stored whole"
    );

    let whole = send("complete").await;
    assert_eq!(reply(&whole), "echo: complete");
    assert_eq!(first_text(&whole).as_deref(), Some("complete"));
}
