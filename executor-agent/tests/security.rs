//! The executor as it is served (`service::build`): its A2A endpoint takes only planner
//! JWTs for this executor, and a plan that is not exactly what a trusted planner signed
//! against the curated registry is refused before any tool is called.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agent_host::sdk::{SendMessageResponse, Task, TaskState};
use agent_host::{AgentClient, OutboundCall, mint_jwt};
use common::*;
use executor_agent::agent::DEFAULT_MAX_RUNNING_SAGAS;
use executor_agent::report::GATHER_PROGRESS;
use executor_agent::service::{Settings, build};
use serde_json::Value;
use shared_types::{SigningIdentity, TrustStore};
use tokio_util::sync::CancellationToken;

const ADMIN_TOKEN: &str = "admin-token-for-security-tests";

struct Served {
    url: String,
    planner: SigningIdentity,
    logs: HashMap<String, Arc<Mutex<ToolLog>>>,
    shutdown: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn serve() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let platform = SigningIdentity::from_seed([41; 32], Some("platform".into()));
    let planner = SigningIdentity::from_seed([42; 32], Some("planner-1".into()));
    let mut platform_keys = TrustStore::new();
    platform_keys.add_jwk(&platform.public_jwk()).unwrap();
    let (cards, logs) = start_tools(&[], &platform).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let service = build(
        Settings {
            data_dir: dir.path().join("data"),
            executor_id: "executor".into(),
            public_url: url.clone(),
            platform_keys,
            planners: vec![("planner-1".into(), planner.public_jwk())],
            admin_token: ADMIN_TOKEN.into(),
            credentials: AGENTS
                .iter()
                .map(|a| (a.to_string(), TOOL_TOKEN.to_owned()))
                .collect(),
            pause_after_journal_writes: None,
            gather_progress: GATHER_PROGRESS,
            max_running_sagas: DEFAULT_MAX_RUNNING_SAGAS,
        },
        shutdown.clone(),
    )
    .unwrap();
    tokio::spawn(agent_host::serve(
        listener,
        service.router,
        shutdown.clone(),
    ));
    let http = reqwest::Client::new();
    for card in &cards {
        let response = http
            .post(format!("{url}/admin/cards"))
            .bearer_auth(ADMIN_TOKEN)
            .json(card)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
    }
    Served {
        url,
        planner,
        logs,
        shutdown,
        _dir: dir,
    }
}

fn calls_seen(served: &Served) -> usize {
    served
        .logs
        .values()
        .map(|l| l.lock().unwrap().calls.len())
        .sum()
}

async fn send(served: &Served, bearer: Option<String>, plan: Value) -> agent_host::Result<Task> {
    let call = OutboundCall {
        bearer,
        ..OutboundCall::default()
    };
    let client = AgentClient::new(&served.url).unwrap();
    match client.send(&call, &data_message(plan, None)).await? {
        SendMessageResponse::Task(task) => Ok(task),
        other => panic!("expected a task, got {other:?}"),
    }
}

/// The reason of a request refused as unauthenticated (HTTP 401).
fn refusal(result: agent_host::Result<Task>) -> String {
    match result {
        Err(agent_host::Error::Protocol(e)) if e.code == agent_host::auth::UNAUTHENTICATED_CODE => {
            e.message
        }
        other => panic!("expected a 401, got {other:?}"),
    }
}

fn planner_jwt(served: &Served, audience: &str) -> Option<String> {
    Some(mint_jwt(&served.planner, "planner-1", audience, 60).unwrap())
}

fn signed_by(who: &SigningIdentity, path: &str) -> Value {
    let mut plan = read(path);
    who.sign_in_place(&mut plan).unwrap();
    plan
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_planner_jwt_for_this_executor_may_submit_a_plan() {
    let served = serve().await;
    let plan = signed_by(&served.planner, "examples/plans/supplier-onboarding.json");

    let card = reqwest::get(format!("{}/.well-known/agent-card.json", served.url))
        .await
        .unwrap();
    assert_eq!(card.status(), 200, "the card is public");
    let card: Value = card.json().await.unwrap();
    assert_eq!(card["skills"][0]["id"], "execute-plan");
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["bearerFormat"],
        "JWT"
    );

    let none = refusal(send(&served, None, plan.clone()).await);
    assert!(
        none.contains("requires Authorization"),
        "no credential: {none}"
    );
    let admin = refusal(send(&served, Some(ADMIN_TOKEN.into()), plan.clone()).await);
    assert!(admin.contains("not a JWT"), "the admin token: {admin}");
    let elsewhere = refusal(send(&served, planner_jwt(&served, "other"), plan.clone()).await);
    assert!(
        elsewhere.contains("refused"),
        "another audience: {elsewhere}"
    );
    let stranger = SigningIdentity::from_seed([43; 32], Some("planner-1".into()));
    let forged = Some(mint_jwt(&stranger, "planner-1", "executor", 60).unwrap());
    let forged = refusal(send(&served, forged, plan.clone()).await);
    assert!(
        forged.contains("refused"),
        "a JWT not signed by the planner: {forged}"
    );
    assert_eq!(calls_seen(&served), 0, "no tool was called");

    let jwt = planner_jwt(&served, "executor");
    let task = send(&served, jwt.clone(), plan.clone()).await.unwrap();
    assert_eq!(task.status.state, TaskState::Completed, "{:?}", task.status);
    let replayed = refusal(send(&served, jwt, plan).await);
    assert!(
        replayed.contains("already used"),
        "a replayed JWT: {replayed}"
    );
    assert_eq!(calls_seen(&served), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_not_signed_by_a_trusted_planner_or_unlike_the_registry_runs_nothing() {
    let served = serve().await;
    let stranger = SigningIdentity::from_seed([44; 32], Some("stranger".into()));
    let cases = [
        (
            signed_by(&stranger, "examples/plans/supplier-onboarding.json"),
            "SIGNER_UNTRUSTED",
        ),
        (
            signed_by(
                &served.planner,
                "examples/plans/invalid/compensation-not-declared.json",
            ),
            "COMPENSATION_NOT_DECLARED",
        ),
        (
            tampered(signed_by(
                &served.planner,
                "examples/plans/supplier-onboarding.json",
            )),
            "SIGNATURE_INVALID",
        ),
    ];
    for (plan, code) in cases {
        let task = send(&served, planner_jwt(&served, "executor"), plan)
            .await
            .unwrap();
        assert_eq!(task.status.state, TaskState::Rejected, "{code}");
        let message = format!("{:?}", task.status.message);
        assert!(message.contains(code), "{code} in {message}");
    }
    assert_eq!(calls_seen(&served), 0, "no tool was called");
}

/// A signed plan whose mandate was raised after signing.
fn tampered(mut plan: Value) -> Value {
    plan["mandate"]["maxSpend"]["amountMinor"] = serde_json::json!(999_999);
    plan
}
