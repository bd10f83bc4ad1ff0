//! Our signatures verify with implementations we did not write: Python's `rfc8785`
//! canonicaliser and `cryptography`'s Ed25519, run from the test suite.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

/// The interpreter of the interop virtualenv (`scripts/setup-interop` creates it), or
/// `SAGAPLANE_PYTHON`.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SAGAPLANE_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = root().join(".interop/venv/bin/python");
    assert!(
        venv.exists(),
        "{} is missing: run scripts/setup-interop (scripts/test does it for you)",
        venv.display()
    );
    venv
}

fn verify_with_python(signed: &std::path::Path, public: &std::path::Path) -> (bool, String) {
    let script = root().join("tests/interop/python/verify_jws.py");
    let out = Command::new(python())
        .arg(script)
        .arg(signed)
        .arg(public)
        .output()
        .expect("python runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn python_verifies_our_plan_and_card_signatures() {
    let dir = tempfile::tempdir().unwrap();
    let (private, public) = keygen(dir.path(), "planner");
    let signed = sign_plan(dir.path(), &example_plan(), &private);
    let (ok, text) = verify_with_python(&signed, &public);
    assert!(ok, "python: {text}");
    assert_eq!(text.trim(), "ok planner");

    let card = dir.path().join("card.json");
    let out = sagaplane(&[
        "cards",
        "sign",
        p(&root().join("agent-cards/compliance-registry.json")),
        "--key",
        p(&private),
        "--out",
        p(&card),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (ok, text) = verify_with_python(&card, &public);
    assert!(ok, "python: {text}");
}

#[test]
fn python_rejects_a_changed_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (private, public) = keygen(dir.path(), "planner");
    let signed = sign_plan(dir.path(), &example_plan(), &private);
    let text = std::fs::read_to_string(&signed).unwrap();
    let changed = text.replacen("ACME GmbH", "ACME GmbI", 1);
    assert_ne!(text, changed);
    std::fs::write(&signed, changed).unwrap();
    let (ok, out) = verify_with_python(&signed, &public);
    assert!(!ok, "python accepted a changed plan: {out}");
    assert!(out.contains("does not verify"), "{out}");
}
