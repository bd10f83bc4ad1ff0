//! The write-ahead journal: for each saga, its spec, then every event and every
//! invocation intent in the order they happened. An event and the intents it leads to
//! are journaled together, in one durable write, before any of those calls is made;
//! replaying the journal therefore rebuilds the saga exactly, and shows which calls were
//! made but never answered.

use std::path::Path;

use agent_host::store::durable::{Database, Reader};
use async_trait::async_trait;
use rusqlite::{OptionalExtension, Transaction, params};
use serde::{Deserialize, Serialize};

use std::sync::{Arc, Mutex};

use shared_types::Violation;

use crate::error::{Error, Result};
use crate::mandates::{self, MandateHold};
use crate::saga::{Event, Invocation, SagaSpec};
use crate::sync;

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "camelCase")]
pub enum Entry {
    Event(Event),
    Intent(Invocation),
}

/// The format of the journal this build writes and reads: of the header, the entries and
/// what replay derives from them. A saga journaled in a format this build does not know
/// (by a newer executor) is refused, not replayed under other rules.
pub const JOURNAL_FORMAT: u32 = 1;

/// Journals from before the header carried its format are format 1.
fn first_format() -> u32 {
    1
}

/// What the journal keeps about a saga besides its entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SagaHeader {
    /// The journal format the saga was written in (`JOURNAL_FORMAT` when it was begun).
    #[serde(default = "first_format")]
    pub format: u32,
    pub saga_id: String,
    pub plan_version: u32,
    /// The A2A task that reports this saga, and its context.
    pub task_id: String,
    pub context_id: String,
    /// The signed plan as received (to recognise a resubmission).
    pub plan: serde_json::Value,
    pub spec: SagaSpec,
}

/// Where sagas are journaled. A PostgreSQL journal (shared by executor replicas, with a
/// lease per saga) implements the same trait.
#[async_trait]
pub trait Journal: Send + Sync + 'static {
    /// Records a new saga with the entries of its first step, as one durable write that
    /// also reserves the plan's worst case against its mandate (`Error::Mandate` when the
    /// mandate cannot cover it, or was revoked: nothing is then written). Durable when
    /// it returns.
    async fn begin(&self, header: &SagaHeader, first: &[Entry]) -> Result<()>;
    /// Appends entries, in order, as one durable write: all of them or none. Durable
    /// when it returns; concurrent appends share an fsync.
    async fn append(&self, saga_id: &str, entries: &[Entry]) -> Result<()>;
    /// Marks a saga finished (it needs no recovery), and settles its mandate's
    /// reservation at `spent_minor`, what it really spent.
    async fn finish(&self, saga_id: &str, spent_minor: u64) -> Result<()>;
    async fn load(&self, saga_id: &str) -> Result<Option<(SagaHeader, Vec<Entry>)>>;
    /// Sagas not finished: the ones to resume after a restart.
    async fn unfinished(&self) -> Result<Vec<String>>;
    /// The oldest finished sagas (at most `at_most`) that may be forgotten: finished before
    /// `finished_before_ms`, with a plan whose mandate expired before `now_ms`, so that the
    /// same plan sent again is refused instead of run again.
    async fn forgettable(
        &self,
        finished_before_ms: i64,
        now_ms: i64,
        at_most: usize,
    ) -> Result<Vec<Forgettable>>;
    /// Deletes finished sagas (entries and header), in one durable write; an unfinished
    /// one among them is kept.
    async fn forget(&self, saga_ids: &[String]) -> Result<()>;
    /// The header of a saga, if one with this id was ever begun.
    async fn header(&self, saga_id: &str) -> Result<Option<SagaHeader>> {
        Ok(self.load(saga_id).await?.map(|(header, _)| header))
    }
    /// Whether a saga was marked finished; `None` if none with this id was begun (or it
    /// was forgotten).
    async fn is_finished(&self, saga_id: &str) -> Result<Option<bool>> {
        if self.header(saga_id).await?.is_none() {
            return Ok(None);
        }
        Ok(Some(
            !self.unfinished().await?.iter().any(|id| id == saga_id),
        ))
    }
}

#[derive(Debug)]
enum Write {
    /// The header, and the first append when there is one.
    Begin {
        saga_id: String,
        body: String,
        first: Option<String>,
        at_ms: i64,
        hold: Option<Box<MandateHold>>,
        /// Set when the mandate refused the saga (then nothing was written).
        refused: Arc<Mutex<Option<Violation>>>,
    },
    /// The entries of one append, as one row: a JSON array.
    Append { saga_id: String, body: String },
    Finish {
        saga_id: String,
        at_ms: i64,
        spent_minor: u64,
    },
    /// Sagas forgotten: their entries and headers.
    Forget { saga_ids: Vec<String> },
}

fn apply(tx: &Transaction<'_>, write: &Write) -> rusqlite::Result<()> {
    match write {
        Write::Begin {
            saga_id,
            body,
            first,
            at_ms,
            hold,
            refused,
        } => {
            // Run again alone when a write it shared a transaction with failed: what the
            // last run found is what holds.
            *sync::lock(refused) = None;
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
                "INSERT INTO sagas (saga_id, header, finished, finished_ms) VALUES (?1, ?2, 0, ?3)",
            )?
            .execute(params![saga_id, body, at_ms])?;
            match first {
                Some(first) => tx
                    .prepare_cached("INSERT INTO entries (saga_id, body) VALUES (?1, ?2)")?
                    .execute(params![saga_id, first]),
                None => Ok(0),
            }
        }
        Write::Append { saga_id, body } => tx
            .prepare_cached("INSERT INTO entries (saga_id, body) VALUES (?1, ?2)")?
            .execute(params![saga_id, body]),
        Write::Finish {
            saga_id,
            at_ms,
            spent_minor,
        } => {
            mandates::settle(tx, saga_id, *spent_minor)?;
            tx.prepare_cached("UPDATE sagas SET finished = 1, finished_ms = ?2 WHERE saga_id = ?1")?
                .execute(params![saga_id, at_ms])
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

/// A saga the journal forgot, and the task that reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forgettable {
    pub saga_id: String,
    pub task_id: String,
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
}

impl SqliteJournal {
    /// Opens (or creates) a journal of its own at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        Self::on(&Database::open(path, "journal")?)
    }

    /// The journal in `db`, whose writes share its group commit with the other stores
    /// there.
    pub fn on(db: &Database) -> Result<Self> {
        db.prepare(
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
             -- Only the sagas still running: the start reads these, not every saga ever
             -- run (whose headers it would read through to reach `finished`).
             CREATE INDEX IF NOT EXISTS sagas_unfinished ON sagas (saga_id) WHERE finished = 0;",
        )?;
        // The accepting and finishing writes reserve and settle mandates' budgets.
        db.prepare(mandates::SCHEMA)?;
        mandates::add_totals(db)?;
        add_finish_times(db)?;
        db.prepare(
            "CREATE INDEX IF NOT EXISTS sagas_by_finish ON sagas (finished_ms) WHERE finished = 1;",
        )?;
        Ok(Self {
            reader: db.reader()?,
            db: db.clone(),
        })
    }

    /// Queues `write`; durable when the future resolves.
    async fn submit(&self, write: Write) -> Result<()> {
        Ok(self.db.submit(move |tx| apply(tx, &write)).await?)
    }
}

/// Gives a journal from before sagas had finish times its `finished_ms` column. Its
/// finished sagas count as finished at the upgrade, so they are kept for the whole
/// retention from there: the column's default, which SQLite reads for rows written before
/// it, with no row rewritten (a rewrite took seconds per 100,000 sagas). Rows written
/// later that leave it out are unfinished, and `finish` sets it.
fn add_finish_times(db: &Database) -> Result<()> {
    let conn = agent_host::store::durable::open_connection(db.path(), "journal")?;
    let migrate = || -> rusqlite::Result<()> {
        let has_column = conn
            .prepare("SELECT 1 FROM pragma_table_info('sagas') WHERE name = 'finished_ms'")?
            .exists([])?;
        if !has_column {
            let now = chrono::Utc::now().timestamp_millis();
            tracing::info!("adding finish times to the journal (once, after an upgrade)");
            conn.execute_batch(&format!(
                "ALTER TABLE sagas ADD COLUMN finished_ms INTEGER DEFAULT {now};"
            ))?;
        }
        Ok(())
    };
    migrate().map_err(|e| Error::Journal(format!("cannot add finish times to the journal: {e}")))
}

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
    serde_json::to_string(value).map_err(|e| Error::Journal(format!("cannot encode: {e}")))
}

fn decode<T: for<'de> Deserialize<'de>>(text: &str) -> rusqlite::Result<T> {
    serde_json::from_str(text).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

#[async_trait]
impl Journal for SqliteJournal {
    async fn begin(&self, header: &SagaHeader, first: &[Entry]) -> Result<()> {
        let body = encode(header)?;
        let first = if first.is_empty() {
            None
        } else {
            Some(encode(&first)?)
        };
        let refused = Arc::new(Mutex::new(None));
        self.submit(Write::Begin {
            saga_id: header.saga_id.clone(),
            body,
            first,
            at_ms: chrono::Utc::now().timestamp_millis(),
            hold: header.spec.mandate.clone().map(Box::new),
            refused: refused.clone(),
        })
        .await?;
        match sync::lock(&refused).take() {
            Some(violation) => Err(Error::Mandate(violation)),
            None => Ok(()),
        }
    }

    async fn append(&self, saga_id: &str, entries: &[Entry]) -> Result<()> {
        // One row per append: the entries of a step are written and read together.
        let body = encode(&entries)?;
        self.submit(Write::Append {
            saga_id: saga_id.to_owned(),
            body,
        })
        .await
    }

    async fn finish(&self, saga_id: &str, spent_minor: u64) -> Result<()> {
        self.submit(Write::Finish {
            saga_id: saga_id.to_owned(),
            at_ms: chrono::Utc::now().timestamp_millis(),
            spent_minor,
        })
        .await
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

    /// The header alone: every submission asks, and a saga's entries are not needed.
    async fn header(&self, saga_id: &str) -> Result<Option<SagaHeader>> {
        let saga_id = saga_id.to_owned();
        Ok(self
            .reader
            .read(move |conn| read_header(conn, &saga_id))
            .await?)
    }

    async fn is_finished(&self, saga_id: &str) -> Result<Option<bool>> {
        let saga_id = saga_id.to_owned();
        Ok(self
            .reader
            .read(move |conn| {
                conn.prepare_cached("SELECT finished FROM sagas WHERE saga_id = ?1")?
                    .query_row([saga_id], |row| row.get::<_, bool>(0))
                    .optional()
            })
            .await?)
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
}

/// Fault injection for crash tests: passes every write through to `inner`, and after the
/// `after`-th durable write announces it on stderr and never returns, so that a test can
/// SIGKILL the process at exactly that journal point.
#[derive(Debug)]
pub struct PauseAfterWrites<J> {
    inner: J,
    after: u64,
    writes: std::sync::atomic::AtomicU64,
}

impl<J: Journal> PauseAfterWrites<J> {
    pub fn new(inner: J, after: u64) -> Self {
        Self {
            inner,
            after,
            writes: std::sync::atomic::AtomicU64::new(0),
        }
    }

    async fn written(&self, what: &str) {
        let n = self
            .writes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        if n == self.after {
            eprintln!("journal write {n} ({what}) is durable; pausing for a crash test");
            std::future::pending::<()>().await;
        }
    }
}

#[async_trait]
impl<J: Journal> Journal for PauseAfterWrites<J> {
    async fn begin(&self, header: &SagaHeader, first: &[Entry]) -> Result<()> {
        self.inner.begin(header, first).await?;
        self.written("begin").await;
        Ok(())
    }

    async fn append(&self, saga_id: &str, entries: &[Entry]) -> Result<()> {
        self.inner.append(saga_id, entries).await?;
        let what: Vec<&str> = entries
            .iter()
            .map(|entry| match entry {
                Entry::Event(_) => "event",
                Entry::Intent(_) => "intent",
            })
            .collect();
        self.written(&what.join("+")).await;
        Ok(())
    }

    async fn finish(&self, saga_id: &str, spent_minor: u64) -> Result<()> {
        self.inner.finish(saga_id, spent_minor).await?;
        self.written("finish").await;
        Ok(())
    }

    async fn load(&self, saga_id: &str) -> Result<Option<(SagaHeader, Vec<Entry>)>> {
        self.inner.load(saga_id).await
    }

    async fn unfinished(&self) -> Result<Vec<String>> {
        self.inner.unfinished().await
    }

    async fn header(&self, saga_id: &str) -> Result<Option<SagaHeader>> {
        self.inner.header(saga_id).await
    }

    async fn is_finished(&self, saga_id: &str) -> Result<Option<bool>> {
        self.inner.is_finished(saga_id).await
    }

    async fn forgettable(
        &self,
        finished_before_ms: i64,
        now_ms: i64,
        at_most: usize,
    ) -> Result<Vec<Forgettable>> {
        self.inner
            .forgettable(finished_before_ms, now_ms, at_most)
            .await
    }

    async fn forget(&self, saga_ids: &[String]) -> Result<()> {
        self.inner.forget(saga_ids).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_journaled_before_it_carried_its_format_is_format_1() {
        let spec = serde_json::to_value(crate::saga::SagaSpec {
            saga_id: "s".into(),
            steps: Vec::new(),
            point_of_no_return: None,
            expires_at_ms: 0,
            mandate: None,
        })
        .unwrap();
        let old = serde_json::json!({"sagaId": "s", "planVersion": 1, "taskId": "t", "contextId": "c",
                         "plan": {}, "spec": spec});
        let header: SagaHeader = serde_json::from_value(old).unwrap();
        assert_eq!(header.format, 1);
        let written = serde_json::to_value(&header).unwrap();
        assert_eq!(written["format"], JOURNAL_FORMAT);
    }

    #[tokio::test]
    async fn a_journal_from_before_finish_times_keeps_its_finished_sagas_from_the_upgrade_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        let header =
            r#"{"taskId": "t-1", "plan": {"mandate": {"expiresAt": "2000-01-01T00:00:00Z"}}}"#;
        let earlier = rusqlite::Connection::open(&path).unwrap();
        earlier
            .execute_batch(&format!(
                "CREATE TABLE sagas (saga_id TEXT PRIMARY KEY, header TEXT NOT NULL, finished INTEGER NOT NULL);
                 CREATE TABLE entries (seq INTEGER PRIMARY KEY, saga_id TEXT NOT NULL REFERENCES sagas (saga_id), body TEXT NOT NULL);
                 INSERT INTO sagas VALUES ('done', '{header}', 1), ('running', '{header}', 0);
                 INSERT INTO entries (saga_id, body) VALUES ('done', '[]'), ('running', '[]');"
            ))
            .unwrap();
        drop(earlier);
        let upgraded_from = chrono::Utc::now().timestamp_millis();
        let journal = SqliteJournal::open(&path).unwrap();
        let upgraded_by = chrono::Utc::now().timestamp_millis();

        let found = journal.forgettable(upgraded_from, i64::MAX, 10).await;
        assert_eq!(found.unwrap(), [], "finished at the upgrade, not before");
        let found = journal.forgettable(upgraded_by + 1, i64::MAX, 10).await;
        let done = Forgettable {
            saga_id: "done".into(),
            task_id: "t-1".into(),
        };
        assert_eq!(found.unwrap(), [done]);

        // Asked to forget both, the journal keeps the one still running, entries and all.
        journal
            .forget(&["done".to_owned(), "running".to_owned()])
            .await
            .unwrap();
        assert_eq!(journal.unfinished().await.unwrap(), ["running"]);
        let conn = rusqlite::Connection::open(&path).unwrap();
        let left: Vec<String> = conn
            .prepare("SELECT saga_id FROM entries")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(left, ["running"]);
    }

    #[test]
    fn the_sagas_to_resume_are_read_from_their_index_not_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        let _journal = SqliteJournal::open(&path).unwrap();
        let conn = agent_host::store::durable::open_connection(&path, "test").unwrap();
        let details: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {UNFINISHED}"))
            .unwrap()
            .query_map([], |row| row.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let plan = details.join("; ");
        assert!(
            plan.contains("sagas_unfinished") && !plan.contains("TEMP B-TREE"),
            "{plan}"
        );
    }
}
