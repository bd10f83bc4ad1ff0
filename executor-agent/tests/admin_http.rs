//! The executor's admin API and catalog over HTTP: each behind its own credential, and
//! only curated cards get in.

mod common;

use std::sync::Arc;

use agent_host::{InboundAuth, JwtPolicy, mint_jwt};
use common::*;
use executor_agent::registry::Registry;
use serde_json::{Value, json};
use shared_types::{SigningIdentity, TrustStore};

struct Server {
    url: String,
    planner: SigningIdentity,
    platform: SigningIdentity,
    _dir: tempfile::TempDir,
}

async fn server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let platform = SigningIdentity::from_seed([31; 32], Some("platform".into()));
    let planner = SigningIdentity::from_seed([32; 32], Some("planner".into()));
    let mut keys = TrustStore::new();
    keys.add_jwk(&platform.public_jwk()).unwrap();
    let registry = Registry::open(&dir.path().join("registry.db"), keys).unwrap();
    let admin = InboundAuth::StaticBearer {
        name: "admin".into(),
        token: "admin-secret".into(),
    };
    let policy = JwtPolicy::new(
        "executor@local",
        &[("planner@local".to_owned(), planner.public_jwk())],
    )
    .unwrap();
    let state = executor_agent::http::Admin {
        registry,
        mcp: Arc::default(),
        hosts: Default::default(),
    };
    let routes = executor_agent::http::routes(state, admin, InboundAuth::Jwt(Arc::new(policy)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, routes).await });
    Server {
        url,
        planner,
        platform,
        _dir: dir,
    }
}

async fn post(server: &Server, token: Option<&str>, body: &Value) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}/admin/cards", server.url))
        .json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (
        response.status().as_u16(),
        response.json().await.unwrap_or(Value::Null),
    )
}

async fn get_catalog(server: &Server, token: Option<&str>) -> (u16, Value) {
    let mut request = reqwest::Client::new().get(format!("{}/catalog", server.url));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (
        response.status().as_u16(),
        response.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn admin_api_and_catalog_each_require_their_own_credential() {
    let server = server().await;
    let mut signed = read("agent-cards/budget.json");
    server.platform.sign_in_place(&mut signed).unwrap();
    let planner_jwt = || mint_jwt(&server.planner, "planner@local", "executor@local", 60).unwrap();

    assert_eq!(post(&server, None, &signed).await.0, 401, "no credential");
    assert_eq!(
        post(&server, Some(&planner_jwt()), &signed).await.0,
        401,
        "a planner JWT is not an admin token"
    );
    let (status, body) = post(
        &server,
        Some("admin-secret"),
        &read("agent-cards/budget.json"),
    )
    .await;
    assert_eq!(status, 422, "an unsigned card: {body}");
    assert!(body.to_string().contains("not curated"), "{body}");
    let stranger = SigningIdentity::from_seed([33; 32], Some("stranger".into()));
    let mut foreign = read("agent-cards/budget.json");
    stranger.sign_in_place(&mut foreign).unwrap();
    let (status, body) = post(&server, Some("admin-secret"), &foreign).await;
    assert_eq!(status, 422, "a card signed by an unknown key: {body}");

    assert_eq!(
        get_catalog(&server, Some(&planner_jwt())).await.1,
        json!({"agents": {}}),
        "nothing got in"
    );

    let (status, body) = post(&server, Some("admin-secret"), &signed).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["signedBy"], "platform");

    let mut payments = read("agent-cards/payments.json");
    server.platform.sign_in_place(&mut payments).unwrap();
    let (status, _) = post(&server, Some("admin-secret"), &payments).await;
    assert_eq!(status, 201);
    // Registering by URL where no agent answers is a clear error, not a crash.
    let (status, body) = post(
        &server,
        Some("admin-secret"),
        &json!({"url": "http://127.0.0.1:9"}),
    )
    .await;
    assert_eq!(status, 502, "{body}");
    assert!(body.to_string().contains("cannot fetch the card"), "{body}");

    assert_eq!(get_catalog(&server, None).await.0, 401);
    assert_eq!(
        get_catalog(&server, Some("admin-secret")).await.0,
        401,
        "the admin token is not a planner JWT"
    );
    let (status, catalog) = get_catalog(&server, Some(&planner_jwt())).await;
    assert_eq!(status, 200);
    assert_eq!(
        catalog["agents"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["budget", "payments"]
    );
    assert!(
        !catalog.to_string().contains("http://"),
        "no endpoints in the catalog"
    );
    assert!(
        !catalog.to_string().contains("secret"),
        "no credentials in the catalog"
    );
}
