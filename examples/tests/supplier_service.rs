//! The supplier tool agents as services: the bearer token is required (401 otherwise),
//! the card is served with the real URL and verifies against the platform key when
//! signed, the ledger survives a restart on the same data directory, and the
//! `supplier-tool` binary starts all six, takes faults and stops on SIGTERM.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use agent_host::sdk::TaskState;
use sagaplane_examples::supplier::{
    AGENTS, RunningTool, ToolClient, ToolSettings, check_ledger, start, task_data, task_text,
};
use serde_json::{Value, json};
use shared_types::{SigningIdentity, TrustStore};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "tool-secret";
const WAIT: Duration = Duration::from_secs(10);

async fn serve(settings: ToolSettings) -> (RunningTool, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let shutdown = CancellationToken::new();
    let tool = start(settings, listener, shutdown.clone()).await.unwrap();
    (tool, shutdown)
}

fn acme() -> Value {
    json!({"legalName": "ACME GmbH", "contactEmail": "ops@acme.example"})
}

#[tokio::test]
async fn every_route_but_the_card_needs_the_bearer_token() {
    let dir = tempfile::tempdir().unwrap();
    let (tool, shutdown) = serve(ToolSettings::new("vendor-registry", dir.path(), TOKEN)).await;
    let _stop = shutdown.drop_guard();

    for token in [None, Some("wrong-token")] {
        let client = ToolClient::new(&tool.url, token).unwrap();
        let error = client
            .call("vendor.create", acme(), Some("k1"), WAIT)
            .await
            .expect_err("refused without the token");
        match error {
            sagaplane_examples::supplier::SupplierError::Host(agent_host::Error::Protocol(e)) => {
                assert_eq!(e.code, agent_host::auth::UNAUTHENTICATED_CODE, "{e:?}")
            }
            other => panic!("expected a 401, got {other:?}"),
        }
        let error = client.ledger().await.expect_err("the ledger is private");
        assert!(error.to_string().contains("401"), "{error}");
    }
    let http = reqwest::Client::new();
    let status = |path: &str, token: Option<&str>| {
        let request = http.get(format!("{}{path}", tool.url));
        let request = match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status("/ledger", None).await, 401);
    assert_eq!(status("/faults", Some("wrong-token")).await, 401);
    assert_eq!(status("/ledger", Some(TOKEN)).await, 200);
    assert_eq!(status("/.well-known/agent-card.json", None).await, 200);

    let ledger = tool.ledger().await.unwrap();
    assert!(
        ledger.effects.is_empty() && ledger.calls == 0,
        "{ledger:#?}"
    );
    // With the token, the same call works.
    let client = ToolClient::new(&tool.url, Some(TOKEN)).unwrap();
    let task = client
        .call("vendor.create", acme(), Some("k1"), WAIT)
        .await
        .unwrap();
    assert_eq!(task.status.state, TaskState::Completed);
}

#[tokio::test]
async fn the_card_carries_the_real_url_and_verifies_against_the_platform_key() {
    let dir = tempfile::tempdir().unwrap();
    let platform = SigningIdentity::from_seed([7; 32], Some("platform".into()));
    let mut trust = TrustStore::new();
    trust.add_jwk(&platform.public_jwk()).unwrap();

    let mut settings = ToolSettings::new("budget", dir.path(), TOKEN);
    settings.signer = Some(platform);
    let (signed, shutdown) = serve(settings).await;
    let _stop = shutdown.drop_guard();
    let client = agent_host::AgentClient::new(&signed.url).unwrap();
    let (card, kid) = client.fetch_verified_card(&trust).await.unwrap();
    assert_eq!(kid, "platform");
    assert_eq!(card, signed.card);
    assert_eq!(card["name"], "budget");
    let interfaces = card["supportedInterfaces"].as_array().unwrap();
    assert_eq!(interfaces.len(), 2);
    for interface in interfaces {
        assert_eq!(interface["url"], signed.url.as_str());
    }
    assert!(signed.url.starts_with("http://127.0.0.1:") && !signed.url.ends_with(":0"));
    assert!(
        card.pointer("/securitySchemes/bearer/httpAuthSecurityScheme")
            .is_some()
    );
    // What the executor's registry reads from it: both skills, with their declarations.
    let (name, agent) = shared_types::catalog::agent_from_card(&card).unwrap();
    assert_eq!(name, "budget");
    assert_eq!(
        agent.skills.keys().collect::<Vec<_>>(),
        ["budget.release", "budget.reserve"]
    );

    // Another key's trust store refuses it; an unsigned agent's card verifies with none.
    let mut other = TrustStore::new();
    other
        .add_jwk(&SigningIdentity::from_seed([8; 32], Some("platform".into())).public_jwk())
        .unwrap();
    assert!(client.fetch_verified_card(&other).await.is_err());
    let (unsigned, shutdown) = serve(ToolSettings::new("mailer", dir.path(), TOKEN)).await;
    let _stop = shutdown.drop_guard();
    let unsigned_client = agent_host::AgentClient::new(&unsigned.url).unwrap();
    assert!(unsigned_client.fetch_verified_card(&trust).await.is_err());
    assert_eq!(
        unsigned_client.fetch_card().await.unwrap()["name"],
        "mailer"
    );
}

#[tokio::test]
async fn the_ledger_survives_a_restart_on_the_same_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (tool, shutdown) = serve(ToolSettings::new("vendor-registry", dir.path(), TOKEN)).await;
    let client = ToolClient::new(&tool.url, Some(TOKEN)).unwrap();
    let created = client
        .call("vendor.create", acme(), Some("sg:s0"), WAIT)
        .await
        .unwrap();
    let vendor = task_data(&created).unwrap();
    let undo = json!({"forwardKey": "sg-2:s0"});
    client
        .call("vendor.archive", undo, Some("sg-2:s0:undo"), WAIT)
        .await
        .unwrap();
    let before = client.ledger().await.unwrap();
    shutdown.cancel();
    tool.stopped().await.unwrap();

    let (tool, shutdown) = serve(ToolSettings::new("vendor-registry", dir.path(), TOKEN)).await;
    let _stop = shutdown.drop_guard();
    let client = ToolClient::new(&tool.url, Some(TOKEN)).unwrap();
    assert_eq!(client.ledger().await.unwrap(), before);
    // The stored result is replayed, the tombstone still refuses the late call, and new
    // ids continue where the first run stopped.
    let replayed = client
        .call("vendor.create", acme(), Some("sg:s0"), WAIT)
        .await
        .unwrap();
    assert_eq!(task_data(&replayed).unwrap(), vendor);
    let late = client
        .call("vendor.create", acme(), Some("sg-2:s0"), WAIT)
        .await
        .unwrap();
    assert_eq!(
        late.status.state,
        TaskState::Rejected,
        "{:?}",
        task_text(&late)
    );
    let next = client
        .call("vendor.create", acme(), Some("sg-3:s0"), WAIT)
        .await
        .unwrap();
    assert_eq!(task_data(&next).unwrap(), json!({"vendorId": "v_0002"}));
    let after = client.ledger().await.unwrap();
    assert_eq!(after.forwards("vendor.create").len(), 2, "{after:#?}");
    assert_eq!(after.calls, before.calls + 3);
    assert!(check_ledger(&after).is_empty());
    // The A2A tasks survived too.
    let task = client
        .a2a()
        .get_task(
            &agent_host::OutboundCall {
                bearer: Some(TOKEN.into()),
                ..Default::default()
            },
            &created.id,
        )
        .await
        .unwrap();
    assert_eq!(task.status.state, TaskState::Completed);
}

fn write_platform_key(dir: &Path) -> (std::path::PathBuf, TrustStore) {
    let platform = SigningIdentity::from_seed([9; 32], Some("platform".into()));
    let path = dir.join("platform.jwk");
    std::fs::write(
        &path,
        serde_json::to_string(&platform.private_jwk()).unwrap(),
    )
    .unwrap();
    let mut trust = TrustStore::new();
    trust.add_jwk(&platform.public_jwk()).unwrap();
    (path, trust)
}

#[tokio::test]
async fn the_binary_runs_all_six_signed_with_faults_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (key, trust) = write_platform_key(dir.path());
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_supplier-tool"))
        .args(["--agent", "all", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("data"))
        .arg("--token-file")
        .arg(&token_file)
        .arg("--sign-card-with")
        .arg(&key)
        .args(["--fail-at", "release", "--fault", "email.send=unavailable"])
        .env_remove("SUPPLIER_TOOL_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut urls = Vec::new();
    for agent in AGENTS {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("one line per agent");
        let (name, url) = line.split_once(" listening on ").expect(&line);
        assert_eq!(name, agent);
        urls.push(url.to_owned());
    }
    for (agent, url) in AGENTS.iter().zip(&urls) {
        let client = agent_host::AgentClient::new(url).unwrap();
        let (card, _) = client.fetch_verified_card(&trust).await.unwrap();
        assert_eq!(card["name"], *agent);
        assert_eq!(card["supportedInterfaces"][0]["url"], url.as_str());
    }
    let faults = |i: usize| ToolClient::new(&urls[i], Some(TOKEN)).unwrap();
    let expected = [
        (1, json!({"budget.release": "fail-always"})),
        (3, json!({"compliance.check": "decline"})),
        (5, json!({"email.send": "unavailable"})),
        (0, json!({})),
    ];
    for (i, want) in expected {
        let set = faults(i).faults().await.unwrap();
        assert_eq!(serde_json::to_value(set).unwrap(), want, "{}", AGENTS[i]);
    }
    let task = faults(3)
        .call(
            "compliance.check",
            json!({"vendorId": "v_1", "tenantId": "t_1"}),
            Some("k"),
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(task.status.state, TaskState::Failed);

    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
    for agent in AGENTS {
        assert!(
            dir.path()
                .join("data")
                .join(format!("{agent}.ledger.db"))
                .is_file()
        );
    }
}

#[tokio::test]
async fn the_binary_refuses_unusable_settings() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str], token: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_supplier-tool"));
        command.args(args).arg("--data").arg(dir.path());
        command.env_remove("SUPPLIER_TOOL_TOKEN");
        if let Some(token) = token {
            command.env("SUPPLIER_TOOL_TOKEN", token);
        }
        let output = command.output().unwrap();
        assert!(!output.status.success(), "{args:?} should fail");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let error = run(&["--agent", "budget"], None);
    assert!(error.contains("SUPPLIER_TOOL_TOKEN"), "{error}");
    let error = run(&["--agent", "warehouse"], Some(TOKEN));
    assert!(error.contains("unknown agent"), "{error}");
    let error = run(
        &["--agent", "budget", "--fault", "email.send=hang"],
        Some(TOKEN),
    );
    assert!(error.contains("no skill"), "{error}");
    let error = run(
        &["--agent", "all", "--fault", "email.send=often"],
        Some(TOKEN),
    );
    assert!(error.contains("unknown fault mode"), "{error}");
    let error = run(&["--agent", "all", "--fail-at", "somewhere"], Some(TOKEN));
    assert!(error.contains("--fail-at"), "{error}");
}

/// The binary takes the serving flags every agent takes: with a 1 s header-read
/// timeout, a connection that sends half a request head is closed.
#[tokio::test]
async fn the_binary_cuts_off_a_half_sent_head_after_its_header_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_supplier-tool"))
        .args(["--agent", "budget", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("data"))
        .args(["--header-read-timeout-secs", "1", "--max-connections", "8"])
        .env("SUPPLIER_TOOL_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().expect("its address");
    let (_, url) = line.split_once(" listening on ").expect(&line);
    let address = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"POST / HTTP/1.1\r\nHost: x\r\nA2A-Ver")
        .await
        .unwrap();
    let mut answer = Vec::new();
    // Well before the default timeout (10 s) would close it: the flag was taken.
    let closed =
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    assert!(
        closed.is_ok(),
        "the half-sent head still held its connection after 5 s"
    );
    child.kill().await.unwrap();
}
