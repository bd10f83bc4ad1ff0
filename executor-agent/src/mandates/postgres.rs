//! The mandates' tables in PostgreSQL: their schema, and what `MandateBook` reads and
//! writes there (the journal's accepting and finishing writes reserve and settle in them,
//! `journal/postgres.rs`).

use sagaplane_storage::postgres::{Cached, DriverError, Migration, Postgres, failed};

use super::MandateRows;
use crate::error::{Error, Result};

/// The same tables in PostgreSQL (`journal/postgres.rs` reserves and settles in them).
pub(crate) const POSTGRES_MIGRATIONS: &[Migration] = &[Migration {
    what: "mandates, their running totals, reservations and revocations",
    sql: "CREATE TABLE IF NOT EXISTS mandates (
                  principal_key   TEXT NOT NULL,
                  mandate_id      TEXT NOT NULL,
                  document_sha256 TEXT NOT NULL,
                  principal       TEXT NOT NULL,
                  currency        TEXT NOT NULL,
                  budget_minor    BIGINT NOT NULL,
                  max_sagas       BIGINT,
                  used_minor      BIGINT NOT NULL DEFAULT 0,
                  sagas           BIGINT NOT NULL DEFAULT 0,
                  PRIMARY KEY (principal_key, mandate_id)
              );
              CREATE TABLE IF NOT EXISTS mandate_reservations (
                  saga_id        TEXT PRIMARY KEY,
                  principal_key  TEXT NOT NULL,
                  mandate_id     TEXT NOT NULL,
                  reserved_minor BIGINT NOT NULL,
                  spent_minor    BIGINT,
                  at_ms          BIGINT NOT NULL
              );
              CREATE INDEX IF NOT EXISTS reservations_by_mandate
                  ON mandate_reservations (principal_key, mandate_id);
              CREATE TABLE IF NOT EXISTS mandate_revocations (
                  principal_key TEXT NOT NULL,
                  mandate_id    TEXT NOT NULL,
                  revoked_at    TEXT NOT NULL,
                  document      TEXT NOT NULL,
                  PRIMARY KEY (principal_key, mandate_id)
              );",
}];

fn store(what: &str) -> impl Fn(DriverError) -> Error + '_ {
    move |e| Error::from(failed(what, &e))
}

pub(crate) async fn is_revoked(
    db: &Postgres,
    principal_key: &str,
    mandate_id: &str,
) -> Result<bool> {
    let conn = db.connection().await?;
    Ok(conn
        .row_opt(
            "SELECT 1 FROM mandate_revocations WHERE principal_key = $1 AND mandate_id = $2",
            &[&principal_key, &mandate_id],
        )
        .await
        .map_err(store("cannot read a mandate's revocation"))?
        .is_some())
}

/// Records a verified revocation (the first one of a mandate stands).
pub(super) async fn record_revocation(
    db: &Postgres,
    principal_key: &str,
    mandate_id: &str,
    revoked_at: &str,
    document: &str,
) -> Result<()> {
    let conn = db.connection().await?;
    conn.run(
        "INSERT INTO mandate_revocations (principal_key, mandate_id, revoked_at, document)
         VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        &[&principal_key, &mandate_id, &revoked_at, &document],
    )
    .await
    .map_err(store("cannot record a revocation"))?;
    Ok(())
}

pub(super) async fn rows(db: &Postgres, mandate_id: &str) -> Result<Vec<MandateRows>> {
    let failed = store("cannot read a mandate's account");
    let conn = db.connection().await?;
    let heads = conn
        .rows(
            "SELECT m.principal_key, m.principal, m.currency, m.budget_minor, m.max_sagas,
                    r.revoked_at
             FROM mandates m LEFT JOIN mandate_revocations r
                 ON r.principal_key = m.principal_key AND r.mandate_id = m.mandate_id
             WHERE m.mandate_id = $1 ORDER BY m.principal_key",
            &[&mandate_id],
        )
        .await
        .map_err(&failed)?;
    let mut mandates = Vec::new();
    for head in heads {
        let principal_key: String = head.get(0);
        let reservations = conn
            .rows(
                "SELECT saga_id, reserved_minor, spent_minor FROM mandate_reservations
                 WHERE principal_key = $1 AND mandate_id = $2 ORDER BY at_ms, saga_id",
                &[&principal_key, &mandate_id],
            )
            .await
            .map_err(&failed)?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        mandates.push(MandateRows {
            principal_key,
            principal: head.get(1),
            currency: head.get(2),
            budget_minor: head.get(3),
            max_sagas: head.get(4),
            revoked_at: head.get(5),
            reservations,
        });
    }
    Ok(mandates)
}

#[cfg(test)]
mod tests {
    use sagaplane_storage::postgres::{Postgres, testing};
    use serde_json::Value;
    use shared_types::{TrustStore, ViolationCode};

    use crate::Error;
    use crate::journal::{PostgresJournal, SagaLog};
    use crate::mandates::MandateBook;

    fn example(path: &str) -> Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples")
            .join(path);
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    /// A test saga under `mandate_id` of the example principal, reserving 40 of 100.
    fn header(saga_id: &str, mandate_id: &str) -> crate::journal::SagaHeader {
        let mut header = crate::journal::conformance::header(saga_id);
        std::sync::Arc::make_mut(&mut header.spec).mandate = Some(crate::mandates::test_hold(
            "test-principal",
            mandate_id,
            None,
            40,
        ));
        header
    }

    #[tokio::test]
    async fn a_revocation_recorded_on_postgres_refuses_the_next_plan_and_shows_in_the_account() {
        const TEST: &str =
            "a_revocation_recorded_on_postgres_refuses_the_next_plan_and_shows_in_the_account";
        let Some(url) = testing::scratch_database(TEST).await else {
            return;
        };
        let db = Postgres::connect(&url, 4).unwrap();
        let journal = PostgresJournal::on(&db).await.unwrap();
        let mut principals = TrustStore::new();
        let key = serde_json::from_value(example("keys/test-principal.pub.jwk")).unwrap();
        principals.add_jwk(&key).unwrap();
        let book = MandateBook::on_postgres(&db, principals).await.unwrap();

        // One saga runs under the mandate before it is revoked.
        journal
            .begin(&header("before", "md_test_revoked"), &[])
            .await
            .unwrap();
        assert!(
            !book
                .is_revoked("test-principal", "md_test_revoked")
                .await
                .unwrap()
        );
        let revoked = book
            .revoke(&example("mandates/test-revocation.json"))
            .await
            .unwrap();
        assert_eq!(revoked.mandate_id, "md_test_revoked");
        assert!(
            book.is_revoked("test-principal", "md_test_revoked")
                .await
                .unwrap()
        );

        // The journal's accepting write, on the same database, sees it.
        let refused = journal
            .begin(&header("after", "md_test_revoked"), &[])
            .await;
        assert!(
            matches!(&refused, Err(Error::Mandate(v)) if v.code == ViolationCode::MandateRevoked),
            "{refused:?}"
        );
        let account = book.show("md_test_revoked").await.unwrap();
        let mandate = &account["mandates"][0];
        assert_eq!(mandate["revoked"], true, "{account}");
        assert_eq!(mandate["reservedMinor"], 40, "{account}");
        assert_eq!(mandate["remainingMinor"], 60, "{account}");
        assert_eq!(mandate["sagas"][0]["sagaId"], "before", "{account}");

        // Settled at 10: the account shows what it spent.
        let ending = crate::journal::Ending {
            mandate: None,
            spent_minor: 10,
        };
        journal.end("before", 1, &[], &ending, None).await.unwrap();
        let account = book.show("md_test_revoked").await.unwrap();
        assert_eq!(account["mandates"][0]["spentMinor"], 10, "{account}");
        assert_eq!(account["mandates"][0]["remainingMinor"], 90, "{account}");
        // Another principal's signature, or none, revokes nothing.
        let mut forged = example("mandates/test-revocation.json");
        forged["revokedMandateId"] = "md_other".into();
        assert!(matches!(book.revoke(&forged).await, Err(Error::Refused(_))));
    }
}
