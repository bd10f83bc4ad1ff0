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

use crate::error::{Error, Result};
use crate::saga::{Event, Invocation, SagaSpec};

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "camelCase")]
pub enum Entry {
    Event(Event),
    Intent(Invocation),
}

/// What the journal keeps about a saga besides its entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SagaHeader {
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
    /// Records a new saga with the entries of its first step, as one durable write.
    /// Durable when it returns.
    async fn begin(&self, header: &SagaHeader, first: &[Entry]) -> Result<()>;
    /// Appends entries, in order, as one durable write: all of them or none. Durable
    /// when it returns; concurrent appends share an fsync.
    async fn append(&self, saga_id: &str, entries: &[Entry]) -> Result<()>;
    /// Marks a saga finished (it needs no recovery).
    async fn finish(&self, saga_id: &str) -> Result<()>;
    async fn load(&self, saga_id: &str) -> Result<Option<(SagaHeader, Vec<Entry>)>>;
    /// Sagas not finished: the ones to resume after a restart.
    async fn unfinished(&self) -> Result<Vec<String>>;
    /// The header of a saga, if one with this id was ever begun.
    async fn header(&self, saga_id: &str) -> Result<Option<SagaHeader>> {
        Ok(self.load(saga_id).await?.map(|(header, _)| header))
    }
}

#[derive(Debug)]
enum Write {
    /// The header, and the first append when there is one.
    Begin {
        saga_id: String,
        body: String,
        first: Option<String>,
    },
    /// The entries of one append, as one row: a JSON array.
    Append {
        saga_id: String,
        body: String,
    },
    Finish {
        saga_id: String,
    },
}

fn apply(tx: &Transaction<'_>, write: &Write) -> rusqlite::Result<()> {
    match write {
        Write::Begin {
            saga_id,
            body,
            first,
        } => {
            tx.prepare_cached("INSERT INTO sagas (saga_id, header, finished) VALUES (?1, ?2, 0)")?
                .execute(params![saga_id, body])?;
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
        Write::Finish { saga_id } => tx
            .prepare_cached("UPDATE sagas SET finished = 1 WHERE saga_id = ?1")?
            .execute(params![saga_id]),
    }
    .map(|_| ())
}

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
                 saga_id  TEXT PRIMARY KEY,
                 header   TEXT NOT NULL,
                 finished INTEGER NOT NULL
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

/// The sagas to resume, read from the index of unfinished ones (named: a scan of the
/// table would read every header ever journaled to reach `finished`).
const UNFINISHED: &str =
    "SELECT saga_id FROM sagas INDEXED BY sagas_unfinished WHERE finished = 0 ORDER BY saga_id";

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
        self.submit(Write::Begin {
            saga_id: header.saga_id.clone(),
            body,
            first,
        })
        .await
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

    async fn finish(&self, saga_id: &str) -> Result<()> {
        self.submit(Write::Finish {
            saga_id: saga_id.to_owned(),
        })
        .await
    }

    async fn load(&self, saga_id: &str) -> Result<Option<(SagaHeader, Vec<Entry>)>> {
        let saga_id = saga_id.to_owned();
        let found = self
            .reader
            .read(move |conn| {
                let Some(header) = conn
                    .query_row(
                        "SELECT header FROM sagas WHERE saga_id = ?1",
                        [&saga_id],
                        |row| decode::<SagaHeader>(&row.get::<_, String>(0)?),
                    )
                    .optional()?
                else {
                    return Ok(None);
                };
                let mut statement =
                    conn.prepare("SELECT body FROM entries WHERE saga_id = ?1 ORDER BY seq")?;
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

    async fn finish(&self, saga_id: &str) -> Result<()> {
        self.inner.finish(saga_id).await?;
        self.written("finish").await;
        Ok(())
    }

    async fn load(&self, saga_id: &str) -> Result<Option<(SagaHeader, Vec<Entry>)>> {
        self.inner.load(saga_id).await
    }

    async fn unfinished(&self) -> Result<Vec<String>> {
        self.inner.unfinished().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
