//! SQLite plumbing shared by Sagaplane's durable stores: a connection opened with WAL and
//! `synchronous=FULL`, and a `Database` — one file, whose one writer thread commits every
//! write waiting at that moment, from any store on the file, in one transaction (one
//! fsync for many), acknowledging each only once it is on disk.

use std::path::Path;

use rusqlite::{Connection, Transaction};
use tokio::sync::{mpsc, oneshot};

use crate::{Error, Result};

/// Writes waiting beyond this many go into the next transaction.
const MAX_BATCH: usize = 1024;

/// Transactions committed, and writes they carried, so far by the group-commit writers of
/// this process, by the name their `Database` was opened with.
static COMMITS: std::sync::Mutex<Vec<(&'static str, u64, u64)>> = std::sync::Mutex::new(Vec::new());

fn counted(what: &str, pick: impl Fn(&(&'static str, u64, u64)) -> u64) -> u64 {
    COMMITS.lock().map_or(0, |counts| {
        counts.iter().filter(|c| c.0 == what).map(&pick).sum()
    })
}

/// How many transactions the writers of the databases named `what` have committed in this
/// process (each is one WAL fsync under `synchronous=FULL`; checkpoints add their own).
/// Read-only instrumentation, for the executor's benchmark.
pub fn commits(what: &str) -> u64 {
    counted(what, |c| c.1)
}

/// How many writes those transactions carried (a write tried again alone counts again).
pub fn writes(what: &str) -> u64 {
    counted(what, |c| c.2)
}

fn count_commit(what: &'static str, writes: usize) {
    let writes = u64::try_from(writes).unwrap_or(u64::MAX);
    if let Ok(mut counts) = COMMITS.lock() {
        match counts.iter_mut().find(|c| c.0 == what) {
            Some(count) => {
                count.1 += 1;
                count.2 += writes;
            }
            None => counts.push((what, 1, writes)),
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

/// One write: run inside the transaction of the batch it joins. It may run a second time,
/// alone, when another write in its batch failed.
type Job = Box<dyn Fn(&Transaction<'_>) -> rusqlite::Result<()> + Send>;

/// Why the file's last commit could not be made, when the file itself refused it (a
/// full disk, an I/O error, a file made read-only or locked by another program); `None`
/// once a commit lands again. A write refused for its own content (a constraint) is not
/// the file's failure and leaves this as it was.
type WriteFailure = std::sync::Arc<std::sync::Mutex<Option<String>>>;

/// The handle to a group-commit writer thread.
#[derive(Clone)]
struct GroupCommit {
    queue: mpsc::UnboundedSender<(Job, oneshot::Sender<Result<()>>)>,
    what: &'static str,
    failure: WriteFailure,
}

/// Whether SQLite refused a commit because of the file or the disk under it.
fn is_storage_failure(error: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode::*;
    matches!(
        error.sqlite_error_code(),
        Some(
            DiskFull
                | SystemIoFailure
                | ReadOnly
                | CannotOpen
                | DatabaseBusy
                | DatabaseLocked
                | DatabaseCorrupt
                | NotADatabase
                | PermissionDenied
        )
    )
}

/// Keeps `failure` up to date with the outcome of one commit.
fn note_outcome(failure: &WriteFailure, outcome: &rusqlite::Result<()>) {
    let update = match outcome {
        Ok(()) => None,
        Err(e) if is_storage_failure(e) => Some(e.to_string()),
        Err(_) => return,
    };
    if let Ok(mut last) = failure.lock() {
        *last = update;
    }
}

impl GroupCommit {
    /// Starts the writer thread on `conn`. The thread ends when every handle is dropped.
    fn spawn(what: &'static str, mut conn: Connection) -> Result<Self> {
        let (queue, mut jobs) = mpsc::unbounded_channel::<(Job, oneshot::Sender<Result<()>>)>();
        let failure = WriteFailure::default();
        let noted = failure.clone();
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
                    let result = commit(&mut conn, batch.iter().map(|(job, _)| job));
                    count_commit(what, batch.len());
                    note_outcome(&noted, &result);
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
                                let alone = commit(&mut conn, [&job]);
                                count_commit(what, 1);
                                note_outcome(&noted, &alone);
                                let alone = alone
                                    .map_err(|e| Error::Store(format!("{what} write failed: {e}")));
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
        Ok(Self {
            queue,
            what,
            failure,
        })
    }

    /// Queues `job` at once (so writes keep the order of the calls); the future resolves
    /// once it is durable, or with the reason it could not be written.
    fn submit(&self, job: Job) -> impl Future<Output = Result<()>> + Send + 'static {
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

fn commit<'a>(
    conn: &mut Connection,
    jobs: impl IntoIterator<Item = &'a Job>,
) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    for job in jobs {
        job(&tx)?;
    }
    tx.commit()
}

/// The right to write one state file, held by one process at a time: an exclusive
/// advisory lock on `<file>.lock` beside it (a file of its own, so the lock never meets
/// SQLite's own locks on the database). Two processes writing one state file would both
/// resume its unfinished work; the second is refused instead. The operating system
/// releases the lock when the process ends, however it ends.
#[derive(Debug)]
pub struct FileLock {
    _file: std::fs::File,
}

impl FileLock {
    /// Takes the lock for the state file at `path`, or says which process-wide lock is
    /// held. `what` names the file in errors.
    pub fn acquire(path: &Path, what: &str) -> Result<Self> {
        let mut name = path.as_os_str().to_owned();
        name.push(".lock");
        let lock_path = std::path::PathBuf::from(name);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::store(format!("cannot open {}: {e}", lock_path.display())))?;
        match file.try_lock() {
            Ok(()) => Ok(Self { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(Error::store(format!(
                "{what} {} is in use: another process holds {} (one process at a time may own a state file)",
                path.display(),
                lock_path.display()
            ))),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::store(format!(
                "cannot lock {}: {e}",
                lock_path.display()
            ))),
        }
    }
}

/// One SQLite file that stores share: one group-commit writer for all of them, so the
/// writes of every store waiting at the same moment share one transaction and one fsync,
/// and writes are committed in the order they were queued, whichever store queued them
/// (a write that fails does not hold back the ones behind it). Cheap to clone; the writer
/// thread ends with the last clone.
#[derive(Clone)]
pub struct Database {
    path: std::sync::Arc<Path>,
    writer: GroupCommit,
    /// Held as long as any clone lives (`open_locked`).
    _lock: Option<std::sync::Arc<FileLock>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("path", &self.path)
            .field("what", &self.writer.what)
            .finish()
    }
}

impl Database {
    /// Opens (or creates) the file at `path` and starts its writer. `what` names it in
    /// errors, in the writer thread's name and in `commits`.
    pub fn open(path: &Path, what: &'static str) -> Result<Self> {
        Self::start(path, what, None)
    }

    /// As `open`, holding the file's `FileLock` (taken by the caller, who may have
    /// prepared the file under it) for as long as the database is open.
    pub fn open_locked(path: &Path, what: &'static str, lock: FileLock) -> Result<Self> {
        Self::start(path, what, Some(std::sync::Arc::new(lock)))
    }

    fn start(
        path: &Path,
        what: &'static str,
        lock: Option<std::sync::Arc<FileLock>>,
    ) -> Result<Self> {
        let conn = open_connection(path, what)?;
        Ok(Self {
            path: path.into(),
            writer: GroupCommit::spawn(what, conn)?,
            _lock: lock,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `schema` (`CREATE TABLE IF NOT EXISTS …`) on a connection of its own; a store
    /// calls it once, before its first write.
    pub fn prepare(&self, schema: &str) -> Result<()> {
        open_connection(&self.path, self.writer.what)?
            .execute_batch(schema)
            .map_err(|e| {
                Error::store(format!(
                    "cannot prepare {} {}: {e}",
                    self.writer.what,
                    self.path.display()
                ))
            })
    }

    /// Why the file's last commit failed, if the file or the disk refused it and no
    /// commit has landed since: the reason this file cannot take work now.
    pub fn write_failure(&self) -> Option<String> {
        self.writer.failure.lock().map_or_else(
            |_| Some("the writer's state is poisoned".into()),
            |f| f.clone(),
        )
    }

    /// A reader of its own on the file, for one store.
    pub fn reader(&self) -> Result<Reader> {
        Reader::open(&self.path, self.writer.what)
    }

    /// Queues `write` at once (so writes keep the order of the calls, across stores); the
    /// future resolves once it is durable, or with the reason it could not be written.
    pub fn submit(
        &self,
        write: impl Fn(&Transaction<'_>) -> rusqlite::Result<()> + Send + 'static,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        self.writer.submit(Box::new(write))
    }
}

/// A read-only connection used from async code: each read runs on the blocking pool.
#[derive(Debug, Clone)]
pub struct Reader {
    conns: std::sync::Arc<[std::sync::Mutex<Connection>]>,
    /// One per connection: a read waits here, not on a blocking thread of its own (which
    /// at hundreds of concurrent reads meant hundreds of threads queued on locks).
    free: std::sync::Arc<tokio::sync::Semaphore>,
    /// Where the next read starts looking for a free connection.
    next: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    what: &'static str,
}

/// Connections a `Reader` keeps: WAL lets them read side by side, so concurrent reads do
/// not queue on one connection's lock (each read holds a blocking thread meanwhile).
const READ_CONNECTIONS: usize = 4;

impl Reader {
    pub fn open(path: &Path, what: &'static str) -> Result<Self> {
        let conns = (0..READ_CONNECTIONS)
            .map(|_| open_connection(path, what).map(std::sync::Mutex::new))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            free: std::sync::Arc::new(tokio::sync::Semaphore::new(conns.len())),
            conns: conns.into(),
            next: std::sync::Arc::default(),
            what,
        })
    }

    /// Runs `work` on a free connection (or waits for one), off the async threads.
    pub async fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let (conns, what) = (self.conns.clone(), self.what);
        let permit = self
            .free
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::store(format!("{what} reader closed")))?;
        let start = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::task::spawn_blocking(move || {
            let poisoned = || Error::store(format!("{what} reader poisoned"));
            let count = conns.len();
            let free = (0..count).find_map(|i| conns[(start + i) % count].try_lock().ok());
            let conn = match free {
                Some(conn) => conn,
                None => conns[start % count].lock().map_err(|_| poisoned())?,
            };
            let read = work(&conn).map_err(|e| Error::store(format!("{what}: {e}")));
            drop((conn, permit));
            read
        })
        .await
        .map_err(|e| Error::store(format!("{what} reader failed: {e}")))?
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc as sync_mpsc;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// How a held write tells that the writer entered it, and waits to be let go.
    type Hold = (sync_mpsc::Sender<()>, Arc<Mutex<sync_mpsc::Receiver<()>>>);

    /// A write that inserts `id`; a held one waits, inside the transaction, until the test
    /// lets it go, so the writes queued behind it form one batch.
    fn insert(
        id: i64,
        hold: Option<Hold>,
    ) -> impl Fn(&Transaction<'_>) -> rusqlite::Result<()> + Send + 'static {
        move |tx| {
            if let Some((entered, released)) = &hold {
                let _ = entered.send(());
                let _ = released.lock().map(|r| r.recv());
            }
            tx.execute("INSERT INTO t (id) VALUES (?1)", [id])
                .map(|_| ())
        }
    }

    #[tokio::test]
    async fn writes_queued_together_share_one_commit_whichever_store_made_them() {
        let dir = tempfile::tempdir().unwrap();
        // A name of its own: the commit counter is per name, across the process.
        let db = Database::open(&dir.path().join("t.db"), "shared-commit-test").unwrap();
        db.prepare(
            "CREATE TABLE t (id INTEGER PRIMARY KEY); CREATE TABLE u (id INTEGER PRIMARY KEY)",
        )
        .unwrap();
        let (entered_tx, entered) = sync_mpsc::channel();
        let (release, released) = sync_mpsc::channel();
        let first = tokio::spawn(db.submit(insert(
            1,
            Some((entered_tx, Arc::new(Mutex::new(released)))),
        )));
        tokio::task::spawn_blocking(move || entered.recv().unwrap())
            .await
            .unwrap();
        // Two stores' writes, queued while the writer is busy: one transaction.
        let second = db.submit(insert(2, None));
        let other_table = db.submit(|tx: &Transaction<'_>| {
            tx.execute("INSERT INTO u (id) VALUES (7)", []).map(|_| ())
        });
        release.send(()).unwrap();
        first.await.unwrap().unwrap();
        second.await.unwrap();
        other_table.await.unwrap();
        assert_eq!(commits("shared-commit-test"), 2);
    }

    #[tokio::test]
    async fn a_file_that_cannot_grow_is_reported_until_a_write_lands_again() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(&dir.path().join("t.db"), "test").unwrap();
        db.prepare("CREATE TABLE t (id INTEGER PRIMARY KEY); CREATE TABLE b (x BLOB)")
            .unwrap();
        db.submit(insert(1, None)).await.unwrap();
        // A write refused for what it writes says nothing about the file.
        db.submit(insert(1, None)).await.unwrap_err();
        assert_eq!(db.write_failure(), None);

        // The writer's connection may not grow the file past its size now: a full disk.
        let cap = |pages: u32| {
            move |tx: &Transaction<'_>| {
                tx.execute_batch(&format!("PRAGMA max_page_count = {pages}"))
            }
        };
        db.submit(cap(1)).await.unwrap();
        let blob = |tx: &Transaction<'_>| {
            tx.execute("INSERT INTO b (x) VALUES (?1)", [vec![7u8; 64 * 1024]])
                .map(|_| ())
        };
        let refused = db.submit(blob).await.unwrap_err();
        assert!(refused.to_string().contains("full"), "{refused}");
        let failure = db.write_failure().expect("the full file is reported");
        assert!(failure.contains("full"), "{failure}");

        db.submit(cap(1_000_000)).await.unwrap();
        db.submit(blob).await.unwrap();
        assert_eq!(db.write_failure(), None);
    }

    #[tokio::test]
    async fn a_failing_write_does_not_fail_the_writes_sharing_its_batch() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(&dir.path().join("t.db"), "test").unwrap();
        db.prepare("CREATE TABLE t (id INTEGER PRIMARY KEY)")
            .unwrap();
        let (entered_tx, entered) = sync_mpsc::channel();
        let (release, released) = sync_mpsc::channel();
        let hold = (entered_tx, Arc::new(Mutex::new(released)));
        let first = db.submit(insert(1, Some(hold)));
        let first = tokio::spawn(first);
        tokio::task::spawn_blocking(move || entered.recv().unwrap())
            .await
            .unwrap();
        // Queued while the first batch is held: these two are the next batch.
        let duplicate = db.submit(insert(1, None));
        let fine = db.submit(insert(2, None));
        release.send(()).unwrap();
        first.await.unwrap().unwrap();
        let refused = duplicate.await.unwrap_err();
        assert!(refused.to_string().contains("UNIQUE"), "{refused}");
        fine.await.unwrap();
        let ids: Vec<i64> = db
            .reader()
            .unwrap()
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
