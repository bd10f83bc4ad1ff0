//! The PostgreSQL journal, shared by executor replicas: each saga's owner, epoch and lease
//! on its row; every append fenced by a lock on that row in the append's own statement,
//! so a claim and an append of one saga are ordered by the database, never by a replica's
//! memory; appends group-committed with the other one-statement writes of the moment
//! (`Postgres::write`: the task store's too); accepting a plan reserves its mandate's
//! budget in the same transaction, the mandate's row locked last.

use agent_host::store::postgres::{
    Cached, Connection, DriverError, Migration, Postgres, ToSql, Transaction, failed, to_i64,
    to_u64,
};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use shared_types::Violation;

use super::{Claim, Entry, Epoch, Forgettable, Headers, Ownership, SagaHeader, SagaLog};
use crate::error::{Error, Result};
use crate::mandates::{self, MandateHold};

/// The journal's schema in PostgreSQL, in order; the count is its version.
const MIGRATIONS: &[Migration] = &[
    Migration {
        what: "the sagas, their owners and their entries",
        sql: "CREATE TABLE IF NOT EXISTS sagas (
              saga_id        TEXT PRIMARY KEY,
              task_id        TEXT NOT NULL,
              header         TEXT NOT NULL,
              finished       BOOLEAN NOT NULL DEFAULT FALSE,
              -- The begin time until the saga finishes, then the finish time.
              finished_ms    BIGINT NOT NULL,
              -- When the plan's mandate expires (NULL when it cannot be read: kept).
              mandate_ends_ms BIGINT,
              owner          TEXT,
              epoch          BIGINT NOT NULL,
              lease_until_ms BIGINT NOT NULL
          );
          CREATE TABLE IF NOT EXISTS entries (
              seq     BIGSERIAL PRIMARY KEY,
              saga_id TEXT NOT NULL REFERENCES sagas (saga_id),
              body    TEXT NOT NULL
          );
          CREATE INDEX IF NOT EXISTS entries_by_saga ON entries (saga_id, seq);
          -- Recovery, claims and renewals read the sagas still running, not every saga.
          CREATE INDEX IF NOT EXISTS sagas_unfinished ON sagas (owner, saga_id) WHERE NOT finished;
          CREATE INDEX IF NOT EXISTS sagas_by_finish ON sagas (finished_ms) WHERE finished;",
    },
    Migration {
        what: "plans and entries compressed with lz4",
        sql: "DO $$ BEGIN
              -- lz4 where the server has it: pglz compressing the large JSON of every
              -- write was a large share of the database's CPU under load (perf).
              IF EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression'
                                                     AND 'lz4' = ANY(enumvals)) THEN
                  ALTER TABLE sagas ALTER COLUMN header SET COMPRESSION lz4;
                  ALTER TABLE entries ALTER COLUMN body SET COMPRESSION lz4;
              END IF;
          END $$;",
    },
];

/// The journal in a PostgreSQL database; one owner per opening (a replica's run).
#[derive(Debug, Clone)]
pub struct PostgresJournal {
    db: Postgres,
    owner: String,
    lease: std::time::Duration,
}

impl PostgresJournal {
    /// The journal in `db`, its schema (and the mandates' tables that accepting and
    /// finishing write) brought to this binary's version.
    pub async fn on(db: &Postgres) -> Result<Self> {
        db.migrate(mandates::STORE, mandates::POSTGRES_MIGRATIONS)
            .await?;
        db.migrate("journal", MIGRATIONS).await?;
        Ok(Self {
            db: db.clone(),
            owner: uuid::Uuid::new_v4().to_string(),
            lease: super::DEFAULT_LEASE,
        })
    }

    /// Who this opening claims sagas as: one replica's run.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The same journal, whose claims hold a saga for `lease` without renewal.
    pub fn with_lease(mut self, lease: std::time::Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The same database, opened by another owner (another replica, in tests).
    pub fn as_other_owner(&self) -> Self {
        Self {
            owner: uuid::Uuid::new_v4().to_string(),
            ..self.clone()
        }
    }

    fn lease_until(&self, now_ms: i64) -> i64 {
        super::lease_until(self.lease, now_ms)
    }

    async fn connection(&self) -> Result<Connection> {
        Ok(self.db.connection().await?)
    }
}

/// The fence: the saga's row locked at this epoch and owner, in the append's own
/// statement. A claim locks that row `FOR UPDATE` first, so it waits for this append to
/// commit, or this append waits for it and then finds another epoch. `KEY SHARE` is the
/// weakest lock that a claim's `FOR UPDATE` still waits for; a renewal (a plain update of
/// the lease) does not wait for it, nor it for a renewal: appends of many sagas and the
/// renewal of all of them run at once without deadlocking.
const APPEND: &str = "WITH fence AS (
         SELECT 1 FROM sagas WHERE saga_id = $1 AND epoch = $3 AND owner = $4 FOR KEY SHARE
     )
     INSERT INTO entries (saga_id, body) SELECT $1, $2 FROM fence";

fn encode<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|source| Error::Encoding {
        what: "a journal entry",
        source,
    })
}

fn decode<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T> {
    serde_json::from_str(text)
        .map_err(|e| Error::Journal(format!("a journal row cannot be read: {e}")))
}

/// When the plan's mandate expires, in ms; `None` when the plan does not say readably.
fn mandate_ends_ms(header: &SagaHeader) -> Option<i64> {
    let mandate = header.plan.get("mandate")?;
    let text = mandate
        .get("notAfter")
        .or_else(|| mandate.get("expiresAt"))?
        .as_str()?;
    Some(
        chrono::DateTime::parse_from_rfc3339(text)
            .ok()?
            .timestamp_millis(),
    )
}

fn store(what: &str) -> impl Fn(DriverError) -> Error + '_ {
    move |e| Error::Storage(failed(what, &e))
}

#[async_trait]
impl SagaLog for PostgresJournal {
    async fn begin(&self, header: &SagaHeader, first: &[Entry]) -> Result<Epoch> {
        let body = encode(header)?;
        let first = if first.is_empty() {
            None
        } else {
            Some(encode(&first)?)
        };
        let at_ms = chrono::Utc::now().timestamp_millis();
        let mut conn = self.connection().await?;
        let tx = conn
            .transaction()
            .await
            .map_err(store("cannot begin a saga"))?;
        let hold = header.spec.mandate.as_ref();
        let (ends_ms, lease_until_ms) = (mandate_ends_ms(header), self.lease_until(at_ms));
        let saga_row: [&(dyn ToSql + Sync); 7] = [
            &header.saga_id,
            &header.task_id,
            &body,
            &at_ms,
            &ends_ms,
            &self.owner,
            &lease_until_ms,
        ];
        let revoked = async {
            match hold {
                Some(hold) => is_revoked(&tx, hold).await,
                None => Ok(false),
            }
        };
        let saga = async {
            tx.run(
                "INSERT INTO sagas (saga_id, task_id, header, finished_ms, mandate_ends_ms, owner,
                                    epoch, lease_until_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, 1, $7)",
                &saga_row,
            )
            .await
            .map_err(store("cannot begin a saga"))
        };
        let entries = async {
            match &first {
                Some(first) => tx
                    .run(
                        "INSERT INTO entries (saga_id, body) VALUES ($1, $2)",
                        &[&header.saga_id, first],
                    )
                    .await
                    .map_err(store("cannot begin a saga")),
                None => Ok(0),
            }
        };
        let taken = async {
            match hold {
                Some(hold) => take_budget(&tx, &header.saga_id, hold, at_ms).await,
                None => Ok(true),
            }
        };
        // Polled together, every statement goes out back to back: one round trip, the
        // mandate's row locked by the last of them. A revoked mandate, or a budget
        // refused, drops the transaction: nothing is written.
        let (revoked, _, _, taken) = futures::try_join!(revoked, saga, entries, taken)?;
        if let Some(hold) = hold {
            if revoked {
                return Err(Error::Mandate(mandates::revoked(hold)));
            }
            if !taken && let Some(violation) = refused(&tx, hold).await? {
                return Err(Error::Mandate(violation));
            }
        }
        tx.commit().await.map_err(store("cannot begin a saga"))?;
        Ok(1)
    }

    async fn append(&self, saga_id: &str, epoch: Epoch, entries: &[Entry]) -> Result<()> {
        let body = encode(&entries)?;
        // Group-committed with the other writes waiting at this moment (the database's
        // `write`): each append is fenced as if alone.
        let written = self
            .db
            .write(
                APPEND,
                vec![
                    Box::new(saga_id.to_owned()),
                    Box::new(body),
                    Box::new(to_i64(epoch)),
                    Box::new(self.owner.clone()),
                ],
            )
            .await?;
        if written != 1 {
            return Err(Error::Fenced {
                saga_id: saga_id.to_owned(),
                epoch,
            });
        }
        Ok(())
    }

    async fn finish(&self, saga_id: &str, spent_minor: u64) -> Result<()> {
        let at_ms = chrono::Utc::now().timestamp_millis();
        let mut conn = self.connection().await?;
        let tx = conn
            .transaction()
            .await
            .map_err(store("cannot finish a saga"))?;
        tx.run(
            "UPDATE sagas SET finished = TRUE, finished_ms = $2 WHERE saga_id = $1",
            &[&saga_id, &at_ms],
        )
        .await
        .map_err(store("cannot finish a saga"))?;
        // Last: the mandate's row, which every saga under it locks, is held the shortest.
        settle(&tx, saga_id, spent_minor).await?;
        tx.commit().await.map_err(store("cannot finish a saga"))
    }

    async fn load(&self, saga_id: &str) -> Result<Option<(SagaHeader, Vec<Entry>)>> {
        let conn = self.connection().await?;
        let Some(row) = conn
            .row_opt("SELECT header FROM sagas WHERE saga_id = $1", &[&saga_id])
            .await
            .map_err(store("cannot load a saga"))?
        else {
            return Ok(None);
        };
        let header: SagaHeader = decode(row.get(0))?;
        let rows = conn
            .rows(
                "SELECT body FROM entries WHERE saga_id = $1 ORDER BY seq",
                &[&saga_id],
            )
            .await
            .map_err(store("cannot load a saga"))?;
        let mut entries = Vec::new();
        for row in &rows {
            // A row is the array of one append.
            entries.extend(decode::<Vec<Entry>>(row.get(0))?);
        }
        Ok(Some((header, entries)))
    }

    async fn unfinished(&self) -> Result<Vec<String>> {
        let conn = self.connection().await?;
        let rows = conn
            .rows(
                "SELECT saga_id FROM sagas WHERE NOT finished ORDER BY saga_id",
                &[],
            )
            .await
            .map_err(store("cannot list the unfinished sagas"))?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    async fn forgettable(
        &self,
        finished_before_ms: i64,
        now_ms: i64,
        at_most: usize,
    ) -> Result<Vec<Forgettable>> {
        let at_most = i64::try_from(at_most).unwrap_or(i64::MAX);
        let conn = self.connection().await?;
        let rows = conn
            .rows(
                "SELECT saga_id, task_id FROM sagas
                 WHERE finished AND finished_ms < $1 AND mandate_ends_ms < $2
                 ORDER BY finished_ms LIMIT $3",
                &[&finished_before_ms, &now_ms, &at_most],
            )
            .await
            .map_err(store("cannot list the sagas to forget"))?;
        Ok(rows
            .iter()
            .map(|row| Forgettable {
                saga_id: row.get(0),
                task_id: row.get(1),
            })
            .collect())
    }

    async fn forget(&self, saga_ids: &[String]) -> Result<()> {
        let mut conn = self.connection().await?;
        let tx = conn
            .transaction()
            .await
            .map_err(store("cannot forget sagas"))?;
        // Only a finished saga is ever forgotten.
        tx.run(
            "DELETE FROM entries WHERE saga_id IN
                 (SELECT saga_id FROM sagas WHERE saga_id = ANY($1) AND finished)",
            &[&saga_ids],
        )
        .await
        .map_err(store("cannot forget sagas"))?;
        tx.run(
            "DELETE FROM sagas WHERE saga_id = ANY($1) AND finished",
            &[&saga_ids],
        )
        .await
        .map_err(store("cannot forget sagas"))?;
        tx.commit().await.map_err(store("cannot forget sagas"))
    }
}

#[async_trait]
impl Ownership for PostgresJournal {
    async fn claim(&self, saga_id: &str, now_ms: i64, how: Claim) -> Result<Option<Epoch>> {
        let conn = self.connection().await?;
        let row = conn
            .row_opt(
                // FOR UPDATE: the lock an append's fence (KEY SHARE) waits for.
                "UPDATE sagas SET owner = $2, epoch = epoch + 1, lease_until_ms = $3
                 WHERE saga_id = (SELECT saga_id FROM sagas WHERE saga_id = $1 FOR UPDATE)
                   AND NOT finished
                   AND ($4 OR owner IS NULL OR lease_until_ms < $5)
                 RETURNING epoch",
                &[
                    &saga_id,
                    &self.owner,
                    &self.lease_until(now_ms),
                    &(how == Claim::TakeOver),
                    &now_ms,
                ],
            )
            .await
            .map_err(store("cannot claim a saga"))?;
        Ok(row.map(|row| to_u64(row.get(0))))
    }

    async fn renew(&self, now_ms: i64) -> Result<usize> {
        let conn = self.db.control_connection().await?;
        let renewed = conn
            .run(
                "UPDATE sagas SET lease_until_ms = $2 WHERE NOT finished AND owner = $1",
                &[&self.owner, &self.lease_until(now_ms)],
            )
            .await
            .map_err(store("cannot renew leases"))?;
        Ok(usize::try_from(renewed).unwrap_or(usize::MAX))
    }

    async fn release(&self, saga_id: &str, epoch: Epoch) -> Result<()> {
        let conn = self.connection().await?;
        conn.run(
            "UPDATE sagas SET owner = NULL, lease_until_ms = 0
             WHERE saga_id = $1 AND owner = $2 AND epoch = $3",
            &[&saga_id, &self.owner, &to_i64(epoch)],
        )
        .await
        .map_err(store("cannot release a saga"))?;
        Ok(())
    }

    async fn claim_lapsed(&self, now_ms: i64, at_most: usize) -> Result<Vec<(String, Epoch)>> {
        let at_most = i64::try_from(at_most).unwrap_or(i64::MAX);
        let conn = self.db.control_connection().await?;
        // SKIP LOCKED: owners claiming at once each take sagas the others have not
        // locked, instead of waiting for them and then finding them taken.
        let rows = conn
            .rows(
                "UPDATE sagas SET owner = $1, epoch = epoch + 1, lease_until_ms = $2
                 WHERE saga_id IN (
                     SELECT saga_id FROM sagas
                     WHERE NOT finished AND (owner IS NULL OR lease_until_ms < $3)
                       AND owner IS DISTINCT FROM $1
                     ORDER BY saga_id LIMIT $4
                     FOR UPDATE SKIP LOCKED
                 )
                 RETURNING saga_id, epoch",
                &[&self.owner, &self.lease_until(now_ms), &now_ms, &at_most],
            )
            .await
            .map_err(store("cannot claim lapsed sagas"))?;
        let mut claimed: Vec<(String, Epoch)> = rows
            .iter()
            .map(|row| (row.get(0), to_u64(row.get(1))))
            .collect();
        claimed.sort();
        Ok(claimed)
    }

    fn is_shared(&self) -> bool {
        true
    }

    async fn claimable(&self, now_ms: i64, at_most: usize) -> Result<Vec<String>> {
        let at_most = i64::try_from(at_most).unwrap_or(i64::MAX);
        let conn = self.connection().await?;
        let rows = conn
            .rows(
                "SELECT saga_id FROM sagas
                 WHERE NOT finished AND (owner IS NULL OR lease_until_ms < $1)
                 ORDER BY saga_id LIMIT $2",
                &[&now_ms, &at_most],
            )
            .await
            .map_err(store("cannot list the claimable sagas"))?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }
}

#[async_trait]
impl Headers for PostgresJournal {
    async fn header(&self, saga_id: &str) -> Result<Option<SagaHeader>> {
        let conn = self.connection().await?;
        let row = conn
            .row_opt("SELECT header FROM sagas WHERE saga_id = $1", &[&saga_id])
            .await
            .map_err(store("cannot read a saga's header"))?;
        row.map(|row| decode(row.get(0))).transpose()
    }

    async fn is_finished(&self, saga_id: &str) -> Result<Option<bool>> {
        let conn = self.connection().await?;
        let row = conn
            .row_opt("SELECT finished FROM sagas WHERE saga_id = $1", &[&saga_id])
            .await
            .map_err(store("cannot read whether a saga finished"))?;
        Ok(row.map(|row| row.get(0)))
    }
}

/// Whether the mandate `hold` names was revoked (read inside the transaction that begins
/// a saga under it).
async fn is_revoked(tx: &Transaction<'_>, hold: &MandateHold) -> Result<bool> {
    Ok(tx
        .row_opt(
            "SELECT 1 FROM mandate_revocations WHERE principal_key = $1 AND mandate_id = $2",
            &[&hold.principal_key, &hold.mandate_id],
        )
        .await
        .map_err(store("cannot reserve against a mandate"))?
        .is_some())
}

/// The conditional write that takes a plan's reservation from its mandate's budget: the
/// rules of `mandates::refusal_for` as its condition. Every saga under a mandate locks
/// its row until its commit, so replicas accepting plans under one mandate at once are
/// serialized on it; taken in the last statement before the commit, the lock is held for
/// the commit alone.
const TAKE_BUDGET: &str = "UPDATE mandates SET used_minor = used_minor + $3, sagas = sagas + 1
     WHERE principal_key = $1 AND mandate_id = $2 AND document_sha256 = $4
       AND $3 <= GREATEST($5 - used_minor, 0)
       AND ($6::BIGINT IS NULL OR sagas < $6)";

fn take_budget_row(hold: &MandateHold) -> (i64, i64, Option<i64>) {
    (
        to_i64(hold.reserved_minor),
        to_i64(hold.budget.amount_minor.get()),
        hold.max_sagas.map(i64::from),
    )
}

/// Inside the transaction that begins `saga_id`: records the mandate (when first seen)
/// and the saga's reservation, and takes the reservation from the budget; whether the
/// budget allowed it (`refused` then says why not). Its three statements go out together.
async fn take_budget(
    tx: &Transaction<'_>,
    saga_id: &str,
    hold: &MandateHold,
    at_ms: i64,
) -> Result<bool> {
    let failed = store("cannot reserve against a mandate");
    let (reserved, budget, max_sagas) = take_budget_row(hold);
    let currency = hold.budget.currency.as_str();
    let mandate_row: [&(dyn ToSql + Sync); 7] = [
        &hold.principal_key,
        &hold.mandate_id,
        &hold.document_sha256,
        &hold.principal,
        &currency,
        &budget,
        &max_sagas,
    ];
    let reservation_row: [&(dyn ToSql + Sync); 5] = [
        &saga_id,
        &hold.principal_key,
        &hold.mandate_id,
        &reserved,
        &at_ms,
    ];
    let take_row: [&(dyn ToSql + Sync); 6] = [
        &hold.principal_key,
        &hold.mandate_id,
        &reserved,
        &hold.document_sha256,
        &budget,
        &max_sagas,
    ];
    let mandate = tx.run(
        "INSERT INTO mandates
             (principal_key, mandate_id, document_sha256, principal, currency, budget_minor, max_sagas)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
        &mandate_row,
    );
    let reservation = tx.run(
        "INSERT INTO mandate_reservations
             (saga_id, principal_key, mandate_id, reserved_minor, spent_minor, at_ms)
         VALUES ($1, $2, $3, $4, NULL, $5)",
        &reservation_row,
    );
    let take = tx.run(TAKE_BUDGET, &take_row);
    let (_, _, taken) = futures::try_join!(mandate, reservation, take).map_err(&failed)?;
    Ok(taken == 1)
}

/// How many times a reservation refused by the database is tried again when the refusal
/// cannot be explained by what the mandate's row then shows (it changed in between).
const RESERVE_ATTEMPTS: usize = 3;

/// Why the budget refused the reservation, from the mandate's row as it stands; `None`
/// once a try again took it (the row changed between the refusal and the read).
async fn refused(tx: &Transaction<'_>, hold: &MandateHold) -> Result<Option<Violation>> {
    let failed = store("cannot reserve against a mandate");
    let key: [&(dyn ToSql + Sync); 2] = [&hold.principal_key, &hold.mandate_id];
    let (reserved, budget, max_sagas) = take_budget_row(hold);
    for _ in 0..RESERVE_ATTEMPTS {
        let row = tx
            .row(
                "SELECT document_sha256, used_minor, sagas FROM mandates
                 WHERE principal_key = $1 AND mandate_id = $2",
                &key,
            )
            .await
            .map_err(&failed)?;
        let (known, used, sagas): (String, i64, i64) = (row.get(0), row.get(1), row.get(2));
        if let Some(violation) = mandates::refusal_for(hold, &known, to_u64(used), to_u64(sagas)) {
            return Ok(Some(violation));
        }
        let taken = tx
            .run(
                TAKE_BUDGET,
                &[
                    &hold.principal_key,
                    &hold.mandate_id,
                    &reserved,
                    &hold.document_sha256,
                    &budget,
                    &max_sagas,
                ],
            )
            .await
            .map_err(&failed)?;
        if taken == 1 {
            return Ok(None);
        }
    }
    Err(Error::Journal(format!(
        "the reservation against mandate {:?} was refused {RESERVE_ATTEMPTS} times while its row allowed it",
        hold.mandate_id
    )))
}

/// Inside the transaction that finishes `saga_id`: the rules of `mandates::settle`. The
/// mandate's row is written only when the saga gives budget back.
async fn settle(tx: &Transaction<'_>, saga_id: &str, spent: u64) -> Result<()> {
    let failed = store("cannot settle a mandate's reservation");
    let Some(row) = tx
        .row_opt(
            "UPDATE mandate_reservations SET spent_minor = LEAST($2, reserved_minor)
             WHERE saga_id = $1 AND spent_minor IS NULL
             RETURNING principal_key, mandate_id, reserved_minor - spent_minor",
            &[&saga_id, &to_i64(spent)],
        )
        .await
        .map_err(&failed)?
    else {
        return Ok(());
    };
    let (principal_key, mandate_id, unspent): (String, String, i64) =
        (row.get(0), row.get(1), row.get(2));
    if unspent == 0 {
        return Ok(());
    }
    tx.run(
        "UPDATE mandates SET used_minor = used_minor - $3
         WHERE principal_key = $1 AND mandate_id = $2",
        &[&principal_key, &mandate_id, &unspent],
    )
    .await
    .map_err(&failed)?;
    Ok(())
}
