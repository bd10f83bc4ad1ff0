//! The PostgreSQL journal, shared by executor replicas: each saga's owner, epoch and lease
//! on its row; every append fenced by a lock on that row in the append's own statement,
//! so a claim and an append of one saga are ordered by the database, never by a replica's
//! memory; accepting a plan reserves its mandate's budget in the same transaction.

use agent_host::store::postgres::{
    Cached, Connection, DriverError, Migration, Postgres, ToSql, Transaction, failed, to_i64,
    to_u64,
};
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use shared_types::Violation;
use tokio::sync::{mpsc, oneshot};

use super::{Claim, Entry, Epoch, Forgettable, Headers, Ownership, SagaHeader, SagaLog};
use crate::error::{Error, Result};
use crate::mandates::{self, MandateHold};

/// The journal's schema in PostgreSQL, in order; the count is its version.
const MIGRATIONS: &[Migration] = &[Migration {
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
}];

/// The journal in a PostgreSQL database; one owner per opening (a replica's run).
#[derive(Debug, Clone)]
pub struct PostgresJournal {
    db: Postgres,
    owner: String,
    lease: std::time::Duration,
    appends: Appends,
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
            appends: Appends::start(db),
        })
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
            appends: Appends::start(&self.db),
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

/// One append waiting for its commit.
struct Append {
    saga_id: String,
    body: String,
    epoch: i64,
    owner: String,
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

/// At most this many appends share a commit.
const BATCH: usize = 128;

/// Writers committing batches at once: while one waits for its commit, the next batch
/// gathers and goes out on another connection.
const WRITERS: usize = 2;

type Appended = oneshot::Sender<std::result::Result<bool, String>>;

/// Group commit of appends: they queue to the writers (`WRITERS`), each of which commits
/// all that queued while the last commit was made as one transaction, its statements
/// pipelined on one connection. An append alone is one statement, one round trip.
#[derive(Debug, Clone)]
struct Appends {
    queue: mpsc::UnboundedSender<(Append, Appended)>,
    /// The writers; they end when the last clone of their journal is dropped.
    _writers: Arc<AbortOnDrop>,
}

#[derive(Debug)]
struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for writer in &self.0 {
            writer.abort();
        }
    }
}

type Queued = Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<(Append, Appended)>>>;

impl Appends {
    fn start(db: &Postgres) -> Self {
        let (queue, queued) = mpsc::unbounded_channel();
        let queued: Queued = Arc::new(tokio::sync::Mutex::new(queued));
        let writers = (0..WRITERS)
            .map(|_| tokio::spawn(write_appends(db.clone(), queued.clone())))
            .collect();
        Self {
            queue,
            _writers: Arc::new(AbortOnDrop(writers)),
        }
    }

    /// Whether the append was written (`false`: fenced); durable when it returns.
    async fn append(&self, append: Append) -> Result<bool> {
        let (done, written) = oneshot::channel();
        let gone = || Error::Journal("the journal's writer has stopped".to_owned());
        self.queue.send((append, done)).map_err(|_| gone())?;
        written
            .await
            .map_err(|_| gone())?
            .map_err(|e| Error::Storage(agent_host::Error::Store(e)))
    }
}

/// One writer: takes what queued (waiting for the first), commits it, again. A saga's
/// appends never share a batch or race each other: its driver waits for each.
async fn write_appends(db: Postgres, queued: Queued) {
    loop {
        let batch = {
            let mut queued = queued.lock().await;
            let Some(first) = queued.recv().await else {
                return;
            };
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match queued.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            batch
        };
        let outcome = commit_appends(&db, &batch).await;
        match outcome {
            Ok(written) => {
                for ((_, done), written) in batch.into_iter().zip(written) {
                    let _ = done.send(Ok(written));
                }
            }
            Err(e) => {
                // `commit_appends` said what failed; every append of the batch failed.
                let text = e.to_string();
                for (_, done) in batch {
                    let _ = done.send(Err(text.clone()));
                }
            }
        }
    }
}

/// An append's parameters, in `APPEND`'s order.
fn row_of(append: &Append) -> [&(dyn ToSql + Sync); 4] {
    [&append.saga_id, &append.body, &append.epoch, &append.owner]
}

/// Commits `batch`, each append fenced as alone; which were written.
async fn commit_appends(
    db: &Postgres,
    batch: &[(Append, Appended)],
) -> std::result::Result<Vec<bool>, agent_host::Error> {
    let mut conn = db.connection().await?;
    let failed = |e: DriverError| failed("cannot append to a saga", &e);
    let statement = conn.prepare_cached(APPEND).await.map_err(failed)?;
    if let [(append, _)] = batch {
        let written = conn
            .execute(&statement, &row_of(append))
            .await
            .map_err(failed)?;
        return Ok(vec![written == 1]);
    }
    let tx = conn.transaction().await.map_err(failed)?;
    let rows: Vec<_> = batch.iter().map(|(append, _)| row_of(append)).collect();
    // Polled together, the statements go out back to back on the one connection.
    let written = futures::future::try_join_all(rows.iter().map(|row| tx.execute(&statement, row)))
        .await
        .map_err(failed)?;
    tx.commit().await.map_err(failed)?;
    Ok(written.into_iter().map(|n| n == 1).collect())
}

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
        if let Some(hold) = &header.spec.mandate
            && let Some(violation) = reserve(&tx, &header.saga_id, hold, at_ms).await?
        {
            // Dropped, the transaction rolls back: nothing is written.
            return Err(Error::Mandate(violation));
        }
        tx.run(
            "INSERT INTO sagas (saga_id, task_id, header, finished_ms, mandate_ends_ms, owner,
                                epoch, lease_until_ms)
             VALUES ($1, $2, $3, $4, $5, $6, 1, $7)",
            &[
                &header.saga_id,
                &header.task_id,
                &body,
                &at_ms,
                &mandate_ends_ms(header),
                &self.owner,
                &self.lease_until(at_ms),
            ],
        )
        .await
        .map_err(store("cannot begin a saga"))?;
        if let Some(first) = first {
            tx.run(
                "INSERT INTO entries (saga_id, body) VALUES ($1, $2)",
                &[&header.saga_id, &first],
            )
            .await
            .map_err(store("cannot begin a saga"))?;
        }
        tx.commit().await.map_err(store("cannot begin a saga"))?;
        Ok(1)
    }

    async fn append(&self, saga_id: &str, epoch: Epoch, entries: &[Entry]) -> Result<()> {
        let body = encode(&entries)?;
        let written = self
            .appends
            .append(Append {
                saga_id: saga_id.to_owned(),
                body,
                epoch: to_i64(epoch),
                owner: self.owner.clone(),
            })
            .await?;
        if !written {
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
        settle(&tx, saga_id, spent_minor).await?;
        tx.run(
            "UPDATE sagas SET finished = TRUE, finished_ms = $2 WHERE saga_id = $1",
            &[&saga_id, &at_ms],
        )
        .await
        .map_err(store("cannot finish a saga"))?;
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

/// Inside the transaction that begins `saga_id`: the rules of `mandates::reserve`, with the
/// mandate's row locked so that replicas accepting plans under one mandate at once are
/// serialized on it.
async fn reserve(
    tx: &Transaction<'_>,
    saga_id: &str,
    hold: &MandateHold,
    at_ms: i64,
) -> Result<Option<Violation>> {
    let failed = store("cannot reserve against a mandate");
    let key: [&(dyn ToSql + Sync); 2] = [&hold.principal_key, &hold.mandate_id];
    let revoked = tx
        .row_opt(
            "SELECT 1 FROM mandate_revocations WHERE principal_key = $1 AND mandate_id = $2",
            &key,
        )
        .await
        .map_err(&failed)?
        .is_some();
    if revoked {
        return Ok(Some(mandates::revoked(hold)));
    }
    tx.run(
        "INSERT INTO mandates
             (principal_key, mandate_id, document_sha256, principal, currency, budget_minor, max_sagas)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
        &[
            &hold.principal_key,
            &hold.mandate_id,
            &hold.document_sha256,
            &hold.principal,
            &hold.budget.currency.as_str(),
            &to_i64(hold.budget.amount_minor.get()),
            &hold.max_sagas.map(i64::from),
        ],
    )
    .await
    .map_err(&failed)?;
    let row = tx
        .row(
            "SELECT document_sha256, used_minor, sagas FROM mandates
             WHERE principal_key = $1 AND mandate_id = $2 FOR UPDATE",
            &key,
        )
        .await
        .map_err(&failed)?;
    let (known, used, sagas): (String, i64, i64) = (row.get(0), row.get(1), row.get(2));
    if let Some(violation) = mandates::refusal_for(hold, &known, to_u64(used), to_u64(sagas)) {
        return Ok(Some(violation));
    }
    tx.run(
        "INSERT INTO mandate_reservations
             (saga_id, principal_key, mandate_id, reserved_minor, spent_minor, at_ms)
         VALUES ($1, $2, $3, $4, NULL, $5)",
        &[
            &saga_id,
            &hold.principal_key,
            &hold.mandate_id,
            &to_i64(hold.reserved_minor),
            &at_ms,
        ],
    )
    .await
    .map_err(&failed)?;
    tx.run(
        "UPDATE mandates SET used_minor = used_minor + $3, sagas = sagas + 1
         WHERE principal_key = $1 AND mandate_id = $2",
        &[
            &hold.principal_key,
            &hold.mandate_id,
            &to_i64(hold.reserved_minor),
        ],
    )
    .await
    .map_err(&failed)?;
    Ok(None)
}

/// Inside the transaction that finishes `saga_id`: the rules of `mandates::settle`.
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
    tx.run(
        "UPDATE mandates SET used_minor = used_minor - $3
         WHERE principal_key = $1 AND mandate_id = $2",
        &[&principal_key, &mandate_id, &unspent],
    )
    .await
    .map_err(&failed)?;
    Ok(())
}
