//! The `planner-agent` binary: it prints where it listens, serves its signed card, stops
//! on SIGTERM, authenticates its callers unless told `--open` (and then only on
//! loopback), refuses a mandate it may not plan under, and refuses bad keys.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

const BINARY: &str = env!("CARGO_BIN_EXE_planner-agent");

fn mandate(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../examples/mandates/{name}"))
        .display()
        .to_string()
}

fn key() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/keys/test-planner.jwk")
        .display()
        .to_string()
}

#[test]
fn it_serves_its_card_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(BINARY)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--executor",
            "http://127.0.0.1:9",
            "--mandate",
            &mandate("test-mandate.signed.json"),
            "--open",
        ])
        .arg("--data")
        .arg(dir.path())
        .args(["--key", &key()])
        .env_remove("SAGAPLANE_PLANNER_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let card: serde_json::Value = runtime.block_on(async {
        reqwest::get(format!("{url}/.well-known/agent-card.json"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    assert_eq!(card["name"], "test-planner");
    assert_eq!(card["skills"][0]["id"], "plan-and-execute");
    assert_eq!(card["supportedInterfaces"][0]["url"], url.as_str());
    assert!(card["signatures"].is_array(), "the card is signed");
    assert!(card.get("securitySchemes").is_none(), "--open on loopback");
    assert!(dir.path().join("tasks.db").exists());

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
}

#[test]
fn it_will_not_listen_openly_beyond_loopback_or_sign_with_a_public_key() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(BINARY)
        .args([
            "--listen",
            "0.0.0.0:0",
            "--open",
            "--mandate",
            &mandate("test-mandate.signed.json"),
        ])
        .arg("--data")
        .arg(dir.path())
        .args(["--key", &key()])
        .env_remove("SAGAPLANE_PLANNER_TOKEN")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("loopback"), "{stderr}");

    let public = key().replace("test-planner.jwk", "test-planner.pub.jwk");
    let output = Command::new(BINARY)
        .args(["--listen", "127.0.0.1:0", "--key", &public])
        .args(["--open", "--mandate", &mandate("test-mandate.signed.json")])
        .arg("--data")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("private key"), "{stderr}");
}

/// Finding 3 of issue 19: without a way to authenticate callers the planner does not
/// start (it used to serve anyone on loopback). Issue 20: nor with a mandate it may not
/// plan under (expired, signed by its own key, granted to another key, not a mandate).
#[test]
fn it_needs_caller_authentication_and_a_mandate_it_may_plan_under() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let output = Command::new(BINARY)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--executor",
                "http://127.0.0.1:9",
            ])
            .arg("--data")
            .arg(dir.path())
            .args(["--key", &key()])
            .args(extra)
            .env_remove("SAGAPLANE_PLANNER_TOKEN")
            .output()
            .unwrap();
        assert!(!output.status.success(), "{extra:?} started");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let good = mandate("test-mandate.signed.json");
    let stderr = run(&["--mandate", &good]);
    assert!(
        stderr.contains("--caller-token-file") && stderr.contains("--caller"),
        "{stderr}"
    );
    let stderr = run(&[
        "--open",
        "--mandate",
        &mandate("test-mandate-expired.signed.json"),
    ]);
    assert!(stderr.contains("expired at 2020-01-01"), "{stderr}");
    let stderr = run(&[
        "--open",
        "--mandate",
        &mandate("test-mandate-by-planner.signed.json"),
    ]);
    assert!(stderr.contains("own key"), "{stderr}");
    let elsewhere = dir.path().join("granted-elsewhere.json");
    let mut other: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&good).unwrap()).unwrap();
    other["grantees"] = serde_json::json!(["another-planner"]);
    std::fs::write(&elsewhere, other.to_string()).unwrap();
    let stderr = run(&["--open", "--mandate", elsewhere.to_str().unwrap()]);
    assert!(stderr.contains("not granted to this planner"), "{stderr}");
    let stderr = run(&["--open", "--mandate", &key()]);
    assert!(stderr.contains("not a mandate"), "{stderr}");
    let short = dir.path().join("short-token");
    std::fs::write(&short, "short\n").unwrap();
    let stderr = run(&[
        "--mandate",
        &good,
        "--caller-token-file",
        short.to_str().unwrap(),
    ]);
    assert!(stderr.contains("at least 16 characters"), "{stderr}");
}

/// With `--caller-token-file`, the card says so and a request without the token is 401.
#[test]
fn a_caller_token_file_protects_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("caller-token");
    std::fs::write(&token, "a-caller-token-0123456789\n").unwrap();
    let mut child = Command::new(BINARY)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--executor",
            "http://127.0.0.1:9",
        ])
        .args(["--mandate", &mandate("test-mandate.signed.json")])
        .arg("--caller-token-file")
        .arg(&token)
        .arg("--data")
        .arg(dir.path().join("data"))
        .args(["--key", &key()])
        .env_remove("SAGAPLANE_PLANNER_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().trim_start_matches("listening on ").to_owned();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (card, refused, served) = runtime.block_on(async {
        let http = reqwest::Client::new();
        let card: serde_json::Value = http
            .get(format!("{url}/.well-known/agent-card.json"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}});
        let refused = http
            .post(&url)
            .header("A2A-Version", "1.0")
            .json(&body)
            .send()
            .await
            .unwrap()
            .status();
        let served = http
            .post(&url)
            .header("A2A-Version", "1.0")
            .bearer_auth("a-caller-token-0123456789")
            .json(&body)
            .send()
            .await
            .unwrap()
            .status();
        (card, refused, served)
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(card.get("securitySchemes").is_some(), "{card}");
    assert_eq!(refused, 401);
    assert_eq!(served, 200);
}
