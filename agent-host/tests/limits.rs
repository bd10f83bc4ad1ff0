//! What one request and one connection may cost a running agent: the body scan before
//! the SDK builds values (limits, I-JSON), authentication before the body is read, the
//! cap on requests in flight, and the listener's header timeout and connection cap.

mod common;

use std::sync::Arc;
use std::time::Duration;

use agent_host::store::TaskQuery;
use agent_host::{
    ConnectionLimits, HostConfig, InboundAuth, MemoryTaskStore, ServedCard, TaskManager, TaskStore,
    prepare_card,
};
use common::{EchoAgent, card, rpc, user_message};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// The longest any step of these tests may take before it counts as hanging.
const BOUND: Duration = Duration::from_secs(10);

struct Served {
    url: String,
    addr: std::net::SocketAddr,
    store: Arc<MemoryTaskStore>,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<agent_host::Result<()>>,
}

async fn serve(
    auth: InboundAuth,
    tune: impl FnOnce(&mut HostConfig),
    limits: ConnectionLimits,
) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let url = format!("http://{addr}");
    let card = prepare_card(agent_host::describe_auth(card(), &auth), &url, None).unwrap();
    let mut config = HostConfig::new(ServedCard::new(&card).unwrap(), auth);
    tune(&mut config);
    let store = Arc::new(MemoryTaskStore::new());
    let router = agent_host::app(
        &config,
        Arc::new(EchoAgent),
        TaskManager::new(store.clone()),
    );
    let shutdown = config.shutdown.clone();
    let server = tokio::spawn(agent_host::serve_with(
        listener,
        router,
        shutdown.clone(),
        limits,
    ));
    Served {
        url,
        addr,
        store,
        shutdown,
        server,
    }
}

async fn stored_tasks(store: &MemoryTaskStore) -> usize {
    let query = TaskQuery {
        limit: 100,
        ..TaskQuery::default()
    };
    store.list(&query).await.unwrap().total
}

async fn post(url: &str, path: &str, body: String) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .header("A2A-Version", "1.0")
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn send_message_rpc(id: &str, parts: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":"{id}","method":"SendMessage","params":{{"message":{{"messageId":"m-{id}","role":"ROLE_USER","parts":[{parts}]}}}}}}"#
    )
}

fn send_message_rest(parts: &str) -> String {
    format!(r#"{{"message":{{"messageId":"m-rest","role":"ROLE_USER","parts":[{parts}]}}}}"#)
}

/// A body as shown in a failed assertion: the start of it.
fn shown(body: &Value) -> String {
    body.to_string().chars().take(600).collect()
}

fn reason(details: &Value) -> String {
    details[0]["reason"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_body_beyond_the_scan_limits_is_refused_by_name_and_creates_nothing() {
    let served = serve(InboundAuth::Open, |_| {}, ConnectionLimits::default()).await;
    // The issue's body: a 937 KiB data part of 480,000 zeros, under the 1 MiB cap.
    let zeros = format!(
        r#"{{"text":"complete"}},{{"data":[{}0]}}"#,
        "0,".repeat(479_999)
    );
    let (status, body) = post(&served.url, "/", send_message_rpc("z-1", &zeros)).await;
    assert_eq!(status, 200, "{}", shown(&body));
    assert_eq!(body["id"], "z-1", "the id is echoed: {}", shown(&body));
    assert_eq!(body["error"]["code"], -32602, "{}", shown(&body));
    assert_eq!(reason(&body["error"]["data"]), "REQUEST_LIMIT_EXCEEDED");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("maxValues") && message.contains("20000"),
        "{message}"
    );

    let nested = format!(
        r#"{{"text":"complete"}},{{"data":{}{}}}"#,
        "[".repeat(100),
        "]".repeat(100)
    );
    let (status, body) = post(&served.url, "/message:send", send_message_rest(&nested)).await;
    assert_eq!(status, 400, "{}", shown(&body));
    assert_eq!(
        body["error"]["status"],
        "INVALID_ARGUMENT",
        "{}",
        shown(&body)
    );
    assert_eq!(reason(&body["error"]["details"]), "REQUEST_LIMIT_EXCEEDED");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("maxDepth"),
        "{}",
        shown(&body)
    );

    let many = vec![r#"{"text":"complete"}"#; 65].join(",");
    let (_, body) = post(&served.url, "/", send_message_rpc("p-1", &many)).await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("maxParts"),
        "{}",
        shown(&body)
    );

    assert_eq!(stored_tasks(&served.store).await, 0, "no task was created");
    // Within the limits, the same agent still serves.
    let (_, body) = rpc(&served.url, "SendMessage", user_message("complete"), None).await;
    assert_eq!(
        body["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{}",
        shown(&body)
    );
    served.shutdown.cancel();
}

#[tokio::test]
async fn a_duplicate_member_name_is_schema_invalid_in_both_bindings() {
    let served = serve(InboundAuth::Open, |_| {}, ConnectionLimits::default()).await;
    let parts = r#"{"text":"complete"},{"data":{"spend":{"amountMinor":1,"amountMinor":999999}}}"#;
    let (status, body) = post(&served.url, "/", send_message_rpc("d-1", parts)).await;
    assert_eq!(status, 200, "{}", shown(&body));
    assert_eq!(body["id"], "d-1", "{}", shown(&body));
    assert_eq!(body["error"]["code"], -32602, "{}", shown(&body));
    let info = &body["error"]["data"][0];
    assert_eq!(info["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
    assert_eq!(info["reason"], "SCHEMA_INVALID", "{}", shown(&body));
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"amountMinor\"")
            && message.contains("/params/message/parts/1/data/spend"),
        "{message}"
    );

    let (status, body) = post(&served.url, "/message:send", send_message_rest(parts)).await;
    assert_eq!(status, 400, "{}", shown(&body));
    assert_eq!(
        reason(&body["error"]["details"]),
        "SCHEMA_INVALID",
        "{}",
        shown(&body)
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/message/parts/1/data/spend"),
        "{}",
        shown(&body)
    );

    // A duplicate in the envelope itself, and an integer a double cannot hold.
    let twice = r#"{"jsonrpc":"2.0","id":7,"id":8,"method":"SendMessage","params":{}}"#;
    let (_, body) = post(&served.url, "/", twice.to_owned()).await;
    assert_eq!(
        reason(&body["error"]["data"]),
        "SCHEMA_INVALID",
        "{}",
        shown(&body)
    );
    let big = r#"{"text":"complete"},{"data":{"amountMinor":9007199254740993}}"#;
    let (_, body) = post(&served.url, "/", send_message_rpc("b-1", big)).await;
    assert_eq!(
        reason(&body["error"]["data"]),
        "SCHEMA_INVALID",
        "{}",
        shown(&body)
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("9007199254740993"),
        "{}",
        shown(&body)
    );
    assert_eq!(stored_tasks(&served.store).await, 0, "no task was created");
    served.shutdown.cancel();
}

/// Sends `head` on a fresh connection and reads until the server closes it.
async fn answer_to_head(addr: std::net::SocketAddr, head: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(BOUND, stream.read_to_end(&mut answer))
        .await
        .expect("the server answered and closed in time")
        .unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn an_unauthenticated_request_is_refused_before_its_body_is_read() {
    let auth = InboundAuth::StaticBearer {
        name: "client".into(),
        token: "a-static-token-of-some-length".into(),
    };
    let served = serve(auth, |_| {}, ConnectionLimits::default()).await;
    // The head announces a body that never comes: the server answers from the headers,
    // after waiting at most a second for the first 64 KiB that could hold the id.
    let head = "POST / HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\nContent-Type: application/json\r\n\
                Content-Length: 900000\r\nConnection: close\r\n\r\n";
    let answer = answer_to_head(served.addr, head).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    served.shutdown.cancel();
}

#[tokio::test]
async fn a_half_sent_head_is_cut_off_after_the_header_timeout() {
    let limits = ConnectionLimits {
        header_read_timeout: Duration::from_millis(300),
        ..ConnectionLimits::default()
    };
    let served = serve(InboundAuth::Open, |_| {}, limits).await;
    let answer = answer_to_head(served.addr, "POST / HTTP/1.1\r\nHost: x\r\nA2A-Ver").await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    // A kept-alive connection that goes quiet is closed the same way.
    let answer = answer_to_head(
        served.addr,
        "GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    served.shutdown.cancel();
}

/// Reads one response (head and `Content-Length` body) from a kept-alive connection.
async fn read_response(stream: &mut TcpStream) -> String {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(BOUND, stream.read(&mut chunk))
            .await
            .expect("an answer in time")
            .unwrap();
        assert!(n > 0, "closed before the answer");
        bytes.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if bytes.len() >= end + 4 + length {
                return text;
            }
        }
    }
}

const CARD_REQUEST: &str = "GET /.well-known/agent-card.json HTTP/1.1\r\nHost: x\r\n\r\n";

#[tokio::test]
async fn a_connection_beyond_the_cap_is_served_only_once_another_closes() {
    let limits = ConnectionLimits {
        max_connections: 1,
        ..ConnectionLimits::default()
    };
    let served = serve(InboundAuth::Open, |_| {}, limits).await;
    let mut first = TcpStream::connect(served.addr).await.unwrap();
    first.write_all(CARD_REQUEST.as_bytes()).await.unwrap();
    assert!(read_response(&mut first).await.starts_with("HTTP/1.1 200"));

    let mut second = TcpStream::connect(served.addr).await.unwrap();
    second.write_all(CARD_REQUEST.as_bytes()).await.unwrap();
    // Two more round trips on the first connection: the server is running, and still
    // has not answered the second.
    for _ in 0..2 {
        first.write_all(CARD_REQUEST.as_bytes()).await.unwrap();
        assert!(read_response(&mut first).await.starts_with("HTTP/1.1 200"));
    }
    let mut probe = [0u8; 1];
    match second.try_read(&mut probe) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the second connection was served at the cap: {other:?}"),
    }
    drop(first);
    assert!(read_response(&mut second).await.starts_with("HTTP/1.1 200"));
    served.shutdown.cancel();
}

#[tokio::test]
async fn a_request_beyond_the_in_flight_cap_waits_for_a_turn() {
    let served = serve(
        InboundAuth::Open,
        |config| config.max_concurrent_requests = 1,
        ConnectionLimits::default(),
    )
    .await;
    // "hang" holds its turn: its task is stored, and its answer never comes.
    let url = served.url.clone();
    let hanging =
        tokio::spawn(async move { rpc(&url, "SendMessage", user_message("hang"), None).await });
    tokio::time::timeout(BOUND, async {
        while stored_tasks(&served.store).await == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the first request reached the agent");

    let url = served.url.clone();
    let mut waiting =
        tokio::spawn(async move { rpc(&url, "SendMessage", user_message("complete"), None).await });
    // The card and the probes are outside the cap: they answer while the A2A turn is
    // taken, and the waiting request has not reached the agent meanwhile.
    for path in ["/.well-known/agent-card.json", "/healthz", "/readyz"] {
        let status = reqwest::get(format!("{}{path}", served.url)).await.unwrap();
        assert_eq!(status.status(), 200, "{path}");
    }
    assert!(
        futures::FutureExt::now_or_never(&mut waiting).is_none(),
        "the second request was answered while the first held the only turn"
    );
    assert_eq!(stored_tasks(&served.store).await, 1);

    // The first caller gives up: its turn goes to the waiting request.
    hanging.abort();
    let (_, body) = tokio::time::timeout(BOUND, waiting)
        .await
        .expect("the waiting request got its turn")
        .unwrap();
    assert_eq!(
        body["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{}",
        shown(&body)
    );
    served.shutdown.cancel();
}

#[tokio::test]
async fn shutdown_lets_the_request_in_flight_finish_and_ends_streams() {
    let served = serve(InboundAuth::Open, |_| {}, ConnectionLimits::default()).await;
    // An open stream on a task waiting for input.
    let (_, body) = rpc(&served.url, "SendMessage", user_message("pause"), None).await;
    let id = body["result"]["task"]["id"].as_str().unwrap().to_owned();
    let stream = reqwest::Client::new()
        .post(format!("{}/", served.url))
        .header("A2A-Version", "1.0")
        .json(
            &json!({"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": id}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    served.shutdown.cancel();
    let rest = tokio::time::timeout(BOUND, stream.bytes())
        .await
        .expect("the stream ended at shutdown");
    assert!(rest.is_ok(), "{rest:?}");
    tokio::time::timeout(BOUND, served.server)
        .await
        .expect("the server stopped")
        .unwrap()
        .unwrap();
    assert_eq!(stored_tasks(&served.store).await, 1);
}

#[tokio::test]
async fn the_scan_comes_before_the_version_check_reads_the_body() {
    let served = serve(InboundAuth::Open, |_| {}, ConnectionLimits::default()).await;
    // Without A2A-Version the version check parses the body for the id it echoes: the
    // scan must have bounded that body first.
    let zeros = format!(r#"{{"data":[{}0]}}"#, "0,".repeat(479_999));
    let response = reqwest::Client::new()
        .post(format!("{}/", served.url))
        .header("Content-Type", "application/json")
        .body(send_message_rpc("v-1", &zeros))
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["id"], "v-1", "{}", shown(&body));
    assert_eq!(
        reason(&body["error"]["data"]),
        "REQUEST_LIMIT_EXCEEDED",
        "{}",
        shown(&body)
    );
    // Within the limits, the missing header is what is refused, as before.
    let response = reqwest::Client::new()
        .post(format!("{}/", served.url))
        .header("Content-Type", "application/json")
        .body(send_message_rpc("v-2", r#"{"text":"complete"}"#))
        .send()
        .await
        .unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32009, "{}", shown(&body));
    assert_eq!(body["id"], "v-2");
    // The HTTP+JSON refusal is served as `application/json`, as every other error there.
    let response = reqwest::Client::new()
        .post(format!("{}/message:send", served.url))
        .header("A2A-Version", "1.0")
        .header("Content-Type", "application/json")
        .body(send_message_rest(r#"{"data":{"a":1,"a":2}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert_eq!(stored_tasks(&served.store).await, 0);
    served.shutdown.cancel();
}
