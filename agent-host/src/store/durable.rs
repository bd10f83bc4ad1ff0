//! SQLite plumbing shared by Sagaplane's durable stores: a connection opened with WAL and
//! `synchronous=FULL`, and group commit — one writer thread that commits every write
//! waiting at that moment in one transaction (one fsync for many), acknowledging each
//! only once it is on disk.

use std::path::Path;

use rusqlite::{Connection, Transaction};
use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Result};

/// Writes waiting beyond this many go into the next transaction.
const MAX_BATCH: usize = 1024;

/// Transactions committed so far by the group-commit writers of this process, by writer
/// name (`"journal"`, `"task-store"`, …).
static COMMITS: std::sync::Mutex<Vec<(&'static str, u64)>> = std::sync::Mutex::new(Vec::new());

/// How many transactions the group-commit writers named `what` have committed in this
/// process (each is one WAL fsync under `synchronous=FULL`; checkpoints add their own).
/// Read-only instrumentation, for the executor's benchmark.
pub fn commits(what: &str) -> u64 {
    COMMITS.lock().map_or(0, |counts| {
        counts
            .iter()
            .filter(|(w, _)| *w == what)
            .map(|(_, n)| n)
            .sum()
    })
}

fn count_commit(what: &'static str) {
    if let Ok(mut counts) = COMMITS.lock() {
        match counts.iter_mut().find(|(w, _)| *w == what) {
            Some((_, n)) => *n += 1,
            None => counts.push((what, 1)),
        }
    }
}

/// Opens `path` for durable use. `what` names the store in errors.
pub fn open_connection(path: &Path, what: &str) -> Result<Connection> {
    let conn = Connection::open(path)
        .map_err(|e| Error::store(format!("cannot open {what} {}: {e}", path.display())))?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         PRAGMA busy_timeout = 5000;",
    )
    .map_err(|e| Error::store(format!("cannot prepare {what} {}: {e}", path.display())))?;
    Ok(conn)
}

type Apply<J> = Box<dyn Fn(&Transaction<'_>, &J) -> rusqlite::Result<()> + Send>;

/// The handle to a group-commit writer thread for jobs of type `J`.
pub struct GroupCommit<J> {
    queue: mpsc::UnboundedSender<(J, oneshot::Sender<Result<()>>)>,
    what: &'static str,
}

impl<J> Clone for GroupCommit<J> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            what: self.what,
        }
    }
}

impl<J> std::fmt::Debug for GroupCommit<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("what", &self.what)
            .finish()
    }
}

impl<J: Send + 'static> GroupCommit<J> {
    /// Starts the writer thread on `conn`; `apply` writes one job inside the batch's
    /// transaction. The thread ends when every handle is dropped.
    pub fn spawn(
        what: &'static str,
        mut conn: Connection,
        apply: impl Fn(&Transaction<'_>, &J) -> rusqlite::Result<()> + Send + 'static,
    ) -> Result<Self> {
        let (queue, mut jobs) = mpsc::unbounded_channel::<(J, oneshot::Sender<Result<()>>)>();
        let apply: Apply<J> = Box::new(apply);
        std::thread::Builder::new()
            .name(format!("{what}-writer"))
            .spawn(move || {
                let mut batch = Vec::new();
                while let Some(first) = jobs.blocking_recv() {
                    batch.push(first);
                    while batch.len() < MAX_BATCH {
                        match jobs.try_recv() {
                            Ok(next) => batch.push(next),
                            Err(_) => break,
                        }
                    }
                    let result = commit(&mut conn, batch.iter().map(|(job, _)| job), &apply);
                    count_commit(what);
                    match result {
                        Ok(()) => {
                            for (_, done) in batch.drain(..) {
                                let _ = done.send(Ok(()));
                            }
                        }
                        // One write's failure must not fail the writes that happened to
                        // share its transaction: each is tried again on its own.
                        Err(_) if batch.len() > 1 => {
                            for (job, done) in batch.drain(..) {
                                let alone = commit(&mut conn, [&job], &apply)
                                    .map_err(|e| Error::Store(format!("{what} write failed: {e}")));
                                count_commit(what);
                                let _ = done.send(alone);
                            }
                        }
                        Err(e) => {
                            for (_, done) in batch.drain(..) {
                                let _ = done
                                    .send(Err(Error::Store(format!("{what} write failed: {e}"))));
                            }
                        }
                    }
                }
            })
            .map_err(|e| Error::store(format!("cannot start the {what} writer: {e}")))?;
        Ok(Self { queue, what })
    }

    /// Queues `job` at once (so writes keep the order of the calls); the future resolves
    /// once it is durable, or with the reason it could not be written.
    pub fn submit(&self, job: J) -> impl Future<Output = Result<()>> + Send + 'static {
        let (done, durable) = oneshot::channel();
        let what = self.what;
        let queued = self
            .queue
            .send((job, done))
            .map_err(|_| Error::store(format!("the {what} writer has stopped")));
        async move {
            queued?;
            durable.await.map_err(|_| {
                Error::store(format!(
                    "the {what} writer stopped before the write was durable"
                ))
            })?
        }
    }
}

fn commit<'a, J: 'a>(
    conn: &mut Connection,
    jobs: impl IntoIterator<Item = &'a J>,
    apply: &Apply<J>,
) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    for job in jobs {
        apply(&tx, job)?;
    }
    tx.commit()
}

/// A read-only connection used from async code: each read runs on the blocking pool.
#[derive(Debug, Clone)]
pub struct Reader {
    conn: std::sync::Arc<std::sync::Mutex<Connection>>,
    what: &'static str,
}

impl Reader {
    pub fn open(path: &Path, what: &'static str) -> Result<Self> {
        Ok(Self {
            conn: std::sync::Arc::new(std::sync::Mutex::new(open_connection(path, what)?)),
            what,
        })
    }

    /// Runs `work` on the connection, off the async threads.
    pub async fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let (conn, what) = (self.conn.clone(), self.what);
        tokio::task::spawn_blocking(move || {
            let conn = conn
                .lock()
                .map_err(|_| Error::store(format!("{what} reader poisoned")))?;
            work(&conn).map_err(|e| Error::store(format!("{what}: {e}")))
        })
        .await
        .map_err(|e| Error::store(format!("{what} reader failed: {e}")))?
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::mpsc as sync_mpsc;

    use super::*;

    /// The writer, word that it entered a held job, the key that lets it go, a reader.
    type Gated = (
        GroupCommit<(i64, bool)>,
        sync_mpsc::Receiver<()>,
        sync_mpsc::Sender<()>,
        Reader,
    );

    /// A writer whose job `(id, hold)` inserts `id`; a held job waits, inside the
    /// transaction, until the test lets it go, so the jobs behind it form one batch.
    fn gated_writer(dir: &Path) -> Gated {
        let path = dir.join("t.db");
        let conn = open_connection(&path, "test").unwrap();
        conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY)")
            .unwrap();
        let (entered_tx, entered) = sync_mpsc::channel();
        let (release, released) = sync_mpsc::channel::<()>();
        let released = Mutex::new(released);
        let writer = GroupCommit::spawn("test", conn, move |tx, job: &(i64, bool)| {
            if job.1 {
                let _ = entered_tx.send(());
                let _ = released.lock().map(|r| r.recv());
            }
            tx.execute("INSERT INTO t (id) VALUES (?1)", [job.0])
                .map(|_| ())
        })
        .unwrap();
        (
            writer,
            entered,
            release,
            Reader::open(&path, "test").unwrap(),
        )
    }

    #[tokio::test]
    async fn a_failing_write_does_not_fail_the_writes_sharing_its_batch() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, entered, release, reader) = gated_writer(dir.path());
        let first = writer.submit((1, true));
        let first = tokio::spawn(first);
        tokio::task::spawn_blocking(move || entered.recv().unwrap())
            .await
            .unwrap();
        // Queued while the first batch is held: these two are the next batch.
        let duplicate = writer.submit((1, false));
        let fine = writer.submit((2, false));
        release.send(()).unwrap();
        first.await.unwrap().unwrap();
        let refused = duplicate.await.unwrap_err();
        assert!(refused.to_string().contains("UNIQUE"), "{refused}");
        fine.await.unwrap();
        let ids: Vec<i64> = reader
            .read(|c| {
                c.prepare("SELECT id FROM t ORDER BY id")?
                    .query_map([], |r| r.get(0))?
                    .collect()
            })
            .await
            .unwrap();
        assert_eq!(ids, [1, 2]);
    }
}
