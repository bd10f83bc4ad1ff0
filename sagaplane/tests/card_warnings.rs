//! `cards sign` and `cards verify` say when a card's bound-from skills declare no
//! `outputSchema` (issue 19, finding 5): accepted, but pointers into their results cannot
//! be checked before the first effect.

mod common;

use common::*;

#[test]
fn a_card_without_output_schemas_is_signed_and_verified_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (platform, platform_pub) = keygen(dir.path(), "platform");
    let card = root().join("agent-cards/vendor-registry.json");
    let signed = dir.path().join("signed.json");
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
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));

    let mut bare: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&card).unwrap()).unwrap();
    let skills = &mut bare["capabilities"]["extensions"][0]["params"]["skills"];
    for skill in ["vendor.create", "vendor.archive"] {
        skills[skill]
            .as_object_mut()
            .unwrap()
            .remove("outputSchema");
    }
    let bare_path = dir.path().join("bare.json");
    std::fs::write(&bare_path, bare.to_string()).unwrap();
    let out = sagaplane(&[
        "cards",
        "sign",
        p(&bare_path),
        "--key",
        p(&platform),
        "--out",
        p(&signed),
    ]);
    assert!(
        out.status.success(),
        "signed all the same: {}",
        stderr(&out)
    );
    let warned = stderr(&out);
    assert!(
        warned.contains("warning: vendor.create declares no outputSchema"),
        "{warned}"
    );
    assert!(!warned.contains("vendor.archive"), "only an undo: {warned}");

    let out = sagaplane(&["cards", "verify", p(&signed), "--trust", p(&platform_pub)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("verified: agent card vendor-registry"));
    assert!(
        stderr(&out).contains("warning: vendor.create declares no outputSchema"),
        "{}",
        stderr(&out)
    );
}
