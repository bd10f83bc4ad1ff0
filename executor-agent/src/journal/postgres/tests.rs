//! The PostgreSQL journal's accepting write against a registry replicas share.

use sagaplane_storage::postgres::{Cached, Postgres, ToSql, testing};
use shared_types::TrustStore;

use super::PostgresJournal;
use crate::Error;
use crate::journal::{Headers, Ownership, SagaHeader, SagaLog, conformance};
use crate::registry::Registry;

/// A saga's header validated against the registry up to registration `read`, under a
/// mandate or not.
fn header(saga_id: &str, under_mandate: bool, read: i64) -> SagaHeader {
    let mut header = conformance::header(saga_id);
    if under_mandate {
        std::sync::Arc::make_mut(&mut header.spec).mandate = Some(crate::mandates::test_hold(
            "test-principal",
            "md_test_registry",
            None,
            40,
        ));
    }
    header.registrations_read = Some(read);
    header
}

/// The one number `sql` answers.
async fn number(db: &Postgres, sql: &str, params: &[&(dyn ToSql + Sync)]) -> i64 {
    db.connection()
        .await
        .unwrap()
        .row(sql, params)
        .await
        .unwrap()
        .get(0)
}

/// The text of each row `sql` answers.
async fn texts(client: &(impl Cached + Sync), sql: &str) -> Vec<String> {
    client
        .rows(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// How many reservations the test mandate holds.
async fn reservations(db: &Postgres) -> i64 {
    number(
        db,
        "SELECT count(*) FROM mandate_reservations WHERE mandate_id = 'md_test_registry'",
        &[],
    )
    .await
}

#[tokio::test]
async fn an_accepting_write_validated_before_another_replicas_registration_writes_nothing() {
    let Some((db, journal)) =
        conformance::postgres_journal("journal_begin_against_a_changed_registry").await
    else {
        return;
    };
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
    let Some((db, journal)) = conformance::postgres_journal("journal_begin_a_saga_id_twice").await
    else {
        return;
    };
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

/// A saga's lease, as stored.
async fn lease_of(db: &Postgres, saga_id: &str) -> i64 {
    number(
        db,
        "SELECT lease_until_ms FROM sagas WHERE saga_id = $1",
        &[&saga_id],
    )
    .await
}

/// The deadlock this prevents: a mandate's transaction ending sagas `a` then `b` while the
/// renewal locked `b` then waited for `a`. A renewal that waits for no row is never in
/// such a cycle.
#[tokio::test]
async fn a_renewal_skips_a_saga_whose_row_another_transaction_holds_instead_of_waiting() {
    let Some((db, journal)) =
        conformance::postgres_journal("journal_renewal_waits_for_no_row").await
    else {
        return;
    };
    for saga_id in ["renewed", "locked"] {
        journal
            .begin(&conformance::header(saga_id), &[])
            .await
            .unwrap();
    }
    let before = lease_of(&db, "locked").await;
    let later = chrono::Utc::now().timestamp_millis() + 3_600_000;

    // Another transaction holds `locked`'s row as an end's update does.
    let mut holding = db.connection().await.unwrap();
    let end = holding.transaction().await.unwrap();
    end.run(
        "UPDATE sagas SET finished_ms = finished_ms WHERE saga_id = 'locked'",
        &[],
    )
    .await
    .unwrap();

    let renewal = tokio::time::timeout(std::time::Duration::from_secs(60), journal.renew(later))
        .await
        .expect("the renewal waited for a row another transaction holds");
    assert_eq!(renewal.unwrap(), 1, "only the saga nobody holds is renewed");
    assert!(lease_of(&db, "renewed").await > before);
    assert_eq!(
        lease_of(&db, "locked").await,
        before,
        "skipped, not waited for"
    );

    // Once the other transaction is over, the next renewal extends it.
    end.rollback().await.unwrap();
    assert_eq!(journal.renew(later).await.unwrap(), 2);
    assert!(lease_of(&db, "locked").await > before);
}

/// The pages the server read to run `CLAIM_LAPSED` once (its generic plan, as a pooled
/// connection's cached statement runs after its first uses), rolled back.
async fn pages_read_by_a_claim(db: &Postgres) -> (u64, String) {
    let mut conn = db.connection().await.unwrap();
    let tx = conn.transaction().await.unwrap();
    tx.batch_execute(&format!(
        "SET LOCAL plan_cache_mode = force_generic_plan;
         PREPARE claim (TEXT, BIGINT, BIGINT, BIGINT, BIGINT) AS {}",
        super::CLAIM_LAPSED
    ))
    .await
    .unwrap();
    let lines = texts(
        &tx,
        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE claim ('claimer', 10, 1, 100, 1)",
    )
    .await;
    tx.rollback().await.unwrap();
    let plan = lines.join("\n");
    // The statement's first line of buffers counts all it read.
    let pages = plan
        .lines()
        .find_map(|line| line.trim().strip_prefix("Buffers: shared hit="))
        .and_then(|hits| hits.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no buffer count in the plan:\n{plan}"));
    (pages, plan)
}

#[tokio::test]
async fn a_claim_reads_the_sagas_still_running_not_every_saga_kept() {
    let Some((db, _journal)) =
        conformance::postgres_journal("journal_claim_reads_unfinished").await
    else {
        return;
    };
    // Many sagas finished and kept, as for the days before they are forgotten, and one
    // that lapsed.
    db.connection()
        .await
        .unwrap()
        .batch_execute(
            "INSERT INTO sagas (saga_id, task_id, header, finished, finished_ms, owner, epoch,
                                lease_until_ms)
             SELECT 'done_' || i, 'task_' || i, repeat('h', 200), TRUE, i, 'gone', 1, 0
             FROM generate_series(1, 20000) AS i;
             INSERT INTO sagas (saga_id, task_id, header, finished, finished_ms, owner, epoch,
                                lease_until_ms)
             VALUES ('lapsed', 'task_lapsed', '{}', FALSE, 0, 'gone', 1, 0);
             ANALYZE sagas;",
        )
        .await
        .unwrap();
    let (pages, plan) = pages_read_by_a_claim(&db).await;
    assert!(plan.contains("rows=1 loops=1"), "{plan}");
    // Read in the order claimed from the running sagas' index: nothing sorted, and no
    // walk along every saga's key, which statistics taken while more ran can choose
    // (5,000 rows filtered out, 3,227 pages, at each renewal of each replica, in the
    // whole-path benchmark's database before this index).
    assert!(
        plan.contains("sagas_unfinished_by_id") && !plan.contains("Sort"),
        "{plan}"
    );
    assert!(pages < 50, "{pages} pages read:\n{plan}");
}

#[tokio::test]
async fn a_journal_of_schema_version_4_keeps_its_entries_keyed_by_saga_with_no_foreign_key() {
    const TEST: &str = "journal_entries_keyed_by_saga";
    let Some(url) = testing::scratch_database(TEST).await else {
        return;
    };
    let db = Postgres::connect(&url, 2).unwrap();
    // A saga and two appends, written by a release at version 4.
    db.migrate("journal", &super::MIGRATIONS[..4])
        .await
        .unwrap();
    let old = conformance::header("old");
    let conn = db.connection().await.unwrap();
    conn.run(
        "INSERT INTO sagas (saga_id, task_id, header, finished_ms, owner, epoch, lease_until_ms)
         VALUES ('old', $1, $2, 0, NULL, 1, 0)",
        &[&old.task_id, &super::encode(&old).unwrap()],
    )
    .await
    .unwrap();
    for n in [1, 2] {
        let append = super::encode(&vec![conformance::event(n)]).unwrap();
        conn.run(
            "INSERT INTO entries (saga_id, body) VALUES ('old', $1)",
            &[&append],
        )
        .await
        .unwrap();
    }

    let journal = PostgresJournal::on(&db).await.unwrap();
    let (header, entries) = journal.load("old").await.unwrap().unwrap();
    assert_eq!(header.saga_id, "old");
    assert_eq!(entries, [conformance::event(1), conformance::event(2)]);

    // Each entry is written to one index, the one every read takes, and checked by its
    // saga's fence, not again by a key.
    let indexes = texts(
        &conn,
        "SELECT indexdef FROM pg_indexes WHERE tablename = 'entries'
           AND schemaname = current_schema()",
    )
    .await;
    assert_eq!(indexes.len(), 1, "{indexes:?}");
    assert!(
        indexes[0].contains("UNIQUE INDEX entries_pkey"),
        "{indexes:?}"
    );
    assert!(indexes[0].contains("(saga_id, seq)"), "{indexes:?}");
    let foreign: i64 = conn
        .row(
            "SELECT count(*) FROM pg_constraint
             WHERE conrelid = 'entries'::regclass AND contype = 'f'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(foreign, 0);
}
