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
    let history = reopened.history(Some("budget"), 10).await.unwrap();
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

/// Two replicas on one PostgreSQL database: what one registers, the other uses from its
/// next read on, with its history; a replaced card replaces the other's entry too.
#[tokio::test]
async fn a_card_registered_on_one_replica_is_in_the_others_registry_from_its_next_read() {
    use sagaplane_storage::postgres::{Postgres, testing::scratch_database};
    let Some(url) = scratch_database("registry_across_replicas").await else {
        return;
    };
    let one = Registry::on_postgres(&Postgres::connect(&url, 2).unwrap(), trust(&[&platform()]))
        .await
        .unwrap();
    let two = Registry::on_postgres(&Postgres::connect(&url, 2).unwrap(), trust(&[&platform()]))
        .await
        .unwrap();
    assert!(
        two.refresh().await.unwrap().is_empty(),
        "nothing registered yet"
    );

    one.register(signed("budget", &platform()), "admin")
        .await
        .unwrap();
    assert!(two.agent("budget").is_none(), "not read yet");
    assert_eq!(two.refresh().await.unwrap(), vec!["budget".to_owned()]);
    let seen = two
        .agent("budget")
        .expect("registered on the other replica");
    assert_eq!(seen.declarations, one.agent("budget").unwrap().declarations);
    assert!(two.catalog().unwrap().agents.contains_key("budget"));
    assert!(two.refresh().await.unwrap().is_empty(), "read once");

    // Replaced on the second, seen as replaced on the first.
    let mut changed = card("budget");
    changed["description"] = Value::from("the budget agent, described anew");
    platform().sign_in_place(&mut changed).unwrap();
    two.register(changed, "operator").await.unwrap();
    assert_eq!(one.refresh().await.unwrap(), vec!["budget".to_owned()]);
    assert_eq!(
        one.agent("budget").unwrap().declarations.description,
        "the budget agent, described anew"
    );
    let history = one.history(Some("budget"), 10).await.unwrap();
    let who: Vec<&str> = history.iter().map(|r| r.by.as_str()).collect();
    assert_eq!(who, ["operator", "admin"]);

    // A card whose key is no longer trusted is left out of a replica that reads it.
    let untrusting = Registry::on_postgres(
        &Postgres::connect(&url, 2).unwrap(),
        trust(&[&SigningIdentity::from_seed([13; 32], None)]),
    )
    .await
    .unwrap();
    assert!(untrusting.agent("budget").is_none());
}

#[tokio::test]
async fn a_card_whose_integers_came_through_protobuf_as_doubles_registers_as_signed() {
    // An SDK that serves its card through protocol-buffer types writes `5000` as `5000.0`.
    let dir = tempfile::tempdir().unwrap();
    let registry = Registry::open(&dir.path().join("registry.db"), trust(&[&platform()])).unwrap();
    let mut card = signed("payments", &platform());
    let text = serde_json::to_string(&card).unwrap();
    let doubled = text
        .replace("\"timeoutMs\":5000", "\"timeoutMs\":5000.0")
        .replace("\"maxAttempts\":3", "\"maxAttempts\":3.0");
    assert_ne!(text, doubled, "the card has integers to turn into doubles");
    card = serde_json::from_str(&doubled).unwrap();
    let (agent, _) = registry.register(card, "admin").await.unwrap();
    let declared = &agent.declarations.skills["payments.capture"];
    assert_eq!(declared.timeout_ms, Some(5000));
    assert_eq!(declared.retry.unwrap().max_attempts, 3);
}
