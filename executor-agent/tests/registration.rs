//! Registration attacked over HTTP, against a running executor: an admin request may make
//! the executor fetch a card or list an MCP server, so whoever holds the admin token (or
//! steals it) must not be able to steer a tool's credential, a redirect or an oversize
//! document at it. Each hostile endpoint here is a real server on loopback that records
//! every request it is sent.

mod common;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use common::TOOL_TOKEN;
use common::served::*;
use executor_agent::http::RegistrationHosts;
use serde_json::{Value, json};

/// What a hostile endpoint was sent: the path and the `Authorization` header, if any.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    path: String,
    authorization: Option<String>,
}

/// How a hostile endpoint answers every request.
#[derive(Clone)]
enum Answer {
    /// 500 with a body the executor must not quote.
    Error(&'static str),
    /// 302 to another address.
    Redirect(String),
    /// 200 with a JSON document of about this many bytes.
    Huge(usize),
}

/// Every request one hostile endpoint was sent, in order.
#[derive(Clone, Default)]
struct Sent(Arc<Mutex<Vec<Seen>>>);

impl Sent {
    fn all(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }
}

#[derive(Clone)]
struct Catcher {
    seen: Sent,
    answer: Answer,
}

async fn catch(State(catcher): State<Catcher>, request: Request) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    catcher.seen.0.lock().unwrap().push(Seen {
        path: request.uri().path().to_owned(),
        authorization,
    });
    match catcher.answer {
        Answer::Error(body) => (StatusCode::INTERNAL_SERVER_ERROR, body).into_response(),
        Answer::Redirect(to) => {
            let mut headers = HeaderMap::new();
            headers.insert(header::LOCATION, to.parse().unwrap());
            (StatusCode::FOUND, headers).into_response()
        }
        Answer::Huge(bytes) => {
            let filler = "x".repeat(bytes);
            (
                [(header::CONTENT_TYPE, "application/json")],
                json!({"name": "huge", "filler": filler}).to_string(),
            )
                .into_response()
        }
    }
}

/// Starts a hostile endpoint; returns its base URL and what it is sent.
async fn catcher(answer: Answer) -> (String, Sent) {
    let seen = Sent::default();
    let app = Router::new().fallback(catch).with_state(Catcher {
        seen: seen.clone(),
        answer,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

/// A manifest curating `agent`'s MCP server at `url`, signed by the platform key the
/// executor trusts.
fn signed_manifest(served: &Served, agent: &str, url: &str) -> Value {
    let mut manifest = json!({
        "agent": agent,
        "server": {"name": "checkout-mcp", "url": url},
        "tools": {"charge_payment": {"class": "retriable", "idempotent": true}}
    });
    served.platform.sign_in_place(&mut manifest).unwrap();
    manifest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_manifest_makes_the_executor_send_nothing_anywhere() {
    let served = serve().await;
    let (url, seen) = catcher(Answer::Error("not an MCP server")).await;
    let (status, body) = admin_post(
        &served,
        "/admin/mcp-servers",
        &json!({"url": format!("{url}/mcp"), "manifest": {"agent": "payments",
            "server": {"name": "x", "url": format!("{url}/mcp")},
            "tools": {"charge": {"class": "retriable"}}}}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("not curated"), "{body}");
    assert_eq!(seen.all(), []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_manifest_sends_the_credential_only_to_the_endpoint_it_names() {
    let served = serve().await;
    let (named, named_seen) = catcher(Answer::Error("SECRET-PEER-TEXT")).await;
    let (other, other_seen) = catcher(Answer::Error("SECRET-PEER-TEXT")).await;
    let manifest = signed_manifest(&served, "payments", &format!("{named}/mcp"));

    // Another URL beside a signed manifest: refused before anything is sent.
    let (status, body) = admin_post(
        &served,
        "/admin/mcp-servers",
        &json!({"url": format!("{other}/mcp"), "manifest": manifest}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("the manifest names the endpoint"), "{body}");
    assert_eq!(other_seen.all(), []);
    assert_eq!(named_seen.all(), []);

    // A manifest without an endpoint: refused, nothing sent.
    let mut unnamed = json!({"agent": "payments", "server": {"name": "checkout-mcp"},
        "tools": {"charge_payment": {"class": "retriable"}}});
    served.platform.sign_in_place(&mut unnamed).unwrap();
    let (status, body) = admin_post(
        &served,
        "/admin/mcp-servers",
        &json!({"url": format!("{other}/mcp"), "manifest": unnamed}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("server.url"), "{body}");
    assert_eq!(other_seen.all(), []);

    // The endpoint the platform signed gets the credential of the agent it curates, and
    // its answer is not quoted back.
    let (status, body) = admin_post(
        &served,
        "/admin/mcp-servers",
        &json!({"manifest": manifest}),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert!(!body.contains("SECRET-PEER-TEXT"), "{body}");
    let seen = named_seen.all();
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|s| s.path == "/mcp"
            && s.authorization.as_deref() == Some(&format!("Bearer {TOOL_TOKEN}"))),
        "{seen:?}"
    );
    assert_eq!(other_seen.all(), []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_fetches_follow_no_redirect() {
    let served = serve().await;
    let (target, target_seen) = catcher(Answer::Error("elsewhere")).await;
    let (card_url, card_seen) = catcher(Answer::Redirect(format!(
        "{target}/.well-known/agent-card.json"
    )))
    .await;
    let (status, body) = admin_post(&served, "/admin/cards", &json!({"url": card_url})).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("redirects are not followed"), "{body}");
    assert_eq!(card_seen.all().len(), 1);

    let (mcp_url, mcp_seen) = catcher(Answer::Redirect(format!("{target}/mcp"))).await;
    let manifest = signed_manifest(&served, "payments", &format!("{mcp_url}/mcp"));
    let (status, body) = admin_post(
        &served,
        "/admin/mcp-servers",
        &json!({"manifest": manifest}),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert!(!mcp_seen.all().is_empty());
    assert_eq!(target_seen.all(), [], "a redirect was followed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_card_is_refused_without_reading_it_whole() {
    let served = serve().await;
    let (url, _) = catcher(Answer::Huge(4 * 1024 * 1024)).await;
    let (status, body) = admin_post(&served, "/admin/cards", &json!({"url": url})).await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("longer than 1048576 bytes"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_reach_only_the_allowed_hosts() {
    let served = serve_with(RegistrationHosts::only(["localhost".to_owned()])).await;
    let (url, seen) = catcher(Answer::Error("should not be reached")).await;
    let (status, body) = admin_post(&served, "/admin/cards", &json!({"url": url})).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("--allow-registration-host"), "{body}");
    let manifest = signed_manifest(&served, "payments", &format!("{url}/mcp"));
    let (status, body) = admin_post(
        &served,
        "/admin/mcp-servers",
        &json!({"manifest": manifest}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(seen.all(), []);

    // The same server under an allowed name is fetched.
    let port = url.rsplit(':').next().unwrap();
    let (status, body) = admin_post(
        &served,
        "/admin/cards",
        &json!({"url": format!("http://localhost:{port}")}),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(seen.all().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_declaration_is_on_the_record_and_spares_the_sagas_already_accepted() {
    use common::Fault;
    // The saga is held at the compliance check, then the pivot declines: everything
    // before it is unwound with the compensations the plan was accepted with.
    let served = serve_faulty(
        RegistrationHosts::any(),
        &[
            ("compliance.check", Fault::ApplyThenHold(1)),
            ("payments.capture", Fault::Decline),
        ],
    )
    .await;
    let plan = signed_by(&served.planner, "examples/plans/supplier-onboarding.json");
    let jwt = planner_jwt(&served, "executor");
    let held = served.logs["compliance-registry"]
        .lock()
        .unwrap()
        .applied
        .clone();
    let url = served.url.clone();
    let running = tokio::spawn(async move {
        let client = agent_host::AgentClient::new(&url).unwrap();
        let call = agent_host::OutboundCall {
            bearer: jwt,
            ..Default::default()
        };
        client.send(&call, &common::data_message(plan, None)).await
    });
    held.notified().await;

    // Meanwhile the vendor registry is registered again: its create can no longer be undone.
    let mut card = served.cards[0].clone();
    card.as_object_mut().unwrap().remove("signatures");
    let create = card
        .pointer_mut("/capabilities/extensions/0/params/skills/vendor.create")
        .unwrap();
    create["class"] = json!("irreversible");
    for member in ["compensation", "undoTtlSeconds"] {
        create.as_object_mut().unwrap().remove(member);
    }
    served.platform.sign_in_place(&mut card).unwrap();
    let (status, body) = admin_post(&served, "/admin/cards", &card).await;
    assert_eq!(status, 201, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["registration"]["kind"], "changed", "{answer}");
    assert!(
        answer["registration"]["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["skill"] == "vendor.create"
                && c["change"] == "class"
                && c["old"] == "compensable"
                && c["new"] == "irreversible"),
        "{answer}"
    );

    served.logs["compliance-registry"]
        .lock()
        .unwrap()
        .release
        .notify_one();
    let task = running.await.unwrap().unwrap();
    let agent_host::sdk::SendMessageResponse::Task(task) = task else {
        panic!("expected a task");
    };
    assert_eq!(
        task.status.state,
        agent_host::sdk::TaskState::Failed,
        "{:?}",
        task.status
    );
    let effects = served.logs["vendor-registry"]
        .lock()
        .unwrap()
        .effects
        .clone();
    assert!(
        effects.iter().any(|(_, skill)| skill == "vendor.archive"),
        "the vendor was not archived: {effects:?}"
    );

    // The history says who changed what, and when.
    let history: Value = reqwest::Client::new()
        .get(format!(
            "{}/admin/registry-history?agent=vendor-registry",
            served.url
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let registrations = history["registrations"].as_array().unwrap();
    assert_eq!(registrations.len(), 2, "{history}");
    assert_eq!(registrations[0]["kind"], "changed");
    assert_eq!(registrations[0]["by"], "admin");
    assert_eq!(registrations[1]["kind"], "first");
    let anonymous = reqwest::get(format!("{}/admin/registry-history", served.url))
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_allow_list_a_signed_card_whose_endpoint_lies_outside_it_is_refused() {
    let served = serve_with(RegistrationHosts::only(["localhost".to_owned()])).await;
    let (url, seen) = catcher(Answer::Error("should never get a credential")).await;
    // A platform-signed card (as an attacker holding the admin token might replay one)
    // pointing at an endpoint outside the allow-list.
    let mut card = served.cards[4].clone();
    card["name"] = json!("payments-elsewhere");
    let card =
        agent_host::prepare_card(card, &format!("{url}/a2a"), Some(&served.platform)).unwrap();
    let (status, body) = admin_post(&served, "/admin/cards", &card).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("--allow-registration-host"), "{body}");
    let (status, catalog) = {
        let response = reqwest::Client::new()
            .get(format!("{}/catalog", served.url))
            .bearer_auth(planner_jwt(&served, "executor").unwrap())
            .send()
            .await
            .unwrap();
        (response.status(), response.text().await.unwrap())
    };
    assert_eq!(status, 200);
    assert!(
        !catalog.contains("payments-elsewhere"),
        "registered: {catalog}"
    );
    assert_eq!(seen.all(), [], "nothing was sent there");
}

/// Issue 42: a card whose `verify` names a skill that is not read-only (asking would
/// change something), or the skill itself, is refused by a running executor, signed or
/// not, and the payments agent keeps the declaration it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_whose_verify_is_not_a_read_only_skill_of_the_agent_is_refused() {
    let served = serve().await;
    let skills = "/capabilities/extensions/0/params/skills";
    let cases: [(&str, Value, &str); 3] = [
        (
            "payments.status/readOnly",
            json!(false),
            "names payments.status, which is not readOnly",
        ),
        (
            "payments.capture/verify",
            json!({"skill": "payments.capture", "args": {}}),
            "payments.capture cannot verify itself",
        ),
        (
            "payments.capture/verify",
            json!({"skill": "payments.status", "args": {"id": "$response.body#/captureId"}}),
            "there is no response when the outcome is unknown",
        ),
    ];
    for (at, value, reason) in cases {
        let mut card = served.cards[4].clone();
        assert_eq!(card["name"], "payments");
        card.as_object_mut().unwrap().remove("signatures");
        let (parent, key) = at.rsplit_once('/').unwrap();
        card.pointer_mut(&format!("{skills}/{parent}")).unwrap()[key] = value.clone();
        served.platform.sign_in_place(&mut card).unwrap();
        let (status, body) = admin_post(&served, "/admin/cards", &card).await;
        assert_eq!(status, 422, "{at} = {value}: {body}");
        assert!(body.contains(reason), "{at} = {value}: {body}");
    }
    // The registered declaration is the one the platform curated.
    let (status, body) = admin_post(&served, "/admin/cards", &served.cards[4]).await;
    assert!(status == 200 || status == 201, "{status}: {body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["registration"]["kind"], "unchanged", "{answer}");
}
