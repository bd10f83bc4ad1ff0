//! Authentication against a running agent: JWT claims (`nbf`, `jti`), refusals that do
//! not tell which issuers are trusted, replays, and 401 answers shaped for each binding
//! (a JSON-RPC error echoing the id; an AIP-193 error on HTTP+JSON). Every refused
//! request leaves no task and no replay-cache entry behind.

mod common;

use std::sync::Arc;

use agent_host::auth::{MAX_JTI_BYTES, UNAUTHENTICATED_CODE};
use agent_host::{InboundAuth, JwtPolicy, mint_jwt};
use common::*;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use shared_types::SigningIdentity;

const AUDIENCE: &str = "executor";
const ISSUER: &str = "planner@local";

struct JwtAgent {
    agent: Running,
    policy: Arc<JwtPolicy>,
    planner: SigningIdentity,
}

impl Drop for JwtAgent {
    fn drop(&mut self) {
        self.agent.shutdown.cancel();
    }
}

async fn start_jwt() -> JwtAgent {
    let planner = SigningIdentity::from_seed([1; 32], Some("planner".into()));
    let policy =
        Arc::new(JwtPolicy::new(AUDIENCE, &[(ISSUER.to_owned(), planner.public_jwk())]).unwrap());
    let agent = start(InboundAuth::Jwt(policy.clone())).await;
    JwtAgent {
        agent,
        policy,
        planner,
    }
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Good claims for the test agent; tests change what they refuse.
fn claims(iss: &str) -> Value {
    json!({"iss": iss, "aud": AUDIENCE, "iat": now(), "exp": now() + 60,
        "jti": uuid::Uuid::new_v4().to_string()})
}

fn sign(signer: &SigningIdentity, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(signer.kid().to_owned());
    jsonwebtoken::encode(
        &header,
        claims,
        &EncodingKey::from_ed_der(&signer.pkcs8_der()),
    )
    .unwrap()
}

/// One answer as it came: status, `WWW-Authenticate`, content type and body (the bytes,
/// which are UTF-8 JSON, as text).
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    challenge: Option<String>,
    content_type: Option<String>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

async fn answer(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.unwrap();
    let header = |name| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    Answer {
        status: response.status().as_u16(),
        challenge: header(reqwest::header::WWW_AUTHENTICATE),
        content_type: header(reqwest::header::CONTENT_TYPE),
        body: String::from_utf8(response.bytes().await.unwrap().to_vec()).unwrap(),
    }
}

/// A JSON-RPC `SendMessage` with the given raw body and token.
async fn jsonrpc(url: &str, body: impl Into<reqwest::Body>, token: Option<&str>) -> Answer {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/"))
        .header("A2A-Version", "1.0")
        .header("content-type", "application/json")
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    answer(request).await
}

fn send_message_body(id: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "SendMessage", "params": user_message("complete")})
        .to_string()
}

/// An HTTP+JSON `SendMessage` with the token.
async fn rest_send(url: &str, token: Option<&str>) -> Answer {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/message:send"))
        .header("A2A-Version", "1.0")
        .json(&user_message("complete"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    answer(request).await
}

fn message_of(answer: &Answer) -> String {
    answer
        .json()
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The number of tasks, seen with a fresh good token (which is then remembered too).
async fn tasks(agent: &JwtAgent) -> i64 {
    let token = mint_jwt(&agent.planner, ISSUER, AUDIENCE, 60).unwrap();
    task_count(&agent.agent.url, Some(&token)).await
}

#[tokio::test]
async fn a_token_not_valid_yet_is_refused() {
    let agent = start_jwt().await;
    let url = agent.agent.url.as_str();
    let mut early = claims(ISSUER);
    early["nbf"] = json!(now() + 120);
    let early = sign(&agent.planner, &early);
    let refused = jsonrpc(url, send_message_body(json!(1)), Some(&early)).await;
    assert_eq!(refused.status, 401, "{:?}", refused.json());
    assert!(
        message_of(&refused).contains("not valid before"),
        "{refused:?}"
    );
    let refused = rest_send(url, Some(&early)).await;
    assert_eq!(refused.status, 401);
    assert_eq!(
        agent.policy.remembered_tokens(),
        0,
        "a refused token is not recorded"
    );

    // Within the clock skew, nbf is honoured as exp is: accepted.
    let mut skewed = claims(ISSUER);
    skewed["nbf"] = json!(now() + 10);
    let skewed = sign(&agent.planner, &skewed);
    let accepted = jsonrpc(url, send_message_body(json!(2)), Some(&skewed)).await;
    assert_eq!(accepted.status, 200, "{:?}", accepted.json());
    assert_eq!(
        tasks(&agent).await,
        1,
        "only the accepted token made a task"
    );
}

#[tokio::test]
async fn an_oversize_jti_is_refused_and_not_remembered() {
    let agent = start_jwt().await;
    let url = agent.agent.url.as_str();
    let mut huge = claims(ISSUER);
    huge["jti"] = json!("j".repeat(8 * 1024));
    let huge = sign(&agent.planner, &huge);
    for refused in [
        jsonrpc(url, send_message_body(json!(1)), Some(&huge)).await,
        rest_send(url, Some(&huge)).await,
    ] {
        assert_eq!(refused.status, 401);
        assert!(message_of(&refused).contains("jti"), "{refused:?}");
    }
    assert_eq!(agent.policy.remembered_tokens(), 0);

    let mut longest = claims(ISSUER);
    longest["jti"] = json!("j".repeat(MAX_JTI_BYTES));
    let longest = sign(&agent.planner, &longest);
    let accepted = jsonrpc(url, send_message_body(json!(2)), Some(&longest)).await;
    assert_eq!(accepted.status, 200, "{:?}", accepted.json());
    assert_eq!(agent.policy.remembered_tokens(), 1);
    assert_eq!(tasks(&agent).await, 1);
}

#[tokio::test]
async fn unknown_and_mistrusted_issuers_get_the_same_answer() {
    let agent = start_jwt().await;
    let url = agent.agent.url.as_str();
    let stranger = SigningIdentity::from_seed([2; 32], Some("stranger".into()));
    let tokens = [
        // An issuer this agent does not know.
        sign(&stranger, &claims("stranger")),
        // The trusted issuer's name with another key.
        sign(&stranger, &claims(ISSUER)),
        // An unknown name with the trusted key.
        sign(&agent.planner, &claims("someone-else")),
    ];
    for binding in ["JSON-RPC", "HTTP+JSON"] {
        let mut answers = Vec::new();
        for token in &tokens {
            answers.push(match binding {
                "JSON-RPC" => jsonrpc(url, send_message_body(json!(7)), Some(token)).await,
                _ => rest_send(url, Some(token)).await,
            });
        }
        assert_eq!(answers[0].status, 401, "{binding}");
        assert_eq!(
            answers[0].challenge.as_deref(),
            Some("Bearer error=\"invalid_token\"")
        );
        assert!(!answers[0].body.contains("stranger"), "{}", answers[0].body);
        assert_eq!(answers[0], answers[1], "{binding}: byte-identical");
        assert_eq!(answers[0], answers[2], "{binding}: byte-identical");
    }
    assert_eq!(agent.policy.remembered_tokens(), 0);
    assert_eq!(tasks(&agent).await, 0);
}

#[tokio::test]
async fn a_replayed_token_is_refused_on_either_binding() {
    let agent = start_jwt().await;
    let url = agent.agent.url.as_str();
    let token = mint_jwt(&agent.planner, ISSUER, AUDIENCE, 60).unwrap();
    let first = rest_send(url, Some(&token)).await;
    assert_eq!(first.status, 200, "{:?}", first.json());
    for replayed in [
        rest_send(url, Some(&token)).await,
        jsonrpc(url, send_message_body(json!(2)), Some(&token)).await,
    ] {
        assert_eq!(replayed.status, 401);
        assert!(
            message_of(&replayed).contains("already used"),
            "{replayed:?}"
        );
    }
    assert_eq!(tasks(&agent).await, 1, "the replays made no task");
}

#[tokio::test]
async fn a_jsonrpc_401_is_a_jsonrpc_error_that_echoes_the_id() {
    let agent = start_jwt().await;
    let url = agent.agent.url.as_str();
    for id in [json!(7), json!("req-α\n1"), json!(-3), json!(null)] {
        let refused = jsonrpc(url, send_message_body(id.clone()), None).await;
        assert_eq!(refused.status, 401);
        assert_eq!(refused.challenge.as_deref(), Some("Bearer"));
        assert_eq!(refused.content_type.as_deref(), Some("application/json"));
        let body = refused.json();
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["id"], id, "{body}");
        let error = body["error"].as_object().unwrap();
        assert_eq!(error["code"], json!(UNAUTHENTICATED_CODE));
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("requires Authorization")
        );
        let keys: Vec<&str> = error.keys().map(String::as_str).collect();
        assert_eq!(keys, ["code", "message", "data"], "a JSON-RPC error object");
        assert_eq!(
            error["data"],
            json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "UNAUTHENTICATED", "domain": "a2a-protocol.org"}])
        );
    }
    // The id is read wherever it stands in the first 64 KiB; an unauthenticated caller
    // cannot make the agent read more to find it.
    let late_id = |pad: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"SendMessage","params":{{"pad":"{}"}},"id":"late"}}"#,
            "x".repeat(pad)
        )
    };
    assert_eq!(
        jsonrpc(url, late_id(60 * 1024), None).await.json()["id"],
        "late"
    );
    assert_eq!(
        jsonrpc(url, late_id(512 * 1024), None).await.json()["id"],
        Value::Null
    );
    // Bodies whose id cannot be read: null.
    let unreadable = [
        "{not json".to_owned(),
        r#"{"jsonrpc":"2.0","id":{"nested":[1,2]},"method":"SendMessage"}"#.to_owned(),
        r#"[{"jsonrpc":"2.0","id":1,"method":"SendMessage"}]"#.to_owned(),
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"params":"{}"}}"#,
            "x".repeat(1024 * 1024)
        ),
    ];
    for body in unreadable {
        let refused = jsonrpc(url, body, None).await;
        assert!(matches!(refused.status, 401 | 413), "{}", refused.status);
        if refused.status == 401 {
            assert_eq!(refused.json()["id"], Value::Null, "{:?}", refused.json());
        }
    }
    // A streamed body over the limit (no Content-Length to refuse it by) ends the read.
    let chunk = bytes::Bytes::from(vec![b' '; 64 * 1024]);
    let chunks = (0..20).map(move |_| Ok::<_, std::io::Error>(chunk.clone()));
    let streamed = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let refused = jsonrpc(url, streamed, None).await;
    assert_eq!(refused.status, 401);
    assert_eq!(refused.json()["id"], Value::Null);
    assert_eq!(tasks(&agent).await, 0);
}

#[tokio::test]
async fn a_rest_401_is_an_aip193_error() {
    let agent = start_jwt().await;
    let url = agent.agent.url.as_str();
    let http = reqwest::Client::new();
    let requests = [
        http.post(format!("{url}/message:send"))
            .json(&user_message("complete")),
        http.get(format!("{url}/tasks")),
        http.get(format!("{url}/tasks/some-task")),
        http.post(format!("{url}/tasks/some-task:cancel")),
    ];
    for request in requests {
        let refused = answer(
            request
                .header("A2A-Version", "1.0")
                .bearer_auth("not-a-jwt"),
        )
        .await;
        assert_eq!(refused.status, 401);
        assert_eq!(
            refused.challenge.as_deref(),
            Some("Bearer error=\"invalid_token\"")
        );
        assert_eq!(refused.content_type.as_deref(), Some("application/json"));
        let body = refused.json();
        assert_eq!(body["error"]["code"], 401, "{body}");
        assert_eq!(body["error"]["status"], "UNAUTHENTICATED");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not a JWT")
        );
        assert_eq!(body["error"]["details"][0]["reason"], "UNAUTHENTICATED");
        assert!(body.get("jsonrpc").is_none(), "not a JSON-RPC body: {body}");
    }
    assert_eq!(tasks(&agent).await, 0);
}

#[tokio::test]
async fn a_static_bearer_401_has_the_binding_shape_too() {
    let agent = start(InboundAuth::StaticBearer {
        name: "executor".into(),
        token: "s3cret".into(),
    })
    .await;
    let url = agent.url.as_str();
    let refused = jsonrpc(url, send_message_body(json!("abc")), Some("wrong")).await;
    assert_eq!(refused.status, 401);
    assert_eq!(refused.json()["id"], "abc");
    assert_eq!(refused.json()["error"]["code"], json!(UNAUTHENTICATED_CODE));
    let refused = rest_send(url, Some("wrong")).await;
    assert_eq!(refused.json()["error"]["status"], "UNAUTHENTICATED");
    assert_eq!(task_count(url, Some("s3cret")).await, 0);
    agent.shutdown.cancel();
}
