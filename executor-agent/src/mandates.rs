//! The executor's account of principals' mandates (docs/security.md): what each saga
//! reserved against its mandate's budget, what it spent once it ended, and which
//! mandates their principals revoked.
//!
//! A mandate is known by its principal's key and its id. Accepting a plan reserves its
//! worst-case spend in the journal's accepting write (`reserve`, called inside it), so
//! two plans that each fit but together do not are never both accepted, whatever their
//! timing: the state file has one writer, and each write sees the ones before it. A
//! saga's end writes what it really spent (`settle`, inside the journal's finishing
//! write), giving back the rest.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use rusqlite::{OptionalExtension, Transaction, params};
use sagaplane_storage::schema::{self, Migration, has_column};
use sagaplane_storage::sqlite::{Database, Reader};
use serde_json::{Value, json};
use shared_types::mandate::Revocation;
use shared_types::{TrustStore, Violation, ViolationCode};

use crate::error::{Error, Result};
use crate::saga::spec::MandateHold;

pub(crate) mod postgres;

pub(crate) use postgres::POSTGRES_MIGRATIONS;

/// The mandates' name among the stores of the state file.
pub(crate) const STORE: &str = "mandates";

/// The mandates' schema, in order; the count is its version (`sagaplane_storage::schema`).
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        what: "mandates, their reservations and revocations",
        apply: |tx| tx.execute_batch(TABLES),
    },
    Migration {
        what: "running totals of each mandate",
        apply: add_totals,
    },
];

const TABLES: &str = "CREATE TABLE IF NOT EXISTS mandates (
         principal_key   TEXT NOT NULL,
         mandate_id      TEXT NOT NULL,
         document_sha256 TEXT NOT NULL,
         principal       TEXT NOT NULL,
         currency        TEXT NOT NULL,
         budget_minor    INTEGER NOT NULL,
         max_sagas       INTEGER,
         -- Running totals of the reservations below, kept by `reserve` and `settle` so
         -- that accepting a plan reads one row, not every saga ever run under it.
         used_minor      INTEGER NOT NULL DEFAULT 0,
         sagas           INTEGER NOT NULL DEFAULT 0,
         PRIMARY KEY (principal_key, mandate_id)
     );
     CREATE TABLE IF NOT EXISTS mandate_reservations (
         saga_id        TEXT PRIMARY KEY,
         principal_key  TEXT NOT NULL,
         mandate_id     TEXT NOT NULL,
         reserved_minor INTEGER NOT NULL,
         -- NULL while the saga runs; what it spent once it ended.
         spent_minor    INTEGER,
         at_ms          INTEGER NOT NULL
     );
     CREATE INDEX IF NOT EXISTS reservations_by_mandate
         ON mandate_reservations (principal_key, mandate_id);
     CREATE TABLE IF NOT EXISTS mandate_revocations (
         principal_key TEXT NOT NULL,
         mandate_id    TEXT NOT NULL,
         revoked_at    TEXT NOT NULL,
         document      TEXT NOT NULL,
         PRIMARY KEY (principal_key, mandate_id)
     );";

fn refusal(code: ViolationCode, message: String) -> Violation {
    Violation {
        code,
        step: None,
        message,
    }
}

/// The refusal of a plan whose mandate its principal revoked.
pub(crate) fn revoked(hold: &MandateHold) -> Violation {
    refusal(
        ViolationCode::MandateRevoked,
        format!(
            "mandate {:?} was revoked by its principal; ask for a new one",
            hold.mandate_id
        ),
    )
}

/// Why a plan holding `hold` cannot be accepted, given what the store knows of its
/// mandate (the signed document's hash, the reserved and spent total, the sagas run);
/// `None` when it fits. Every journal applies these rules inside its accepting write.
pub(crate) fn refusal_for(
    hold: &MandateHold,
    known_sha256: &str,
    used_minor: u64,
    sagas: u64,
) -> Option<Violation> {
    if known_sha256 != hold.document_sha256 {
        return Some(refusal(
            ViolationCode::MandateUntrusted,
            format!(
                "principal key {:?} granted another mandate under the id {:?}; a mandate id names one grant",
                hold.principal_key, hold.mandate_id
            ),
        ));
    }
    if let Some(max) = hold.max_sagas
        && sagas >= u64::from(max)
    {
        return Some(refusal(
            ViolationCode::MandateExhausted,
            format!(
                "mandate {:?} allows {max} saga(s), and all have been run",
                hold.mandate_id
            ),
        ));
    }
    let budget = hold.budget.amount_minor.get();
    let remaining = budget.saturating_sub(used_minor);
    if hold.reserved_minor > remaining {
        return Some(refusal(
            ViolationCode::MandateExhausted,
            format!(
                "mandate {:?} has {remaining} of its {budget} {} minor units left, and this plan may spend {}",
                hold.mandate_id, hold.budget.currency, hold.reserved_minor
            ),
        ));
    }
    None
}

/// Inside the write that accepts `saga_id`: refuses it (`Some`) when its mandate was
/// revoked, is another document under a known id, or cannot cover its worst case; else
/// reserves that worst case.
pub(crate) fn reserve(
    tx: &Transaction<'_>,
    saga_id: &str,
    hold: &MandateHold,
    at_ms: i64,
) -> rusqlite::Result<Option<Violation>> {
    let key = params![hold.principal_key, hold.mandate_id];
    let revoked = tx
        .prepare_cached(
            "SELECT 1 FROM mandate_revocations WHERE principal_key = ?1 AND mandate_id = ?2",
        )?
        .exists(key)?;
    if revoked {
        return Ok(Some(self::revoked(hold)));
    }
    tx.prepare_cached(
        "INSERT OR IGNORE INTO mandates
             (principal_key, mandate_id, document_sha256, principal, currency, budget_minor, max_sagas)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        hold.principal_key,
        hold.mandate_id,
        hold.document_sha256,
        hold.principal,
        hold.budget.currency.as_str(),
        to_sql(hold.budget.amount_minor.get()),
        hold.max_sagas,
    ])?;
    let (known, used, sagas): (String, i64, i64) = tx
        .prepare_cached(
            "SELECT document_sha256, used_minor, sagas FROM mandates
             WHERE principal_key = ?1 AND mandate_id = ?2",
        )?
        .query_row(key, |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
    let (used, sagas) = (
        u64::try_from(used).unwrap_or(u64::MAX),
        u64::try_from(sagas).unwrap_or(u64::MAX),
    );
    if let Some(violation) = refusal_for(hold, &known, used, sagas) {
        return Ok(Some(violation));
    }
    tx.prepare_cached(
        "INSERT INTO mandate_reservations
             (saga_id, principal_key, mandate_id, reserved_minor, spent_minor, at_ms)
         VALUES (?1, ?2, ?3, ?4, NULL, ?5)",
    )?
    .execute(params![
        saga_id,
        hold.principal_key,
        hold.mandate_id,
        to_sql(hold.reserved_minor),
        at_ms
    ])?;
    tx.prepare_cached(
        "UPDATE mandates SET used_minor = used_minor + ?3, sagas = sagas + 1
         WHERE principal_key = ?1 AND mandate_id = ?2",
    )?
    .execute(params![
        hold.principal_key,
        hold.mandate_id,
        to_sql(hold.reserved_minor)
    ])?;
    Ok(None)
}

/// Inside the write that finishes `saga_id`: what it spent replaces what it reserved, in
/// its reservation and in its mandate's total. A reservation settled already is left as
/// it is, so the total gives back a saga's unspent rest once.
pub(crate) fn settle(tx: &Transaction<'_>, saga_id: &str, spent: u64) -> rusqlite::Result<()> {
    let unsettled: Option<(String, String, i64)> = tx
        .prepare_cached(
            "SELECT principal_key, mandate_id, reserved_minor FROM mandate_reservations
             WHERE saga_id = ?1 AND spent_minor IS NULL",
        )?
        .query_row([saga_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    let Some((principal_key, mandate_id, reserved)) = unsettled else {
        return Ok(());
    };
    let spent = to_sql(spent).min(reserved);
    tx.prepare_cached("UPDATE mandate_reservations SET spent_minor = ?2 WHERE saga_id = ?1")?
        .execute(params![saga_id, spent])?;
    tx.prepare_cached(
        "UPDATE mandates SET used_minor = used_minor - ?3
         WHERE principal_key = ?1 AND mandate_id = ?2",
    )?
    .execute(params![principal_key, mandate_id, reserved - spent])?;
    Ok(())
}

/// Gives a state file from before the mandates' running totals its `used_minor` and
/// `sagas`, computed once from the reservations it holds.
fn add_totals(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    if !has_column(tx, "mandates", "used_minor")? {
        tx.execute_batch(
            "ALTER TABLE mandates ADD COLUMN used_minor INTEGER NOT NULL DEFAULT 0;
             ALTER TABLE mandates ADD COLUMN sagas INTEGER NOT NULL DEFAULT 0;
             UPDATE mandates SET
                 used_minor = (SELECT COALESCE(SUM(COALESCE(r.spent_minor, r.reserved_minor)), 0)
                               FROM mandate_reservations r
                               WHERE r.principal_key = mandates.principal_key
                                 AND r.mandate_id = mandates.mandate_id),
                 sagas = (SELECT COUNT(*) FROM mandate_reservations r
                          WHERE r.principal_key = mandates.principal_key
                            AND r.mandate_id = mandates.mandate_id);",
        )?;
    }
    Ok(())
}

/// Amounts are at most 2^53 - 1 (money's bound), so they fit SQLite's integers.
fn to_sql(amount: u64) -> i64 {
    i64::try_from(amount).unwrap_or(i64::MAX)
}

/// The mandates' tables, read and revoked through.
#[derive(Debug, Clone)]
pub struct MandateBook {
    book: Book,
    principals: TrustStore,
}

/// Where the mandates' tables are.
#[derive(Debug, Clone)]
enum Book {
    Sqlite {
        reader: Reader,
        db: Database,
        /// The revoked mandates, as (principal key, mandate id): a view of the
        /// revocations table, read when the book is opened and added to by each
        /// revocation once it is durable. Exact, because one process owns a state file
        /// (its lock) and writes revocations only through `revoke`; read before every
        /// forward call (`authority`), where a read of the file cost about a fifth of
        /// the executor's CPU per saga at 64 clients.
        revoked: Arc<RwLock<HashSet<(String, String)>>>,
    },
    Postgres(sagaplane_storage::postgres::Postgres),
}

/// What the tables hold of one principal's mandate, for `show`.
struct MandateRows {
    principal_key: String,
    principal: String,
    currency: String,
    budget_minor: i64,
    max_sagas: Option<i64>,
    revoked_at: Option<String>,
    /// Each saga's id, what it reserved, and what it spent once it ended.
    reservations: Vec<(String, i64, Option<i64>)>,
}

/// A verified revocation, recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoked {
    pub principal_key: String,
    pub mandate_id: String,
}

impl MandateBook {
    pub fn on(db: &Database, principals: TrustStore) -> Result<Self> {
        schema::migrate(db, STORE, MIGRATIONS)?;
        let conn = sagaplane_storage::sqlite::open_connection(db.path(), STORE)?;
        let revoked = conn
            .prepare("SELECT principal_key, mandate_id FROM mandate_revocations")
            .and_then(|mut rows| {
                rows.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<HashSet<(String, String)>>>()
            })
            .map_err(|e| Error::Journal(format!("cannot read the revoked mandates: {e}")))?;
        Ok(Self {
            book: Book::Sqlite {
                reader: db.reader()?,
                db: db.clone(),
                revoked: Arc::new(RwLock::new(revoked)),
            },
            principals,
        })
    }

    /// The mandates' tables in a PostgreSQL database (the PostgreSQL journal reserves and
    /// settles in them).
    pub async fn on_postgres(
        db: &sagaplane_storage::postgres::Postgres,
        principals: TrustStore,
    ) -> Result<Self> {
        db.migrate(STORE, POSTGRES_MIGRATIONS).await?;
        Ok(Self {
            book: Book::Postgres(db.clone()),
            principals,
        })
    }

    pub fn principals(&self) -> &TrustStore {
        &self.principals
    }

    /// Whether the principal `principal_key` revoked its mandate `mandate_id`.
    pub async fn is_revoked(&self, principal_key: &str, mandate_id: &str) -> Result<bool> {
        match &self.book {
            Book::Sqlite { revoked, .. } => Ok(crate::sync::read(revoked)
                .contains(&(principal_key.to_owned(), mandate_id.to_owned()))),
            Book::Postgres(db) => postgres::is_revoked(db, principal_key, mandate_id).await,
        }
    }

    /// Verifies a principal's signed revocation and records it, durably. The signature
    /// is its authority: it revokes only that principal's mandate of that id.
    pub async fn revoke(&self, document: &Value) -> Result<Revoked> {
        let principal_key = self.principals.verify(document).map_err(|e| {
            Error::Refused(format!(
                "the revocation is not signed by a trusted principal: {e}"
            ))
        })?;
        let revocation = Revocation::from_value(document)
            .map_err(|e| Error::Refused(format!("not a revocation: {e}")))?;
        if !shared_types::expr::is_valid_id(&revocation.revoked_mandate_id) {
            return Err(Error::Refused(
                "revokedMandateId must be 1-64 of A-Z a-z 0-9 '_' '-'".into(),
            ));
        }
        let text = document.to_string();
        let (key, id, at) = (
            principal_key.clone(),
            revocation.revoked_mandate_id.clone(),
            revocation.revoked_at.to_rfc3339(),
        );
        let (db, revoked) = match &self.book {
            Book::Sqlite { db, revoked, .. } => (db, revoked),
            Book::Postgres(db) => {
                postgres::record_revocation(db, &key, &id, &at, &text).await?;
                return Ok(Revoked {
                    principal_key,
                    mandate_id: revocation.revoked_mandate_id,
                });
            }
        };
        db.submit(move |tx| {
            tx.prepare_cached(
                "INSERT OR IGNORE INTO mandate_revocations
                         (principal_key, mandate_id, revoked_at, document) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![key, id, at, text])
            .map(|_| ())
        })
        .await?;
        crate::sync::write(revoked)
            .insert((principal_key.clone(), revocation.revoked_mandate_id.clone()));
        Ok(Revoked {
            principal_key,
            mandate_id: revocation.revoked_mandate_id,
        })
    }

    /// Every mandate by that id the executor holds (one per principal that granted
    /// one): budget, reserved, spent, remaining and the sagas under it.
    pub async fn show(&self, mandate_id: &str) -> Result<Value> {
        let rows = match &self.book {
            Book::Sqlite { reader, .. } => {
                let id = mandate_id.to_owned();
                reader.read(move |conn| sqlite_rows(conn, &id)).await?
            }
            Book::Postgres(db) => postgres::rows(db, mandate_id).await?,
        };
        Ok(shown(mandate_id, rows))
    }
}

fn sqlite_rows(conn: &rusqlite::Connection, id: &str) -> rusqlite::Result<Vec<MandateRows>> {
    let mut statement = conn.prepare_cached(
        "SELECT principal_key, principal, currency, budget_minor, max_sagas
         FROM mandates WHERE mandate_id = ?1 ORDER BY principal_key",
    )?;
    let heads: Vec<(String, String, String, i64, Option<i64>)> = statement
        .query_map([id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut mandates = Vec::new();
    for (principal_key, principal, currency, budget_minor, max_sagas) in heads {
        let revoked_at: Option<String> = conn
            .prepare_cached(
                "SELECT revoked_at FROM mandate_revocations
                 WHERE principal_key = ?1 AND mandate_id = ?2",
            )?
            .query_row(params![principal_key, id], |r| r.get(0))
            .optional()?;
        let reservations = conn
            .prepare_cached(
                "SELECT saga_id, reserved_minor, spent_minor FROM mandate_reservations
                 WHERE principal_key = ?1 AND mandate_id = ?2 ORDER BY at_ms, saga_id",
            )?
            .query_map(params![principal_key, id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        mandates.push(MandateRows {
            principal_key,
            principal,
            currency,
            budget_minor,
            max_sagas,
            revoked_at,
            reservations,
        });
    }
    Ok(mandates)
}

/// The account `show` answers with: budget, reserved, spent, remaining and the sagas.
fn shown(id: &str, rows: Vec<MandateRows>) -> Value {
    let mut mandates = Vec::new();
    for row in rows {
        let mut sagas = Vec::new();
        let (mut reserved, mut spent) = (0i64, 0i64);
        for (saga, held, settled) in row.reservations {
            match settled {
                Some(s) => spent = spent.saturating_add(s),
                None => reserved = reserved.saturating_add(held),
            }
            sagas.push(json!({
                "sagaId": saga,
                "state": if settled.is_some() { "ended" } else { "running" },
                "reservedMinor": held,
                "spentMinor": settled,
            }));
        }
        let budget = row.budget_minor;
        mandates.push(json!({
            "mandateId": id,
            "principal": row.principal,
            "principalKey": row.principal_key,
            "currency": row.currency,
            "budgetMinor": budget,
            "maxSagas": row.max_sagas,
            "reservedMinor": reserved,
            "spentMinor": spent,
            "remainingMinor": budget.saturating_sub(reserved).saturating_sub(spent).max(0),
            "revoked": row.revoked_at.is_some(),
            "revokedAt": row.revoked_at,
            "sagas": sagas,
        }));
    }
    json!({ "mandates": mandates })
}

/// For tests: a hold of `reserved` of a 100 EUR-cent mandate (`max_sagas` at most).
#[cfg(test)]
pub(crate) fn test_hold(
    principal_key: &str,
    mandate_id: &str,
    max_sagas: Option<u32>,
    reserved: u64,
) -> MandateHold {
    use shared_types::money::{AmountMinor, Currency};
    MandateHold {
        principal_key: principal_key.into(),
        mandate_id: mandate_id.into(),
        principal: "someone".into(),
        budget: shared_types::Money {
            currency: Currency::new("EUR").unwrap(),
            amount_minor: AmountMinor::new(100).unwrap(),
        },
        max_sagas,
        document_sha256: "d1".into(),
        reserved_minor: reserved,
        spend_minor: vec![reserved],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(reserved_minor: u64) -> MandateHold {
        test_hold("pk", "md_1", Some(3), reserved_minor)
    }

    fn reserve_in(db: &Database, saga_id: &'static str, reserved: u64) -> Option<ViolationCode> {
        let refused = std::sync::Arc::new(std::sync::Mutex::new(None));
        let seen = refused.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(db.submit(move |tx| {
            *seen.lock().unwrap() = reserve(tx, saga_id, &hold(reserved), 0)?.map(|v| v.code);
            Ok(())
        }))
        .unwrap();
        refused.lock().unwrap().take()
    }

    /// A state file from before the running totals keeps what its reservations used: the
    /// totals are computed from them once, and accepting goes on from there.
    #[test]
    fn totals_added_after_an_upgrade_hold_what_the_reservations_used() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("executor.db");
        let earlier = rusqlite::Connection::open(&path).unwrap();
        earlier
            .execute_batch(
                "CREATE TABLE mandates (principal_key TEXT NOT NULL, mandate_id TEXT NOT NULL,
                     document_sha256 TEXT NOT NULL, principal TEXT NOT NULL, currency TEXT NOT NULL,
                     budget_minor INTEGER NOT NULL, max_sagas INTEGER,
                     PRIMARY KEY (principal_key, mandate_id));
                 CREATE TABLE mandate_reservations (saga_id TEXT PRIMARY KEY,
                     principal_key TEXT NOT NULL, mandate_id TEXT NOT NULL,
                     reserved_minor INTEGER NOT NULL, spent_minor INTEGER, at_ms INTEGER NOT NULL);
                 INSERT INTO mandates VALUES ('pk', 'md_1', 'd1', 'someone', 'EUR', 100, 3);
                 -- Settled at 30 of 50, and still running with 40 reserved: 70 used.
                 INSERT INTO mandate_reservations VALUES ('s1', 'pk', 'md_1', 50, 30, 0);
                 INSERT INTO mandate_reservations VALUES ('s2', 'pk', 'md_1', 40, NULL, 0);",
            )
            .unwrap();
        drop(earlier);
        let db = Database::open(&path, "mandate-totals-test").unwrap();
        MandateBook::on(&db, TrustStore::new()).unwrap();

        assert_eq!(
            reserve_in(&db, "s3", 31),
            Some(ViolationCode::MandateExhausted),
            "30 are left"
        );
        assert_eq!(reserve_in(&db, "s3", 30), None);
        // s2 ends having spent 10 of its 40: 30 come back, but three sagas have run.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(db.submit(|tx| settle(tx, "s2", 10))).unwrap();
        rt.block_on(db.submit(|tx| settle(tx, "s2", 0))).unwrap();
        assert_eq!(
            reserve_in(&db, "s4", 1),
            Some(ViolationCode::MandateExhausted),
            "maxSagas 3"
        );
        let conn = rusqlite::Connection::open(&path).unwrap();
        let (used, sagas): (i64, i64) = conn
            .query_row(
                "SELECT used_minor, sagas FROM mandates WHERE mandate_id = 'md_1'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((used, sagas), (30 + 10 + 30, 3), "settled once, not twice");
    }

    /// The revoked mandates a SQLite book reads at the moment of effect are those the
    /// table holds: one revoked through the book is revoked at once, and one written
    /// before the book was opened (an earlier run) is revoked too.
    #[test]
    fn a_revocation_is_seen_at_once_and_after_the_book_is_opened_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("executor.db");
        let principal = shared_types::SigningIdentity::from_seed([5; 32], Some("principal".into()));
        let mut trust = TrustStore::new();
        trust.add_jwk(&principal.public_jwk()).unwrap();
        let db = Database::open(&path, "revocations-test").unwrap();
        let book = MandateBook::on(&db, trust.clone()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(!rt.block_on(book.is_revoked("principal", "md_1")).unwrap());
        let mut revocation =
            json!({"revokedMandateId": "md_1", "revokedAt": "2026-12-01T00:00:00Z"});
        principal.sign_in_place(&mut revocation).unwrap();
        rt.block_on(book.revoke(&revocation)).unwrap();
        assert!(rt.block_on(book.is_revoked("principal", "md_1")).unwrap());
        assert!(!rt.block_on(book.is_revoked("principal", "md_2")).unwrap());
        assert!(!rt.block_on(book.is_revoked("another", "md_1")).unwrap());
        drop((book, db));
        let db = Database::open(&path, "revocations-test").unwrap();
        let reopened = MandateBook::on(&db, trust).unwrap();
        assert!(
            rt.block_on(reopened.is_revoked("principal", "md_1"))
                .unwrap()
        );
    }
}
