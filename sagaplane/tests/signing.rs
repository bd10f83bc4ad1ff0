//! keygen → plan sign → plan verify, tampering, untrusted signers, and card signing.

mod common;

use common::*;

#[test]
fn keygen_sign_verify_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let (private, public) = keygen(dir.path(), "planner");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the private key is readable by its owner only");
    }
    let public_jwk: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&public).unwrap()).unwrap();
    assert!(
        public_jwk.get("d").is_none(),
        "the public file has no private part"
    );
    assert_eq!(public_jwk["kid"], "planner");

    let signed = sign_plan(dir.path(), &example_plan(), &private);
    let out = sagaplane(&["plan", "verify", p(&signed), "--trust", p(&public)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("signed by trusted key planner"));

    // keygen refuses to overwrite a key.
    let again = sagaplane(&["keygen", "--out", p(&dir.path().join("planner"))]);
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("--force"), "{}", stderr(&again));
}

/// Flipping a bit of any byte of the signed plan never verifies: the file either stops
/// being JSON (exit 2), or fails with SIGNATURE_INVALID — or, inside the signature's own
/// header, names a key nobody trusts.
#[test]
fn flipping_any_byte_fails_verification() {
    let dir = tempfile::tempdir().unwrap();
    let (private, public) = keygen(dir.path(), "planner");
    let signed = sign_plan(dir.path(), &example_plan(), &private);
    let bytes = std::fs::read(&signed).unwrap();
    let signatures_at = String::from_utf8_lossy(&bytes)
        .find("\"signatures\"")
        .unwrap();
    let tampered = dir.path().join("tampered.json");
    let mut checked_content = 0;
    // Every 5th byte through the CLI (each is a process); every byte is covered by the
    // library-level test in shared-types.
    for i in (0..bytes.len()).step_by(5) {
        let mut copy = bytes.clone();
        copy[i] ^= 0x01;
        std::fs::write(&tampered, &copy).unwrap();
        let out = sagaplane(&["plan", "verify", p(&tampered), "--trust", p(&public)]);
        let err = stderr(&out);
        match out.status.code() {
            Some(2) => assert!(err.contains("invalid JSON"), "byte {i}: {err}"),
            Some(1) if i < signatures_at => {
                assert!(err.contains("SIGNATURE_INVALID"), "byte {i}: {err}");
                checked_content += 1;
            }
            Some(1) => assert!(
                err.contains("SIGNATURE_INVALID") || err.contains("SIGNER_UNTRUSTED"),
                "byte {i}: {err}"
            ),
            other => panic!("byte {i}: flipped plan verified or crashed ({other:?}): {err}"),
        }
    }
    assert!(
        checked_content > 50,
        "most flips in the content still parse as JSON"
    );
}

#[test]
fn a_plan_signed_by_an_untrusted_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, trusted) = keygen(dir.path(), "planner");
    let (stranger, _) = keygen(dir.path(), "stranger");
    let signed = sign_plan(dir.path(), &example_plan(), &stranger);
    let out = sagaplane(&["plan", "verify", p(&signed), "--trust", p(&trusted)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("SIGNER_UNTRUSTED"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("stranger"),
        "names the signer: {}",
        stderr(&out)
    );
}

#[test]
fn cards_sign_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (platform, platform_pub) = keygen(dir.path(), "platform");
    let (_, other_pub) = keygen(dir.path(), "other");
    let card = root().join("agent-cards/budget.json");
    let signed = dir.path().join("budget.signed.json");
    let out = sagaplane(&[
        "cards",
        "sign",
        p(&card),
        "--key",
        p(&platform),
        "--out",
        p(&signed),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));

    let out = sagaplane(&["cards", "verify", p(&signed), "--trust", p(&platform_pub)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("agent card budget"),
        "{}",
        stdout(&out)
    );

    let out = sagaplane(&["cards", "verify", p(&signed), "--trust", p(&other_pub)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("SIGNER_UNTRUSTED"));

    let out = sagaplane(&["cards", "verify", p(&card), "--trust", p(&platform_pub)]);
    assert_eq!(out.status.code(), Some(1), "an unsigned card is refused");
    assert!(
        stderr(&out).contains("SIGNATURE_INVALID"),
        "{}",
        stderr(&out)
    );

    // A card whose declarations contradict themselves is not signed.
    let mut bad: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&card).unwrap()).unwrap();
    bad["capabilities"]["extensions"][0]["params"]["skills"]["budget.reserve"]["class"] =
        "irreversible".into();
    let bad_path = dir.path().join("bad.json");
    std::fs::write(&bad_path, bad.to_string()).unwrap();
    let out = sagaplane(&["cards", "sign", p(&bad_path), "--key", p(&platform)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("irreversible but declares a compensation"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn signing_with_a_public_or_foreign_key_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (_, public) = keygen(dir.path(), "planner");
    let out = sagaplane(&["plan", "sign", p(&example_plan()), "--key", p(&public)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("public key"), "{}", stderr(&out));

    let rsa = dir.path().join("rsa.jwk");
    std::fs::write(&rsa, r#"{"kty":"RSA","n":"0vx7","e":"AQAB"}"#).unwrap();
    let out = sagaplane(&["plan", "sign", p(&example_plan()), "--key", p(&rsa)]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("rsa.jwk") && err.contains("JSON Web Key"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
}
