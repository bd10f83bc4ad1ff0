//! Group commit on PostgreSQL: the one-statement writes of every store on a database
//! (the executor's journal appends, the task store's writes) queue to a few writers, each
//! of which commits everything that queued while its last commit was made, as one
//! transaction whose statements are pipelined on one connection. A write is acknowledged
//! only once its batch committed (`synchronous_commit` decides when that is durable; on
//! by default). A write alone is one statement, one round trip.
//!
//! Every write queued here must be one statement that takes no lock another write of a
//! batch could wait for in the opposite order: a row written by one writer at a time (a
//! task, under its manager's lock), or a `KEY SHARE` lock (the journal's fence). Writes
//! that lock a row many writers share (a mandate's budget) keep their own transactions.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::{DriverError, Postgres, ToSql, failed};
use crate::error::{Error, Result};

/// A write's parameter, owned: it waits in the queue for its batch.
pub type Param = Box<dyn ToSql + Send + Sync>;

/// At most this many writes share a commit.
const BATCH: usize = 128;

/// Writers committing batches at once: while one waits for its commit, the next batch
/// gathers and goes out on another connection.
const WRITERS: usize = 2;

/// What a write's batch answers: the rows it changed, or why it failed.
type Done = oneshot::Sender<std::result::Result<u64, String>>;

struct Write {
    sql: &'static str,
    params: Vec<Param>,
    done: Done,
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

    /// Runs `sql` in the next batch; the rows it changed, once the batch committed.
    pub(super) async fn write(&self, sql: &'static str, params: Vec<Param>) -> Result<u64> {
        let (done, answered) = oneshot::channel();
        let gone = || Error::store("the database's writer has stopped");
        self.queue
            .send(Write { sql, params, done })
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
        let outcome = match commit(&db, &batch).await {
            // One statement that failed fails its batch: each is made again alone, so that
            // it fails alone.
            Err(_) if batch.len() > 1 => {
                let mut alone = Vec::with_capacity(batch.len());
                for write in &batch {
                    alone.push(
                        commit(&db, std::slice::from_ref(write))
                            .await
                            .map(|changed| changed[0]),
                    );
                }
                alone
            }
            Err(e) => vec![Err(e)],
            Ok(changed) => changed.into_iter().map(Ok).collect(),
        };
        for (write, outcome) in batch.into_iter().zip(outcome) {
            let _ = write.done.send(outcome.map_err(|e| e.to_string()));
        }
    }
}

fn params(write: &Write) -> Vec<&(dyn ToSql + Sync)> {
    write
        .params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

/// Commits `batch`; the rows each write changed.
async fn commit(db: &Postgres, batch: &[Write]) -> Result<Vec<u64>> {
    let mut conn = db.connection().await?;
    let failed = |e: DriverError| failed("cannot write", &e);
    let mut statements = Vec::with_capacity(batch.len());
    for write in batch {
        statements.push(conn.prepare_cached(write.sql).await.map_err(failed)?);
    }
    let bound: Vec<_> = batch.iter().map(params).collect();
    if let ([statement], [bound]) = (statements.as_slice(), bound.as_slice()) {
        return Ok(vec![conn.execute(statement, bound).await.map_err(failed)?]);
    }
    let tx = conn.transaction().await.map_err(failed)?;
    // Polled together, the statements go out back to back on the one connection.
    let changed = futures::future::try_join_all(
        statements
            .iter()
            .zip(&bound)
            .map(|(statement, bound)| tx.execute(statement, bound)),
    )
    .await
    .map_err(failed)?;
    tx.commit().await.map_err(failed)?;
    Ok(changed)
}
