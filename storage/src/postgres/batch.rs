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
//!
//! A write of one row (`RowWrite`: a journal append, a task's insert or update) shares
//! its statement too: the rows of one batch for the same SQL go as one statement taking
//! each column as an array: a saga made about 18 statements before, about 10 since.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

use super::{Postgres, Row, ToSql, failed};
use crate::{Error, Result};

/// A write's parameter, owned: it waits in the queue for its batch.
pub type Param = Box<dyn ToSql + Send + Sync>;

/// One statement of a write, and what it answers.
pub struct Statement {
    pub sql: &'static str,
    pub params: Vec<Param>,
    /// Whether the caller wants its rows (`Done::Rows`) or the count it changed.
    pub returns_rows: bool,
}

/// A write of one row through a statement that the rows of a batch share: `sql` takes
/// column `i` of every row as the text array `$i+1` (`unnest(...) WITH ORDINALITY`),
/// and answers, in its first column, the ordinal (1-based, `BIGINT`) of each row it
/// wrote. A row it did not answer is one its condition refused (`Done::Changed(0)`).
pub struct RowWrite {
    pub sql: &'static str,
    pub values: Vec<Option<String>>,
}

/// What one statement of a committed write did.
#[derive(Debug)]
pub enum Done {
    Changed(u64),
    Rows(Vec<Row>),
}

/// At most this many writes share a commit.
const BATCH: usize = 128;

/// Writers committing batches at once. One: what queues while its commit is made goes in
/// the next, so a busy replica makes fewer, larger transactions. Two (each batch out on a
/// connection while the next gathered) cost three replicas at 64 clients about a tenth
/// more of the database's CPU per step, and made 0.62 of the SQLite executor's steps/s
/// against 0.74 with one, in interleaved runs minutes apart.
pub(super) const WRITERS: usize = 1;

type Answer = oneshot::Sender<std::result::Result<Vec<Done>, String>>;

/// What a write commits: statements of its own, or a row of a shared statement.
enum Work {
    Statements(Vec<Statement>),
    Row(RowWrite),
}

struct Write {
    group: Option<String>,
    work: Work,
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
        self.queued(group, Work::Statements(statements)).await
    }

    /// Commits `row` in the next batch (the common transaction); whether its statement
    /// wrote it.
    pub(super) async fn write_row(&self, row: RowWrite) -> Result<bool> {
        match self.queued(None, Work::Row(row)).await?.pop() {
            Some(Done::Changed(written)) => Ok(written == 1),
            _ => Err(Error::store("a write answered what it was not asked")),
        }
    }

    async fn queued(&self, group: Option<String>, work: Work) -> Result<Vec<Done>> {
        let (answer, answered) = oneshot::channel();
        let gone = || Error::store("the database's writer has stopped");
        self.queue
            .send(Write {
                group,
                work,
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
        // The common transaction first, then each group's, even when there is one
        // group: merged into the common one, the appends waited for the mandate's row
        // that other replicas' begins hold, and three replicas measured a higher share
        // of the database's CPU (0.56 of the executors' against 0.53-0.55) and fewer
        // steps/s.
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

/// One statement of a batch's transaction: a write's own, or the one its rows share.
enum Item<'a> {
    Own {
        write: usize,
        statement: &'a Statement,
    },
    Shared {
        sql: &'static str,
        /// Column `i` of every row, as one array.
        columns: Vec<Param>,
        /// The writes whose rows these are, in the order of the arrays.
        writes: Vec<usize>,
    },
}

impl Item<'_> {
    fn sql(&self) -> &'static str {
        match self {
            Item::Own { statement, .. } => statement.sql,
            Item::Shared { sql, .. } => sql,
        }
    }

    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        let params = match self {
            Item::Own { statement, .. } => &statement.params,
            Item::Shared { columns, .. } => columns,
        };
        params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }

    fn returns_rows(&self) -> bool {
        match self {
            Item::Own { statement, .. } => statement.returns_rows,
            Item::Shared { .. } => true,
        }
    }
}

/// The statements of `writes`, in order: a shared statement where its first row was.
fn items(writes: &[Write]) -> Result<Vec<Item<'_>>> {
    /// The rows gathered for one shared statement so far, column by column.
    struct Gathered {
        sql: &'static str,
        item: usize,
        columns: Vec<Vec<Option<String>>>,
    }
    let mut items = Vec::new();
    let mut shared: Vec<Gathered> = Vec::new();
    for (index, write) in writes.iter().enumerate() {
        match &write.work {
            Work::Statements(statements) => {
                items.extend(statements.iter().map(|statement| Item::Own {
                    write: index,
                    statement,
                }))
            }
            Work::Row(row) => {
                let at = match shared.iter().position(|g| g.sql == row.sql) {
                    Some(at) => at,
                    None => {
                        items.push(Item::Shared {
                            sql: row.sql,
                            columns: Vec::new(),
                            writes: Vec::new(),
                        });
                        shared.push(Gathered {
                            sql: row.sql,
                            item: items.len() - 1,
                            columns: vec![Vec::new(); row.values.len()],
                        });
                        shared.len() - 1
                    }
                };
                let Gathered { item, columns, .. } = &mut shared[at];
                if columns.len() != row.values.len() {
                    return Err(Error::store(format!(
                        "a row of {} values for a statement of {} columns",
                        row.values.len(),
                        columns.len()
                    )));
                }
                for (column, value) in columns.iter_mut().zip(&row.values) {
                    column.push(value.clone());
                }
                if let Item::Shared { writes, .. } = &mut items[*item] {
                    writes.push(index);
                }
            }
        }
    }
    for Gathered { item, columns, .. } in shared {
        if let Item::Shared {
            columns: arrays, ..
        } = &mut items[item]
        {
            *arrays = columns
                .into_iter()
                .map(|column| Box::new(column) as Param)
                .collect();
        }
    }
    Ok(items)
}

/// Commits `writes` as one transaction, sent as one pipeline; what each statement of
/// each write did.
async fn commit(db: &Postgres, writes: &[Write]) -> Result<Vec<Vec<Done>>> {
    let conn = db.writer_connection().await?;
    let cannot = |e: &super::DriverError| failed("cannot write", e);
    let items = items(writes)?;
    let mut prepared = Vec::with_capacity(items.len());
    for item in &items {
        prepared.push(
            conn.prepare_cached(item.sql())
                .await
                .map_err(|e| cannot(&e))?,
        );
    }
    let params: Vec<_> = items.iter().map(Item::params).collect();
    let alone = items.len() == 1;
    // In the order they are first polled, which is the order here: the driver writes a
    // connection's requests as their futures are first polled.
    let mut pipeline: Vec<BoxFuture<'_, std::result::Result<Option<Done>, super::DriverError>>> =
        Vec::with_capacity(items.len() + 2);
    if !alone {
        pipeline.push(Box::pin(async {
            conn.batch_execute("BEGIN").await.map(|()| None)
        }));
    }
    for ((item, prepared), params) in items.iter().zip(&prepared).zip(&params) {
        let conn = &conn;
        if item.returns_rows() {
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
    let mut outcomes = Vec::with_capacity(items.len());
    for result in results {
        if let Some(outcome) = result.map_err(|e| cannot(&e))? {
            outcomes.push(outcome);
        }
    }
    // After a failed statement the server answers `COMMIT` with a rollback, and every
    // statement after it with an error: a failure above says so.
    let mut done: Vec<Vec<Done>> = writes.iter().map(|_| Vec::new()).collect();
    for (item, outcome) in items.iter().zip(outcomes) {
        match (item, outcome) {
            (Item::Own { write, .. }, outcome) => done[*write].push(outcome),
            (Item::Shared { writes, .. }, Done::Rows(rows)) => {
                let mut written = std::collections::HashSet::with_capacity(rows.len());
                for row in &rows {
                    written.insert(row.try_get::<_, i64>(0).map_err(|e| cannot(&e))?);
                }
                for (ordinal, write) in (1..).zip(writes) {
                    done[*write].push(Done::Changed(u64::from(written.contains(&ordinal))));
                }
            }
            (Item::Shared { .. }, Done::Changed(_)) => {
                return Err(Error::store("a shared statement answered no rows"));
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::testing::scratch_database;

    /// Rows of `kv` created, a key already there left as it is.
    const INSERT_NEW: &str = "WITH r AS (
             SELECT * FROM unnest($1::TEXT[], $2::TEXT[]) WITH ORDINALITY AS r (k, v, n)
         ), written AS (
             INSERT INTO kv (k, v) SELECT k, v FROM r ORDER BY n
             ON CONFLICT (k) DO NOTHING RETURNING k
         )
         SELECT min(r.n) FROM r JOIN written ON written.k = r.k GROUP BY r.k";

    fn row(sql: &'static str, values: &[&str]) -> Write {
        Write {
            group: None,
            work: Work::Row(RowWrite {
                sql,
                values: values.iter().map(|v| Some((*v).to_owned())).collect(),
            }),
            answer: oneshot::channel().0,
        }
    }

    #[test]
    fn the_rows_of_one_sql_share_the_statement_placed_where_the_first_was() {
        let own = Write {
            group: None,
            work: Work::Statements(vec![Statement {
                sql: "SELECT 1",
                params: Vec::new(),
                returns_rows: true,
            }]),
            answer: oneshot::channel().0,
        };
        let writes = vec![
            row(INSERT_NEW, &["a", "1"]),
            own,
            row("other", &["x"]),
            row(INSERT_NEW, &["b", "2"]),
        ];
        let shared = items(&writes).unwrap();
        let shape: Vec<(&str, Vec<usize>)> = shared
            .iter()
            .map(|item| match item {
                Item::Own { write, statement } => (statement.sql, vec![*write]),
                Item::Shared { sql, writes, .. } => (*sql, writes.clone()),
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                (INSERT_NEW, vec![0, 3]),
                ("SELECT 1", vec![1]),
                ("other", vec![2])
            ]
        );
        assert!(matches!(&shared[0], Item::Shared { columns, .. } if columns.len() == 2));
        // A row that does not fit its statement's columns is refused, not bound.
        let misfit = vec![row(INSERT_NEW, &["a", "1"]), row(INSERT_NEW, &["b"])];
        assert!(items(&misfit).is_err());
    }

    #[tokio::test]
    async fn the_writers_connections_plan_once_and_keep_the_urls_options() {
        let Some(url) = scratch_database("batch_plans").await else {
            return;
        };
        let db = Postgres::connect(&url, 1).unwrap();
        async fn show(conn: &super::super::Connection, what: &str) -> String {
            let sql = format!("SHOW {what}");
            conn.query_one(&sql, &[]).await.unwrap().get(0)
        }
        let writer = db.writer_connection().await.unwrap();
        assert_eq!(show(&writer, "plan_cache_mode").await, "force_generic_plan");
        for join in ["enable_seqscan", "enable_hashjoin", "enable_mergejoin"] {
            assert_eq!(show(&writer, join).await, "off", "{join}");
        }
        // The URL's own options (the test's schema) still apply.
        assert!(show(&writer, "search_path").await.starts_with("t_"));
        let reader = db.connection().await.unwrap();
        assert_eq!(show(&reader, "plan_cache_mode").await, "auto");
        assert_eq!(show(&reader, "enable_seqscan").await, "on");
    }

    #[tokio::test]
    async fn rows_written_at_once_each_learn_whether_their_shared_statement_wrote_them() {
        let Some(url) = scratch_database("batch_rows").await else {
            return;
        };
        let db = Postgres::connect(&url, 4).unwrap();
        db.connection()
            .await
            .unwrap()
            .batch_execute(
                "CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT NOT NULL CHECK (v <> 'bad'));
                 INSERT INTO kv VALUES ('taken', 'before');",
            )
            .await
            .unwrap();
        // Of each ten rows: one for a key already there, two for one key of their own,
        // one whose value the table refuses, six of their own.
        let key_and_value = |i: usize| match i % 10 {
            0 => ("taken".to_owned(), format!("v{i}")),
            1 | 2 => (format!("twice{}", i / 10), format!("v{i}")),
            3 => (format!("k{i}"), "bad".to_owned()),
            _ => (format!("k{i}"), format!("v{i}")),
        };
        let writes = (0..300).map(|i| {
            let db = db.clone();
            let (k, v) = key_and_value(i);
            async move {
                db.write_row(RowWrite {
                    sql: INSERT_NEW,
                    values: vec![Some(k), Some(v)],
                })
                .await
            }
        });
        let answers = futures::future::join_all(writes).await;
        let mut twice_written = std::collections::HashMap::<String, usize>::new();
        for (i, answer) in answers.iter().enumerate() {
            let (k, _) = key_and_value(i);
            match i % 10 {
                0 => assert!(!answer.as_ref().unwrap(), "row {i}"),
                1 | 2 => {
                    *twice_written.entry(k).or_default() += usize::from(*answer.as_ref().unwrap())
                }
                3 => assert!(answer.is_err(), "row {i}: {answer:?}"),
                _ => assert!(answer.as_ref().unwrap(), "row {i}"),
            }
        }
        assert_eq!(twice_written.len(), 30);
        assert!(twice_written.values().all(|n| *n == 1), "{twice_written:?}");
        let conn = db.connection().await.unwrap();
        let stored: Vec<(String, String)> = conn
            .query("SELECT k, v FROM kv", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        assert_eq!(stored.len(), 1 + 30 + 180);
        assert!(stored.contains(&("taken".to_owned(), "before".to_owned())));
        for i in (0..300).filter(|i| i % 10 > 3) {
            assert!(
                stored.contains(&(format!("k{i}"), format!("v{i}"))),
                "row {i}"
            );
        }
    }
}
