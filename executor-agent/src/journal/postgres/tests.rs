//! The PostgreSQL journal's accepting write against a registry replicas share.

use sagaplane_storage::postgres::{Cached, Postgres, testing};
use shared_types::TrustStore;

use super::PostgresJournal;
use crate::Error;
use crate::journal::{Headers, SagaHeader, SagaLog, conformance};
use crate::registry::Registry;

/// A saga's header validated against the registry up to registration `read`, under a
/// mandate or not.
fn header(saga_id: &str, under_mandate: bool, read: i64) -> SagaHeader {
    let mut header = conformance::header(saga_id);
    if under_mandate {
        header.spec.mandate = Some(crate::mandates::test_hold(
            "test-principal",
            "md_test_registry",
            None,
            40,
        ));
    }
    header.registrations_read = Some(read);
    header
}

/// How many reservations the test mandate holds.
async fn reservations(db: &Postgres) -> i64 {
    db.connection()
        .await
        .unwrap()
        .row(
            "SELECT count(*) FROM mandate_reservations WHERE mandate_id = 'md_test_registry'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn an_accepting_write_validated_before_another_replicas_registration_writes_nothing() {
    const TEST: &str = "journal_begin_against_a_changed_registry";
    let Some(url) = testing::scratch_database(TEST).await else {
        return;
    };
    let db = Postgres::connect(&url, 4).unwrap();
    let journal = PostgresJournal::on(&db).await.unwrap();
    let registry = Registry::on_postgres(&db, TrustStore::new()).await.unwrap();
    assert_eq!(registry.registrations_read(), Some(0));
    // Another replica registers something: the history's newest entry is 1.
    db.connection()
        .await
        .unwrap()
        .run(
            "INSERT INTO registry_history (at_ms, agent, by_caller, kind, changes)
             VALUES (0, 'budget', 'admin', 'card', '[]')",
            &[],
        )
        .await
        .unwrap();

    for under_mandate in [true, false] {
        let stale = header(&format!("stale_{under_mandate}"), under_mandate, 0);
        let refused = journal.begin(&stale, &[]).await;
        assert!(
            matches!(refused, Err(Error::RegistryChanged)),
            "under a mandate: {under_mandate}: {refused:?}"
        );
        assert!(journal.header(&stale.saga_id).await.unwrap().is_none());
    }
    assert_eq!(reservations(&db).await, 0, "no budget taken");

    // Read again, the registry knows registration 1, and a plan validated against it
    // begins.
    registry.refresh().await.unwrap();
    assert_eq!(registry.registrations_read(), Some(1));
    for under_mandate in [true, false] {
        let current = header(&format!("current_{under_mandate}"), under_mandate, 1);
        assert_eq!(journal.begin(&current, &[]).await.unwrap(), 1);
        let stored = journal.header(&current.saga_id).await.unwrap().unwrap();
        assert_eq!(stored.registrations_read, Some(1));
    }
    assert_eq!(reservations(&db).await, 1);
}

#[tokio::test]
async fn a_saga_id_begun_already_is_refused_without_failing_the_transaction_or_taking_budget() {
    const TEST: &str = "journal_begin_a_saga_id_twice";
    let Some(url) = testing::scratch_database(TEST).await else {
        return;
    };
    let db = Postgres::connect(&url, 4).unwrap();
    let journal = PostgresJournal::on(&db).await.unwrap();
    let registry = Registry::on_postgres(&db, TrustStore::new()).await.unwrap();
    let read = registry.registrations_read().unwrap();
    for under_mandate in [true, false] {
        let header = header(&format!("twice_{under_mandate}"), under_mandate, read);
        assert_eq!(journal.begin(&header, &[]).await.unwrap(), 1);
        let again = journal.begin(&header, &[]).await;
        assert!(
            matches!(&again, Err(Error::Journal(why)) if why.contains("begun already")),
            "under a mandate: {under_mandate}: {again:?}"
        );
    }
    assert_eq!(reservations(&db).await, 1, "the budget taken once");
}
