//! `sagaplane mandate sign|verify|revoke`: a principal's grant, checked before it is
//! signed, verified only against a principal's key, and every bad input refused with a
//! clear line and its exit status.

mod common;

use common::*;

fn template() -> std::path::PathBuf {
    root().join("examples/mandates/test-mandate.json")
}

#[test]
fn a_signed_mandate_verifies_only_against_its_principal_and_not_once_changed() {
    let dir = tempfile::tempdir().unwrap();
    let (principal, principal_pub) = keygen(dir.path(), "acme");
    let (_, other_pub) = keygen(dir.path(), "someone");
    let signed = dir.path().join("mandate.signed.json");
    let out = sagaplane(&[
        "mandate",
        "sign",
        p(&template()),
        "--key",
        p(&principal),
        "--out",
        p(&signed),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));

    let out = sagaplane(&[
        "mandate",
        "verify",
        p(&signed),
        "--principal",
        p(&principal_pub),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("md_test_supplier_onboarding"),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("key acme"), "{}", stdout(&out));

    let out = sagaplane(&[
        "mandate",
        "verify",
        p(&signed),
        "--principal",
        p(&other_pub),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not a trusted principal"),
        "{}",
        stderr(&out)
    );

    // The budget raised after signing.
    let text = std::fs::read_to_string(&signed)
        .unwrap()
        .replace("100000000", "900000000");
    let raised = dir.path().join("raised.json");
    std::fs::write(&raised, text).unwrap();
    let out = sagaplane(&[
        "mandate",
        "verify",
        p(&raised),
        "--principal",
        p(&principal_pub),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("does not match"), "{}", stderr(&out));

    // A revocation without an executor is printed, signed by the principal.
    let out = sagaplane(&["mandate", "revoke", p(&signed), "--key", p(&principal)]);
    assert!(out.status.success(), "{}", stderr(&out));
    let revocation: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        revocation["revokedMandateId"],
        "md_test_supplier_onboarding"
    );
    assert!(revocation["signatures"][0]["protected"].is_string());
}

#[test]
fn bad_mandates_are_refused_before_anything_is_signed() {
    let dir = tempfile::tempdir().unwrap();
    let (principal, _) = keygen(dir.path(), "acme");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let base: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(template()).unwrap()).unwrap();
    let with = |change: &dyn Fn(&mut serde_json::Value)| {
        let mut m = base.clone();
        change(&mut m);
        m.to_string()
    };
    let cases = [
        (
            "not-json.json",
            "{\"mandateId\": ".to_owned(),
            "invalid JSON",
        ),
        (
            "duplicate.json",
            "{\"mandateId\": \"a\", \"mandateId\": \"b\"}".to_owned(),
            "duplicate",
        ),
        (
            "float.json",
            with(&|m| m["budget"]["amountMinor"] = serde_json::json!(10.5)),
            "not a mandate",
        ),
        (
            "unknown.json",
            with(&|m| m["maxSpend"] = serde_json::json!(1)),
            "maxSpend",
        ),
        (
            "window.json",
            with(&|m| m["notAfter"] = m["notBefore"].clone()),
            "window is empty",
        ),
        (
            "nobody.json",
            with(&|m| m["grantees"] = serde_json::json!([])),
            "no grantee",
        ),
        (
            "cap.json",
            with(&|m| m["perSaga"]["amountMinor"] = serde_json::json!(200_000_000)),
            "more than the whole budget",
        ),
    ];
    for (name, text, expected) in cases {
        let path = write(name, &text);
        let out = sagaplane(&["mandate", "sign", p(&path), "--key", p(&principal)]);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", stderr(&out));
        assert!(stderr(&out).contains(expected), "{name}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{name}: nothing is signed");
    }
    // A public key cannot sign.
    let out = sagaplane(&[
        "mandate",
        "sign",
        p(&template()),
        "--key",
        p(&dir.path().join("acme.pub.jwk")),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("public key"), "{}", stderr(&out));
}
