//! Group commit on PostgreSQL: the writes of every store on a database (the executor's
//! journal appends and begins, the task store's writes) queue to a few writers, each of
//! which commits everything that queued while its last commit was made. A write is one
//! statement or a few that must commit together; the writes of one batch share a
//! transaction, sent as one pipeline (`BEGIN`, every statement, `COMMIT`) on one
//! connection: one round trip. A write is acknowledged only once its transaction
//! committed (`synchronous_commit` decides when that is durable; on by default).
//!
//! Locks decide which writes may share a transaction. A write whose statements lock only
//! a row no other write of another transaction locks at once (a task, under its manager's
//! lock) or take a `KEY SHARE` lock (the journal's fence) goes in the batch's common
//! transaction. A write that locks a row many writers share names it as its `group` (a
//! mandate, whose budget every saga under it takes): the writes of a group share a
//! transaction of their own, which locks that one row, so two transactions never wait
//! for each other's rows in opposite orders.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

use super::{Postgres, Row, ToSql, failed};
use crate::error::{Error, Result};

/// A write's parameter, owned: it waits in the queue for its batch.
pub type Param = Box<dyn ToSql + Send + Sync>;

/// One statement of a write, and what it answers.
pub struct Statement {
    pub sql: &'static str,
    pub params: Vec<Param>,
    /// Whether the caller wants its rows (`Done::Rows`) or the count it changed.
    pub returns_rows: bool,
}

/// What one statement of a committed write did.
#[derive(Debug)]
pub enum Done {
    Changed(u64),
    Rows(Vec<Row>),
}

/// At most this many writes share a commit.
const BATCH: usize = 128;

/// Writers committing batches at once: while one waits for its commit, the next batch
/// gathers and goes out on another connection.
const WRITERS: usize = 2;

type Answer = oneshot::Sender<std::result::Result<Vec<Done>, String>>;

struct Write {
    group: Option<String>,
    statements: Vec<Statement>,
    answer: Answer,
}

type Queue = Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Write>>>;

/// The queue to a database's writers; they end when it is dropped.
pub(super) struct Writes {
    queue: mpsc::UnboundedSender<Write>,
    writers: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Writes {
    fn drop(&mut self) {
        for writer in &self.writers {
            writer.abort();
        }
    }
}

impl Writes {
    /// Starts the writers on `db` (a handle whose own writes are never queued here).
    pub(super) fn start(db: Postgres) -> Self {
        let (queue, queued) = mpsc::unbounded_channel();
        let queued: Queue = Arc::new(tokio::sync::Mutex::new(queued));
        let writers = (0..WRITERS)
            .map(|_| tokio::spawn(write_batches(db.clone(), queued.clone())))
            .collect();
        Self { queue, writers }
    }

    /// Commits `statements` together in the next batch (in `group`'s transaction, when
    /// named); what each did, once committed.
    pub(super) async fn write(
        &self,
        group: Option<String>,
        statements: Vec<Statement>,
    ) -> Result<Vec<Done>> {
        let (answer, answered) = oneshot::channel();
        let gone = || Error::store("the database's writer has stopped");
        self.queue
            .send(Write {
                group,
                statements,
                answer,
            })
            .map_err(|_| gone())?;
        answered.await.map_err(|_| gone())?.map_err(Error::store)
    }
}

/// One writer: takes what queued (waiting for the first), commits it, again.
async fn write_batches(db: Postgres, queued: Queue) {
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
        let mut groups: BTreeMap<Option<String>, Vec<Write>> = BTreeMap::new();
        for write in batch {
            groups.entry(write.group.clone()).or_default().push(write);
        }
        for writes in groups.into_values() {
            commit_and_answer(&db, writes).await;
        }
    }
}

/// Commits `writes` in one transaction and answers each. One statement that fails fails
/// its transaction: each write is then made again alone, so that it fails alone.
async fn commit_and_answer(db: &Postgres, writes: Vec<Write>) {
    let outcomes = match commit(db, &writes).await {
        Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
        Err(e) if writes.len() == 1 => vec![Err(e)],
        Err(_) => {
            let mut alone = Vec::with_capacity(writes.len());
            for write in &writes {
                alone.push(
                    commit(db, std::slice::from_ref(write))
                        .await
                        .map(|mut done| done.remove(0)),
                );
            }
            alone
        }
    };
    for (write, outcome) in writes.into_iter().zip(outcomes) {
        let _ = write.answer.send(outcome.map_err(|e| e.to_string()));
    }
}

fn bound(statement: &Statement) -> Vec<&(dyn ToSql + Sync)> {
    statement
        .params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

/// Commits `writes` as one transaction, sent as one pipeline; what each statement of
/// each write did.
async fn commit(db: &Postgres, writes: &[Write]) -> Result<Vec<Vec<Done>>> {
    let conn = db.connection().await?;
    let cannot = |e: &super::DriverError| failed("cannot write", e);
    let statements: Vec<&Statement> = writes.iter().flat_map(|w| &w.statements).collect();
    let mut prepared = Vec::with_capacity(statements.len());
    for statement in &statements {
        prepared.push(
            conn.prepare_cached(statement.sql)
                .await
                .map_err(|e| cannot(&e))?,
        );
    }
    let params: Vec<_> = statements.iter().map(|s| bound(s)).collect();
    let alone = statements.len() == 1;
    // In the order they are first polled, which is the order here: the driver writes a
    // connection's requests as their futures are first polled.
    let mut pipeline: Vec<BoxFuture<'_, std::result::Result<Option<Done>, super::DriverError>>> =
        Vec::with_capacity(statements.len() + 2);
    if !alone {
        pipeline.push(Box::pin(async {
            conn.batch_execute("BEGIN").await.map(|()| None)
        }));
    }
    for ((statement, prepared), params) in statements.iter().zip(&prepared).zip(&params) {
        let conn = &conn;
        if statement.returns_rows {
            pipeline.push(Box::pin(async move {
                conn.query(prepared, params)
                    .await
                    .map(|rows| Some(Done::Rows(rows)))
            }));
        } else {
            pipeline.push(Box::pin(async move {
                conn.execute(prepared, params)
                    .await
                    .map(|n| Some(Done::Changed(n)))
            }));
        }
    }
    if !alone {
        pipeline.push(Box::pin(async {
            conn.batch_execute("COMMIT").await.map(|()| None)
        }));
    }
    // Every request is waited for: the connection goes back to the pool with its
    // transaction ended (committed, or rolled back by the server after a failure).
    let results = futures::future::join_all(pipeline).await;
    let mut done = Vec::with_capacity(statements.len());
    for result in results {
        if let Some(outcome) = result.map_err(|e| cannot(&e))? {
            done.push(outcome);
        }
    }
    // After a failed statement the server answers `COMMIT` with a rollback, and every
    // statement after it with an error: a failure above says so.
    let mut done = done.into_iter();
    Ok(writes
        .iter()
        .map(|write| done.by_ref().take(write.statements.len()).collect())
        .collect())
}
