//! The `planner-agent` binary: it prints where it listens, serves its signed card, stops
//! on SIGTERM, refuses to listen openly beyond loopback, and refuses bad keys.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

const BINARY: &str = env!("CARGO_BIN_EXE_planner-agent");

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
    assert!(card.get("securitySchemes").is_none(), "open on loopback");
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
        .args(["--listen", "0.0.0.0:0"])
        .arg("--data")
        .arg(dir.path())
        .args(["--key", &key()])
        .env_remove("SAGAPLANE_PLANNER_TOKEN")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("SAGAPLANE_PLANNER_TOKEN"), "{stderr}");

    let public = key().replace("test-planner.jwk", "test-planner.pub.jwk");
    let output = Command::new(BINARY)
        .args(["--listen", "127.0.0.1:0", "--key", &public])
        .arg("--data")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("private key"), "{stderr}");
}
