//! Helpers for the CLI tests: running the binary, fixture paths, temporary keys.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;

pub fn root() -> PathBuf {
    sagaplane_examples::workspace_root()
}

pub fn sagaplane(args: &[&str]) -> Output {
    Command::cargo_bin("sagaplane")
        .expect("the sagaplane binary")
        .args(args)
        .output()
        .expect("runs")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// A fresh key pair in `dir`: returns (private, public) paths.
pub fn keygen(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let prefix = dir.join(name);
    let out = sagaplane(&["keygen", "--out", p(&prefix), "--kid", name]);
    assert!(out.status.success(), "keygen: {}", stderr(&out));
    (
        dir.join(format!("{name}.jwk")),
        dir.join(format!("{name}.pub.jwk")),
    )
}

/// Signs the example plan (or another plan file) with `key` into `dir/signed.json`.
pub fn sign_plan(dir: &Path, plan: &Path, key: &Path) -> PathBuf {
    let signed = dir.join("signed.json");
    let out = sagaplane(&[
        "plan",
        "sign",
        p(plan),
        "--key",
        p(key),
        "--out",
        p(&signed),
    ]);
    assert!(out.status.success(), "sign: {}", stderr(&out));
    signed
}

pub fn example_plan() -> PathBuf {
    root().join("examples/plans/supplier-onboarding.json")
}

/// The committed test planner's private and public keys.
pub fn test_planner_key() -> PathBuf {
    root().join("examples/keys/test-planner.jwk")
}

pub fn test_planner_pub() -> PathBuf {
    root().join("examples/keys/test-planner.pub.jwk")
}

/// The committed test principal's public key: it signed `examples/mandates/`, whose
/// `test-mandate.signed.json` the example plans embed (granted to `test-planner`).
pub fn test_principal_pub() -> PathBuf {
    root().join("examples/keys/test-principal.pub.jwk")
}

/// `sagaplane plan validate PLAN` against the demo cards, trusting the test planner and
/// the test principal.
pub fn validate_plan(plan: &Path, extra: &[&str]) -> Output {
    validate_plan_against(plan, &root().join("agent-cards"), extra)
}

/// `sagaplane plan validate PLAN` against the cards in `cards`, trusting the test
/// planner and the test principal.
pub fn validate_plan_against(plan: &Path, cards: &Path, extra: &[&str]) -> Output {
    let trusted = test_planner_pub();
    let principal = test_principal_pub();
    let mut args = vec![
        "plan",
        "validate",
        p(plan),
        "--catalog",
        p(cards),
        "--trust",
        p(&trusted),
        "--principal",
        p(&principal),
    ];
    args.extend_from_slice(extra);
    sagaplane(&args)
}
