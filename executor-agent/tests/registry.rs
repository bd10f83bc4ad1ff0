//! The registry accepts only curated cards, and keeps them across restarts.

use std::path::Path;

use executor_agent::Error;
use executor_agent::registry::Registry;
use serde_json::Value;
use shared_types::{SigningIdentity, TrustStore};

fn card(name: &str) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    shared_types::json::parse_strict(
        &std::fs::read_to_string(root.join(format!("agent-cards/{name}.json"))).unwrap(),
    )
    .unwrap()
}

fn platform() -> SigningIdentity {
    SigningIdentity::from_seed([11; 32], Some("platform".into()))
}

fn trust(keys: &[&SigningIdentity]) -> TrustStore {
    let mut store = TrustStore::new();
    for key in keys {
        store.add_jwk(&key.public_jwk()).unwrap();
    }
    store
}

fn signed(name: &str, by: &SigningIdentity) -> Value {
    let mut card = card(name);
    by.sign_in_place(&mut card).unwrap();
    card
}

fn refused(
    result: executor_agent::Result<(
        executor_agent::registry::RegisteredAgent,
        executor_agent::registry_history::Registration,
    )>,
) -> String {
    match result {
        Err(Error::Refused(reason)) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn only_curated_consistent_cards_are_registered_and_they_persist() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.db");
    let registry = Registry::open(&path, trust(&[&platform()])).unwrap();

    let unsigned = refused(registry.register(card("budget"), "admin").await);
    assert!(unsigned.contains("no signature"), "{unsigned}");
    let stranger = SigningIdentity::from_seed([12; 32], Some("stranger".into()));
    let untrusted = refused(
        registry
            .register(signed("budget", &stranger), "admin")
            .await,
    );
    assert!(untrusted.contains("stranger"), "{untrusted}");
    let mut contradictory = card("budget");
    contradictory["capabilities"]["extensions"][0]["params"]["skills"]["budget.reserve"]["class"] =
        "irreversible".into();
    platform().sign_in_place(&mut contradictory).unwrap();
    let reason = refused(registry.register(contradictory, "admin").await);
    assert!(
        reason.contains("irreversible but declares a compensation"),
        "{reason}"
    );
    assert!(
        registry.catalog().unwrap().agents.is_empty(),
        "nothing refused was registered"
    );

    let (agent, registration) = registry
        .register(signed("budget", &platform()), "admin")
        .await
        .unwrap();
    assert_eq!(registration.kind, "first");
    assert_eq!(
        (agent.name.as_str(), agent.signed_by.as_str()),
        ("budget", "platform")
    );
    registry
        .register(signed("payments", &platform()), "admin")
        .await
        .unwrap();
    drop(registry);

    let reopened = Registry::open(&path, trust(&[&platform()])).unwrap();
    let catalog = reopened.catalog().unwrap();
    assert_eq!(
        catalog.agents.keys().collect::<Vec<_>>(),
        ["budget", "payments"]
    );
    assert!(
        catalog
            .declaration("payments", "payments.capture")
            .unwrap()
            .pivot
    );

    // A platform key withdrawn from the configuration withdraws its cards too.
    let other = SigningIdentity::from_seed([13; 32], Some("new-platform".into()));
    let withdrawn = Registry::open(&path, trust(&[&other])).unwrap();
    assert!(withdrawn.catalog().unwrap().agents.is_empty());
}

#[tokio::test]
async fn a_changed_declaration_is_recorded_with_who_when_and_what_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.db");
    let registry = Registry::open(&path, trust(&[&platform()])).unwrap();
    registry
        .register(signed("budget", &platform()), "alice")
        .await
        .unwrap();
    let (_, again) = registry
        .register(signed("budget", &platform()), "bob")
        .await
        .unwrap();
    assert_eq!((again.kind.as_str(), again.changes.len()), ("unchanged", 0));

    let mut changed = card("budget");
    let skills = &mut changed["capabilities"]["extensions"][0]["params"]["skills"];
    skills["budget.reserve"]["class"] = "irreversible".into();
    // Irreversible: no compensation, and so no undo deadline either.
    for member in ["compensation", "undoExpiresAt"] {
        skills["budget.reserve"]
            .as_object_mut()
            .unwrap()
            .remove(member);
    }
    platform().sign_in_place(&mut changed).unwrap();
    let (_, registration) = registry.register(changed, "mallory").await.unwrap();
    assert_eq!(registration.kind, "changed");
    let class = registration
        .changes
        .iter()
        .find(|c| c.skill == "budget.reserve" && c.change == "class")
        .expect("the class change");
    assert_eq!(class.old, Some("compensable".into()));
    assert_eq!(class.new, Some("irreversible".into()));
    assert!(
        registration
            .changes
            .iter()
            .any(|c| c.change == "compensation" && c.new == Some(Value::Null))
    );
    drop(registry);

    // Kept in the state file, newest first.
    let reopened = Registry::open(&path, trust(&[&platform()])).unwrap();
    let history = reopened.history(Some("budget"), 10).unwrap();
    let who: Vec<(&str, &str)> = history
        .iter()
        .map(|r| (r.by.as_str(), r.kind.as_str()))
        .collect();
    assert_eq!(
        who,
        [
            ("mallory", "changed"),
            ("bob", "unchanged"),
            ("alice", "first")
        ]
    );
    assert_eq!(history[0].changes, registration.changes);
    assert!(history[0].at_ms >= history[2].at_ms);
}
