//! The SQLite journal: tables in the executor's state file (WAL, `synchronous=FULL`,
//! group commit), each saga's owner, epoch and lease on its row, and every append fenced
//! in its own transaction.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{OptionalExtension, Transaction, params};
use sagaplane_storage::schema::{self, Migration, has_column};
use sagaplane_storage::sqlite::{Database, Reader};
use serde::{Deserialize, Serialize};
use shared_types::Violation;

use super::{Claim, Ending, Entry, Epoch, Forgettable, Headers, Ownership, SagaHeader, SagaLog};
use crate::error::{Error, Result};
use crate::mandates;
use crate::saga::spec::MandateHold;
use crate::sync;
use agent_host::store::TaskWrite;

#[derive(Debug)]
enum Write {
    /// The header, and the first append when there is one.
    Begin {
        saga_id: String,
        task_id: String,
        body: String,
        first: Option<String>,
        at_ms: i64,
        hold: Option<Box<MandateHold>>,
        /// Set when the mandate refused the saga (then nothing was written).
        refused: Arc<Mutex<Option<Violation>>>,
        owner: Arc<str>,
        lease_until_ms: i64,
        /// The saga's task, created with it.
        task: Option<TaskWrite>,
        /// Set when the task exists already (then nothing was written).
        task_exists: Arc<AtomicBool>,
    },
    /// The entries of one append, as one row: a JSON array, under `owner` at `epoch`,
    /// and the task's write when given, all or nothing.
    Append {
        saga_id: String,
        body: String,
        owner: Arc<str>,
        epoch: Epoch,
        task: Option<TaskWrite>,
        /// What the write found: written, or refused (then nothing was written).
        outcome: Arc<Mutex<Outcome>>,
    },
    Claim {
        saga_id: String,
        owner: Arc<str>,
        now_ms: i64,
        lease_until_ms: i64,
        take_over: bool,
        claimed: Arc<Mutex<Option<Epoch>>>,
    },
    ClaimLapsed {
        owner: Arc<str>,
        now_ms: i64,
        lease_until_ms: i64,
        at_most: i64,
        claimed: Arc<Mutex<Vec<(String, Epoch)>>>,
    },
    Renew {
        owner: Arc<str>,
        lease_until_ms: i64,
        renewed: Arc<AtomicUsize>,
    },
    Release {
        saga_id: String,
        owner: Arc<str>,
        epoch: Epoch,
    },
    /// A saga's end: its last entries (a JSON array, when there are any) under `owner` at
    /// `epoch`, its finish, and the task's last write when given, all or nothing.
    End {
        saga_id: String,
        body: Option<String>,
        owner: Arc<str>,
        epoch: Epoch,
        at_ms: i64,
        spent_minor: u64,
        task: Option<TaskWrite>,
        /// What the write found: written, or refused (then nothing was written).
        outcome: Arc<Mutex<Outcome>>,
    },
    /// Sagas forgotten: their entries and headers.
    Forget { saga_ids: Vec<String> },
}

/// What a fenced write carrying a task's write (an append, an end) found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Outcome {
    #[default]
    Written,
    /// The saga's epoch or owner is another.
    Fenced,
    /// The task store holds another version of the task.
    TaskConflict,
}

/// The fence, in the transaction of the write: not a check in memory.
fn holds(tx: &Transaction<'_>, saga_id: &str, epoch: Epoch, owner: &str) -> rusqlite::Result<bool> {
    tx.prepare_cached("SELECT 1 FROM sagas WHERE saga_id = ?1 AND epoch = ?2 AND owner = ?3")?
        .exists(params![saga_id, epoch, owner])
}

/// The fence, then the task's write when given, in the transaction of a write: whether
/// both held, said in `outcome` too. Run again alone when a write it shared a transaction
/// with failed, so what the last run found is what holds; nothing is written unless both
/// pass.
fn fenced_write(
    tx: &Transaction<'_>,
    saga_id: &str,
    epoch: Epoch,
    owner: &str,
    task: Option<&TaskWrite>,
    outcome: &Mutex<Outcome>,
) -> rusqlite::Result<bool> {
    let found = if !holds(tx, saga_id, epoch, owner)? {
        Outcome::Fenced
    } else if let Some(task) = task
        && !agent_host::store::write_task_sqlite(tx, task)?
    {
        Outcome::TaskConflict
    } else {
        Outcome::Written
    };
    *sync::lock(outcome) = found;
    Ok(found == Outcome::Written)
}

/// A fenced write's outcome as the journal answers it.
fn found(outcome: Outcome, saga_id: &str, epoch: Epoch, task: Option<&TaskWrite>) -> Result<()> {
    match outcome {
        Outcome::Written => Ok(()),
        Outcome::Fenced => Err(Error::Fenced {
            saga_id: saga_id.to_owned(),
            epoch,
        }),
        Outcome::TaskConflict => Err(Error::Storage(agent_host::Error::Conflict {
            task_id: task.map(|t| t.id.clone()).unwrap_or_default(),
        })),
    }
}

fn finish(
    tx: &Transaction<'_>,
    saga_id: &str,
    at_ms: i64,
    spent_minor: u64,
) -> rusqlite::Result<usize> {
    mandates::settle(tx, saga_id, spent_minor)?;
    tx.prepare_cached("UPDATE sagas SET finished = 1, finished_ms = ?2 WHERE saga_id = ?1")?
        .execute(params![saga_id, at_ms])
}

fn apply(tx: &Transaction<'_>, write: &Write) -> rusqlite::Result<()> {
    match write {
        Write::Begin {
            saga_id,
            task_id,
            body,
            first,
            at_ms,
            hold,
            refused,
            owner,
            lease_until_ms,
            task,
            task_exists,
        } => {
            // Run again alone when a write it shared a transaction with failed: what the
            // last run found is what holds.
            *sync::lock(refused) = None;
            let exists = match task {
                Some(task) => tx
                    .prepare_cached("SELECT 1 FROM tasks WHERE id = ?1")?
                    .exists([&task.id])?,
                None => false,
            };
            task_exists.store(exists, Ordering::SeqCst);
            if exists {
                return Ok(());
            }
            // A saga begun already keeps its reservation; the insert below then fails.
            let begun = tx
                .prepare_cached("SELECT 1 FROM sagas WHERE saga_id = ?1")?
                .exists([saga_id])?;
            if let Some(hold) = hold
                && !begun
                && let Some(violation) = mandates::reserve(tx, saga_id, hold, *at_ms)?
            {
                *sync::lock(refused) = Some(violation);
                return Ok(());
            }
            // `finished_ms` holds the begin time until the saga finishes: a time the same
            // size as the one `finish` writes, so finishing rewrites the row in place
            // instead of the whole header behind it.
            tx.prepare_cached(
                "INSERT INTO sagas (saga_id, task_id, header, finished, finished_ms, owner, epoch,
                                    lease_until_ms)
                 VALUES (?1, ?2, ?3, 0, ?4, ?5, 1, ?6)",
            )?
            .execute(params![
                saga_id,
                task_id,
                body,
                at_ms,
                owner.as_ref(),
                lease_until_ms
            ])?;
            if let Some(task) = task {
                // Absent, as read above: one writer, and this transaction.
                agent_host::store::write_task_sqlite(tx, task)?;
            }
            match first {
                Some(first) => tx
                    .prepare_cached("INSERT INTO entries (saga_id, body) VALUES (?1, ?2)")?
                    .execute(params![saga_id, first]),
                None => Ok(0),
            }
        }
        Write::Append {
            saga_id,
            body,
            owner,
            epoch,
            task,
            outcome,
        } => {
            if !fenced_write(tx, saga_id, *epoch, owner, task.as_ref(), outcome)? {
                return Ok(());
            }
            tx.prepare_cached("INSERT INTO entries (saga_id, body) VALUES (?1, ?2)")?
                .execute(params![saga_id, body])
        }
        Write::Claim {
            saga_id,
            owner,
            now_ms,
            lease_until_ms,
            take_over,
            claimed,
        } => {
            let changed = tx
                .prepare_cached(
                    "UPDATE sagas SET owner = ?2, epoch = epoch + 1, lease_until_ms = ?3
                     WHERE saga_id = ?1 AND finished = 0
                       AND (?4 OR owner IS NULL OR lease_until_ms < ?5)",
                )?
                .execute(params![
                    saga_id,
                    owner.as_ref(),
                    lease_until_ms,
                    take_over,
                    now_ms
                ])?;
            *sync::lock(claimed) = if changed == 0 {
                None
            } else {
                tx.prepare_cached("SELECT epoch FROM sagas WHERE saga_id = ?1")?
                    .query_row([saga_id], |row| row.get(0))
                    .optional()?
            };
            Ok(0)
        }
        Write::ClaimLapsed {
            owner,
            now_ms,
            lease_until_ms,
            at_most,
            claimed,
        } => {
            // One writer: no other owner claims between the choice and the update.
            let mut statement = tx.prepare_cached(
                "UPDATE sagas SET owner = ?1, epoch = epoch + 1, lease_until_ms = ?2
                 WHERE saga_id IN (
                     SELECT saga_id FROM sagas INDEXED BY sagas_unfinished
                     WHERE finished = 0 AND (owner IS NULL OR lease_until_ms < ?3)
                       AND owner IS NOT ?1
                     ORDER BY saga_id LIMIT ?4
                 )
                 RETURNING saga_id, epoch",
            )?;
            let mut rows: Vec<(String, Epoch)> = statement
                .query_map(
                    params![owner.as_ref(), lease_until_ms, now_ms, at_most],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )?
                .collect::<rusqlite::Result<_>>()?;
            rows.sort();
            *sync::lock(claimed) = rows;
            Ok(0)
        }
        Write::Renew {
            owner,
            lease_until_ms,
            renewed,
        } => {
            let n = tx
                .prepare_cached(
                    // Through the index of unfinished sagas: not a scan of every saga ever run.
                    "UPDATE sagas INDEXED BY sagas_unfinished SET lease_until_ms = ?2
                     WHERE finished = 0 AND owner = ?1",
                )?
                .execute(params![owner.as_ref(), lease_until_ms])?;
            renewed.store(n, Ordering::SeqCst);
            Ok(0)
        }
        Write::Release {
            saga_id,
            owner,
            epoch,
        } => tx
            .prepare_cached(
                "UPDATE sagas SET owner = NULL, lease_until_ms = 0
                 WHERE saga_id = ?1 AND owner = ?2 AND epoch = ?3",
            )?
            .execute(params![saga_id, owner.as_ref(), epoch]),
        Write::End {
            saga_id,
            body,
            owner,
            epoch,
            at_ms,
            spent_minor,
            task,
            outcome,
        } => {
            if !fenced_write(tx, saga_id, *epoch, owner, task.as_ref(), outcome)? {
                return Ok(());
            }
            if let Some(body) = body {
                tx.prepare_cached("INSERT INTO entries (saga_id, body) VALUES (?1, ?2)")?
                    .execute(params![saga_id, body])?;
            }
            finish(tx, saga_id, *at_ms, *spent_minor)
        }
        Write::Forget { saga_ids } => {
            for saga_id in saga_ids {
                // Only a finished saga is ever forgotten.
                let finished = tx
                    .prepare_cached("SELECT 1 FROM sagas WHERE saga_id = ?1 AND finished = 1")?
                    .exists([saga_id])?;
                if finished {
                    tx.prepare_cached("DELETE FROM entries WHERE saga_id = ?1")?
                        .execute([saga_id])?;
                    tx.prepare_cached("DELETE FROM sagas WHERE saga_id = ?1")?
                        .execute([saga_id])?;
                }
            }
            Ok(0)
        }
    }
    .map(|_| ())
}

/// The oldest finished sagas that may be forgotten: finished before ?1, and whose plan's
/// mandate expired before ?2 (so that the plan, sent again, is refused, never run twice).
/// A plan without a readable expiry is kept.
const FORGETTABLE: &str = "SELECT saga_id, json_extract(header, '$.taskId')
     FROM sagas INDEXED BY sagas_by_finish
     WHERE finished = 1 AND finished_ms < ?1
       AND unixepoch(COALESCE(json_extract(header, '$.plan.mandate.notAfter'),
                              json_extract(header, '$.plan.mandate.expiresAt'))) * 1000 < ?2
     ORDER BY finished_ms LIMIT ?3";

/// The SQLite journal: tables in a `Database` (WAL, `synchronous=FULL`, group commit).
#[derive(Debug, Clone)]
pub struct SqliteJournal {
    reader: Reader,
    db: Database,
    /// This journal's owner: one per opening (a process's run).
    owner: Arc<str>,
    lease: std::time::Duration,
}

/// How long a claim holds a saga without renewal, unless set (`with_lease`).
pub const DEFAULT_LEASE: std::time::Duration = std::time::Duration::from_secs(10);

impl SqliteJournal {
    /// Opens (or creates) a journal of its own at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        Self::on(&Database::open(path, "journal")?)
    }

    /// The journal in `db`, whose writes share its group commit with the other stores
    /// there.
    pub fn on(db: &Database) -> Result<Self> {
        // The accepting and finishing writes reserve and settle mandates' budgets.
        schema::migrate(db, mandates::STORE, mandates::MIGRATIONS)?;
        schema::migrate(db, "journal", MIGRATIONS)?;
        Ok(Self {
            reader: db.reader()?,
            db: db.clone(),
            owner: uuid::Uuid::new_v4().to_string().into(),
            lease: DEFAULT_LEASE,
        })
    }

    /// The same journal, whose claims hold a saga for `lease` without renewal.
    pub fn with_lease(mut self, lease: std::time::Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The same state, opened by another owner (another process, in tests).
    pub fn as_other_owner(&self) -> Self {
        Self {
            owner: uuid::Uuid::new_v4().to_string().into(),
            ..self.clone()
        }
    }

    fn lease_until(&self, now_ms: i64) -> i64 {
        super::lease_until(self.lease, now_ms)
    }

    /// Queues `write`; durable when the future resolves.
    async fn submit(&self, write: Write) -> Result<()> {
        Ok(self.db.submit(move |tx| apply(tx, &write)).await?)
    }
}

/// The journal's schema, in order; the count is its version (`sagaplane_storage::schema`).
const MIGRATIONS: &[Migration] = &[
    Migration {
        what: "the sagas and their entries",
        apply: |tx| {
            tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS sagas (
                     saga_id     TEXT PRIMARY KEY,
                     header      TEXT NOT NULL,
                     finished    INTEGER NOT NULL,
                     finished_ms INTEGER
                 );
                 CREATE TABLE IF NOT EXISTS entries (
                     seq      INTEGER PRIMARY KEY,
                     saga_id  TEXT NOT NULL REFERENCES sagas (saga_id),
                     body     TEXT NOT NULL
                 );
                 CREATE INDEX IF NOT EXISTS entries_by_saga ON entries (saga_id, seq);
                 -- Only the sagas still running: the start reads these, not every saga
                 -- ever run (whose headers it would read through to reach `finished`).
                 CREATE INDEX IF NOT EXISTS sagas_unfinished ON sagas (saga_id) WHERE finished = 0;",
            )
        },
    },
    Migration {
        what: "finish times of sagas",
        apply: add_finish_times,
    },
    Migration {
        what: "an index of finished sagas by finish time",
        apply: |tx| {
            tx.execute_batch(
                "CREATE INDEX IF NOT EXISTS sagas_by_finish ON sagas (finished_ms) WHERE finished = 1;",
            )
        },
    },
    Migration {
        what: "who drives each saga: owner, epoch and lease",
        apply: add_ownership,
    },
    Migration {
        what: "the task of each saga, by which a task's saga is found",
        apply: add_task_ids,
    },
];

/// Gives a journal from before sagas had finish times its `finished_ms` column. Its
/// finished sagas count as finished at the upgrade, so they are kept for the whole
/// retention from there: the column's default, which SQLite reads for rows written before
/// it, with no row rewritten (a rewrite took seconds per 100,000 sagas). Rows written
/// later that leave it out are unfinished, and `finish` sets it.
fn add_finish_times(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    if !has_column(tx, "sagas", "finished_ms")? {
        let now = chrono::Utc::now().timestamp_millis();
        tx.execute_batch(&format!(
            "ALTER TABLE sagas ADD COLUMN finished_ms INTEGER DEFAULT {now};"
        ))?;
    }
    Ok(())
}

/// Adds who drives each saga (owner, epoch, lease) to a journal from before: its sagas
/// are then held by nobody, at epoch 0, and the next start claims them.
fn add_ownership(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    if !has_column(tx, "sagas", "owner")? {
        tx.execute_batch(
            "ALTER TABLE sagas ADD COLUMN owner TEXT;
             ALTER TABLE sagas ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
             ALTER TABLE sagas ADD COLUMN lease_until_ms INTEGER NOT NULL DEFAULT 0;",
        )?;
    }
    Ok(())
}

/// Each saga's task in a column of its own, indexed, read from the headers already
/// journaled.
fn add_task_ids(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    if !has_column(tx, "sagas", "task_id")? {
        tx.execute_batch(
            "ALTER TABLE sagas ADD COLUMN task_id TEXT;
             UPDATE sagas SET task_id = json_extract(header, '$.taskId');",
        )?;
    }
    tx.execute_batch("CREATE INDEX IF NOT EXISTS sagas_by_task ON sagas (task_id);")
}

/// Unfinished sagas nobody holds, or whose owner's lease lapsed before ?1.
const CLAIMABLE: &str = "SELECT saga_id FROM sagas INDEXED BY sagas_unfinished
     WHERE finished = 0 AND (owner IS NULL OR lease_until_ms < ?1) ORDER BY saga_id LIMIT ?2";

/// The sagas to resume, read from the index of unfinished ones (named: a scan of the
/// table would read every header ever journaled to reach `finished`).
const UNFINISHED: &str =
    "SELECT saga_id FROM sagas INDEXED BY sagas_unfinished WHERE finished = 0 ORDER BY saga_id";

fn read_header(conn: &rusqlite::Connection, saga_id: &str) -> rusqlite::Result<Option<SagaHeader>> {
    conn.prepare_cached("SELECT header FROM sagas WHERE saga_id = ?1")?
        .query_row([saga_id], |row| {
            decode::<SagaHeader>(&row.get::<_, String>(0)?)
        })
        .optional()
}

fn encode<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|source| Error::Encoding {
        what: "a journal entry",
        source,
    })
}

fn decode<T: for<'de> Deserialize<'de>>(text: &str) -> rusqlite::Result<T> {
    serde_json::from_str(text).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

#[async_trait]
impl SagaLog for SqliteJournal {
    async fn begin_creating(
        &self,
        header: &SagaHeader,
        first: &[Entry],
        task: Option<&TaskWrite>,
    ) -> Result<Epoch> {
        let body = encode(header)?;
        let at_ms = chrono::Utc::now().timestamp_millis();
        let task_exists = Arc::new(AtomicBool::new(false));
        let first = if first.is_empty() {
            None
        } else {
            Some(encode(&first)?)
        };
        let refused = Arc::new(Mutex::new(None));
        self.submit(Write::Begin {
            saga_id: header.saga_id.clone(),
            task_id: header.task_id.clone(),
            body,
            first,
            at_ms,
            hold: header.spec.mandate.clone().map(Box::new),
            refused: refused.clone(),
            owner: self.owner.clone(),
            lease_until_ms: self.lease_until(at_ms),
            task: task.cloned(),
            task_exists: task_exists.clone(),
        })
        .await?;
        if task_exists.load(Ordering::SeqCst) {
            return Err(Error::Storage(agent_host::Error::Conflict {
                task_id: task.map(|t| t.id.clone()).unwrap_or_default(),
            }));
        }
        match sync::lock(&refused).take() {
            Some(violation) => Err(Error::Mandate(violation)),
            None => Ok(1),
        }
    }

    async fn append_carrying(
        &self,
        saga_id: &str,
        epoch: Epoch,
        entries: &[Entry],
        task: Option<&TaskWrite>,
        // Never given (`checks_revocations` is false): the revocations of this process's
        // state file are read in memory first, exactly.
        _unrevoked: Option<super::Unrevoked<'_>>,
    ) -> Result<()> {
        // One row per append: the entries of a step are written and read together.
        let body = encode(&entries)?;
        let outcome = Arc::new(Mutex::new(Outcome::Written));
        self.submit(Write::Append {
            saga_id: saga_id.to_owned(),
            body,
            owner: self.owner.clone(),
            epoch,
            task: task.cloned(),
            outcome: outcome.clone(),
        })
        .await?;
        found(*sync::lock(&outcome), saga_id, epoch, task)
    }

    async fn end(
        &self,
        saga_id: &str,
        epoch: Epoch,
        entries: &[Entry],
        ending: &Ending,
        task: Option<&TaskWrite>,
    ) -> Result<()> {
        let body = if entries.is_empty() {
            None
        } else {
            Some(encode(&entries)?)
        };
        let outcome = Arc::new(Mutex::new(Outcome::Written));
        self.submit(Write::End {
            saga_id: saga_id.to_owned(),
            body,
            owner: self.owner.clone(),
            epoch,
            at_ms: chrono::Utc::now().timestamp_millis(),
            spent_minor: ending.spent_minor,
            task: task.cloned(),
            outcome: outcome.clone(),
        })
        .await?;
        found(*sync::lock(&outcome), saga_id, epoch, task)
    }

    async fn load(&self, saga_id: &str) -> Result<Option<(SagaHeader, Vec<Entry>)>> {
        let saga_id = saga_id.to_owned();
        let found = self
            .reader
            .read(move |conn| {
                let Some(header) = read_header(conn, &saga_id)? else {
                    return Ok(None);
                };
                let mut statement = conn
                    .prepare_cached("SELECT body FROM entries WHERE saga_id = ?1 ORDER BY seq")?;
                let mut entries = Vec::new();
                let mut rows = statement.query([&saga_id])?;
                while let Some(row) = rows.next()? {
                    let body: String = row.get(0)?;
                    // A row is the array of one append; a journal from before appends
                    // were grouped has one entry per row.
                    if body.starts_with('[') {
                        entries.extend(decode::<Vec<Entry>>(&body)?);
                    } else {
                        entries.push(decode::<Entry>(&body)?);
                    }
                }
                Ok(Some((header, entries)))
            })
            .await?;
        Ok(found)
    }

    async fn unfinished(&self) -> Result<Vec<String>> {
        let ids = self
            .reader
            .read(|conn| {
                let mut statement = conn.prepare(UNFINISHED)?;
                statement.query_map([], |row| row.get(0))?.collect()
            })
            .await?;
        Ok(ids)
    }

    async fn forgettable(
        &self,
        finished_before_ms: i64,
        now_ms: i64,
        at_most: usize,
    ) -> Result<Vec<Forgettable>> {
        let at_most = i64::try_from(at_most).unwrap_or(i64::MAX);
        let found = self
            .reader
            .read(move |conn| {
                conn.prepare(FORGETTABLE)?
                    .query_map(params![finished_before_ms, now_ms, at_most], |row| {
                        Ok(Forgettable {
                            saga_id: row.get(0)?,
                            task_id: row.get::<_, Option<String>>(1)?.unwrap_or_default(),
                        })
                    })?
                    .collect()
            })
            .await?;
        Ok(found)
    }

    async fn forget(&self, saga_ids: &[String]) -> Result<()> {
        self.submit(Write::Forget {
            saga_ids: saga_ids.to_vec(),
        })
        .await
    }
}

#[async_trait]
impl Ownership for SqliteJournal {
    async fn claim(&self, saga_id: &str, now_ms: i64, how: Claim) -> Result<Option<Epoch>> {
        let claimed = Arc::new(Mutex::new(None));
        self.submit(Write::Claim {
            saga_id: saga_id.to_owned(),
            owner: self.owner.clone(),
            now_ms,
            lease_until_ms: self.lease_until(now_ms),
            take_over: how == Claim::TakeOver,
            claimed: claimed.clone(),
        })
        .await?;
        Ok(sync::lock(&claimed).take())
    }

    async fn claim_lapsed(&self, now_ms: i64, at_most: usize) -> Result<Vec<(String, Epoch)>> {
        let claimed = Arc::new(Mutex::new(Vec::new()));
        self.submit(Write::ClaimLapsed {
            owner: self.owner.clone(),
            now_ms,
            lease_until_ms: self.lease_until(now_ms),
            at_most: i64::try_from(at_most).unwrap_or(i64::MAX),
            claimed: claimed.clone(),
        })
        .await?;
        Ok(std::mem::take(&mut *sync::lock(&claimed)))
    }

    async fn renew(&self, now_ms: i64) -> Result<usize> {
        let renewed = Arc::new(AtomicUsize::new(0));
        self.submit(Write::Renew {
            owner: self.owner.clone(),
            lease_until_ms: self.lease_until(now_ms),
            renewed: renewed.clone(),
        })
        .await?;
        Ok(renewed.load(Ordering::SeqCst))
    }

    async fn release(&self, saga_id: &str, epoch: Epoch) -> Result<()> {
        self.submit(Write::Release {
            saga_id: saga_id.to_owned(),
            owner: self.owner.clone(),
            epoch,
        })
        .await
    }

    async fn claimable(&self, now_ms: i64, at_most: usize) -> Result<Vec<String>> {
        let at_most = i64::try_from(at_most).unwrap_or(i64::MAX);
        Ok(self
            .reader
            .read(move |conn| {
                conn.prepare_cached(CLAIMABLE)?
                    .query_map(params![now_ms, at_most], |row| row.get(0))?
                    .collect()
            })
            .await?)
    }
}

#[async_trait]
impl Headers for SqliteJournal {
    /// The header alone: every submission asks, and a saga's entries are not needed.
    async fn header(&self, saga_id: &str) -> Result<Option<SagaHeader>> {
        let saga_id = saga_id.to_owned();
        Ok(self
            .reader
            .read(move |conn| read_header(conn, &saga_id))
            .await?)
    }

    async fn saga_of_task(&self, task_id: &str) -> Result<Option<(String, bool)>> {
        let task_id = task_id.to_owned();
        Ok(self
            .reader
            .read(move |conn| {
                conn.prepare_cached("SELECT saga_id, finished FROM sagas WHERE task_id = ?1")?
                    .query_row([task_id], |row| Ok((row.get(0)?, row.get::<_, bool>(1)?)))
                    .optional()
            })
            .await?)
    }
}

#[cfg(test)]
mod tests;
