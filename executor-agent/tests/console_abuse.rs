//! The console attacked over HTTP, against an executor as `main` serves it: one
//! credential cannot fill the sessions and lock the approvers out, one session cannot
//! hold every live view, wrong tokens from one address are throttled and logged, and an
//! answer the pause does not offer is refused before anything is recorded.

mod common;

use common::served::*;
use serde_json::{Value, json};

const CONSOLE_API: &str = "/console/api";

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

/// `POST api/session` with `bearer`: the status, the `Retry-After` header and the body.
async fn log_in(served: &Served, bearer: &str) -> (u16, Option<String>, Value) {
    let response = http()
        .post(format!("{}{CONSOLE_API}/session", served.url))
        .bearer_auth(bearer)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (
        status,
        retry_after,
        response.json().await.unwrap_or(Value::Null),
    )
}

async fn session(served: &Served, bearer: &str) -> String {
    let (status, _, body) = log_in(served, bearer).await;
    assert_eq!(status, 201, "{body}");
    body["session"].as_str().unwrap().to_owned()
}

async fn status_of(served: &Served, session: &str, path: &str) -> u16 {
    http()
        .get(format!("{}{CONSOLE_API}{path}", served.url))
        .bearer_auth(session)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn approver_token(served: &Served) -> String {
    agent_host::mint_jwt(&served.approver, "approver-1", "executor", 60).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_credential_logging_in_again_and_again_never_locks_an_approver_out() {
    let served = serve().await;
    let first = session(&served, ADMIN_TOKEN).await;
    // More logins than the console holds sessions in all (1,024): each is answered 201,
    // and each past the credential's cap ends its oldest session.
    for _ in 0..executor_agent::console::session::MAX_SESSIONS + 20 {
        let (status, _, body) = log_in(&served, ADMIN_TOKEN).await;
        assert_eq!(status, 201, "{body}");
    }
    assert_eq!(
        status_of(&served, &first, "/overview").await,
        401,
        "the credential's oldest session was ended"
    );
    let approver = session(&served, &approver_token(&served)).await;
    assert_eq!(status_of(&served, &approver, "/overview").await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_cannot_hold_every_live_view() {
    let served = serve().await;
    paused_for_approval(&served, "sg_views").await;
    let greedy = session(&served, ADMIN_TOKEN).await;
    let open = |session: String| {
        let url = format!("{}{CONSOLE_API}/sagas/sg_views/events", served.url);
        async move { http().get(url).bearer_auth(session).send().await.unwrap() }
    };
    let mut held = Vec::new();
    // Held open for the test's length.
    for _ in 0..executor_agent::console::MAX_STREAMS_PER_SESSION {
        let view = open(greedy.clone()).await;
        assert_eq!(view.status(), 200);
        held.push(view);
    }
    let refused = open(greedy.clone()).await;
    assert_eq!(
        refused.status(),
        429,
        "past the session's share of live views"
    );
    // Another person's session still gets its view.
    let approver = session(&served, &approver_token(&served)).await;
    assert_eq!(open(approver).await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_from_one_address_are_throttled_and_logged() {
    let captured = common::logs::capture();
    let served = serve().await;
    let limit = executor_agent::console::session::MAX_FAILED_LOGINS;
    for n in 0..limit {
        let (status, _, body) = log_in(&served, &format!("wrong-token-{n}")).await;
        assert_eq!(status, 401, "{body}");
    }
    // Past the limit, even the right token waits: 429 with Retry-After.
    for token in ["wrong-token-again".to_owned(), ADMIN_TOKEN.to_owned()] {
        let (status, retry_after, body) = log_in(&served, &token).await;
        assert_eq!(status, 429, "{body}");
        let secs: u64 = retry_after.expect("Retry-After").parse().unwrap();
        assert!((1..=60).contains(&secs), "{secs}");
    }
    let log = captured.text();
    let warnings = log
        .lines()
        .filter(|l| l.contains("failed console logins from one address"))
        .count();
    assert_eq!(warnings, 1, "one warning per burst:\n{log}");
    assert!(
        !log.contains("wrong-token-"),
        "a sent token reached the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_the_pause_does_not_offer_is_refused_from_the_console_before_it_is_recorded() {
    let served = serve().await;
    let task = paused_for_approval(&served, "sg_console_offer").await;
    let history = task.history.as_ref().map_or(0, Vec::len);
    let approver = session(&served, &approver_token(&served)).await;
    for resolution in ["retry", "resolved-manually"] {
        let response = http()
            .post(format!(
                "{}{CONSOLE_API}/sagas/sg_console_offer/answer",
                served.url
            ))
            .bearer_auth(&approver)
            .json(&json!({"resolution": resolution}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 422, "{resolution}");
        let body: Value = response.json().await.unwrap();
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("RESOLUTION_INVALID"),
            "{body}"
        );
    }
    let now = agent_host::AgentClient::new(&served.url)
        .unwrap()
        .get_task(
            &agent_host::OutboundCall {
                bearer: approver_jwt(&served),
                ..agent_host::OutboundCall::default()
            },
            &task.id,
        )
        .await
        .unwrap();
    assert_eq!(
        now.history.as_ref().map_or(0, Vec::len),
        history,
        "nothing recorded"
    );
    assert_eq!(now.status.state, agent_host::sdk::TaskState::InputRequired);
}
