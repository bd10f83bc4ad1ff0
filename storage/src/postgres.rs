//! PostgreSQL, for the stores that several executor replicas share: a pool per database,
//! one schema version per store (the rules of `schema.rs`: migrations in order, a newer
//! schema than this binary knows refused), group commit of writes (`postgres/batch.rs`),
//! notifications (`postgres/listen.rs`), and the replicas table.
//!
//! The one module of the workspace that names the driver (tokio-postgres, with deadpool's
//! pool; both pinned). The stores on it reach it through the re-exports below.

mod batch;
mod cluster;
mod listen;
pub mod testing;

use std::fmt::Write as _;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use crate::{Error, Result};

pub use batch::{Done, Param, RowWrite, Statement};
pub use cluster::Cluster;
pub use deadpool_postgres::{Object as Connection, Transaction};
pub use listen::Listener;
pub use tokio_postgres::Error as DriverError;
pub use tokio_postgres::Row;
pub use tokio_postgres::types::ToSql;

/// Statements prepared once per connection and reused: given a text query, the driver
/// prepares it again at every call, one round trip more each time.
#[async_trait::async_trait]
pub trait Cached: deadpool_postgres::GenericClient {
    /// Runs a statement; the rows it changed.
    async fn run(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, DriverError> {
        let statement = self.prepare_cached(sql).await?;
        self.execute(&statement, params).await
    }

    async fn rows(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, DriverError> {
        let statement = self.prepare_cached(sql).await?;
        self.query(&statement, params).await
    }

    async fn row(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, DriverError> {
        let statement = self.prepare_cached(sql).await?;
        self.query_one(&statement, params).await
    }

    async fn row_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, DriverError> {
        let statement = self.prepare_cached(sql).await?;
        self.query_opt(&statement, params).await
    }
}

impl<C: deadpool_postgres::GenericClient> Cached for C {}

/// The SQL of a migration step that runs `alter` (statements compressing columns with
/// lz4) only where the server offers lz4: pglz compressing the large JSON of every write
/// was a large share of the database's CPU under load (perf).
#[macro_export]
macro_rules! where_lz4 {
    ($alter:literal) => {
        concat!(
            "DO $$ BEGIN
                 IF EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression'
                                                        AND 'lz4' = ANY(enumvals)) THEN ",
            $alter,
            " END IF;
             END $$;"
        )
    };
}

/// The replicas alive (`replicas`: each replica's row, renewed with its leases), among
/// which whatever a dead replica held is shared out. Created by each store that shares
/// by it (the journal's sagas, the task store's held tasks), whichever migrates first.
pub const REPLICAS_ALIVE: &str = "CREATE TABLE IF NOT EXISTS replicas (
         owner          TEXT PRIMARY KEY,
         -- The lease its last renewal gave: alive until then.
         alive_until_ms BIGINT NOT NULL
     );";

/// The start of a claim statement for owner `$1` at now `$3` that shares out what lapsed
/// among the replicas alive: `share` holds how many there are (`owners`, this one
/// counted, whose own row its statement cannot see) and this one's place among them
/// (`rank`). The claim's condition is then `in_share!(key)`.
#[macro_export]
macro_rules! with_share {
    () => {
        "WITH live AS (
             SELECT owner FROM replicas WHERE alive_until_ms >= $3 AND owner <> $1
             UNION ALL SELECT $1
         ), share AS (
             SELECT count(*) AS owners, count(*) FILTER (WHERE owner < $1) AS rank FROM live
         ) "
    };
}

/// Whether a row whose hash key is the SQL text `$key` falls in this owner's share
/// (`with_share!`): alone alive, it takes all.
#[macro_export]
macro_rules! in_share {
    ($key:literal) => {
        concat!(
            "((SELECT owners FROM share) = 1 OR mod(hashtext(",
            $key,
            ")::BIGINT + 2147483648, (SELECT owners FROM share)) = (SELECT rank FROM share))"
        )
    };
}

/// How many connections a pool opens at most, unless told otherwise.
pub const DEFAULT_CONNECTIONS: usize = 16;

/// The connections kept apart for renewals and takeovers (`control_connection`).
pub const CONTROL_CONNECTIONS: usize = 2;

/// How the group-commit writers' connections plan (`Postgres::connect`).
const WRITERS_PLAN: &str = "-c plan_cache_mode=force_generic_plan -c enable_seqscan=off \
     -c enable_hashjoin=off -c enable_mergejoin=off";

/// One step of a store's schema: SQL run inside the migrating transaction.
pub struct Migration {
    /// What it does, for the log and errors.
    pub what: &'static str,
    pub sql: &'static str,
}

/// A PostgreSQL database: a pool of connections to it, and where it is (host, port and
/// database name, never the password) for messages.
#[derive(Clone)]
pub struct Postgres {
    pool: Pool,
    /// A few connections of their own for the statements that must not queue behind the
    /// work (lease renewals and takeovers: a renewal that waits for a busy pool past
    /// the lease gives the replica's sagas away).
    control: Pool,
    /// The group-commit writers' connections (`batch.rs`), one each.
    writers: Pool,
    /// For the connections outside the pool (the task feed's listener).
    config: std::sync::Arc<tokio_postgres::Config>,
    place: String,
    /// Why the database cannot be reached, since the last connection that failed (or
    /// the listener's connection that dropped), until one succeeds again.
    unreachable: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    /// The group-commit writers (`batch.rs`), started by the first write; they stop
    /// with the last clone of this handle.
    writes: std::sync::Arc<std::sync::OnceLock<batch::Writes>>,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres")
            .field("place", &self.place)
            .finish_non_exhaustive()
    }
}

impl Postgres {
    /// A pool for the database at `url` (`postgres://user@host:port/db?options`), opening
    /// at most `connections` connections. Nothing is connected until first used.
    pub fn connect(url: &str, connections: usize) -> Result<Self> {
        let config: tokio_postgres::Config = url.parse().map_err(|e| {
            // The driver's message names the part that is wrong; the URL itself may
            // hold a password, so it is not repeated.
            Error::Config(format!("the PostgreSQL URL cannot be read: {e}"))
        })?;
        let place = place_of(&config);
        let pool_of = |config: &tokio_postgres::Config, size: usize| {
            let manager = Manager::from_config(
                config.clone(),
                NoTls,
                ManagerConfig {
                    recycling_method: RecyclingMethod::Fast,
                },
            );
            Pool::builder(manager)
                .max_size(size)
                .runtime(deadpool_postgres::Runtime::Tokio1)
                .build()
                .map_err(|e| Error::Config(format!("cannot make a pool for {place}: {e}")))
        };
        let pool = pool_of(&config, connections.max(1))?;
        let control = pool_of(&config, CONTROL_CONNECTIONS)?;
        // The group commits' statements are keyed writes, planned once per connection:
        // left to choose, the server planned a statement whose rows come as arrays anew
        // at every batch (a custom plan looked cheaper for the few rows it had). A plan
        // kept must not be one made for the few rows a new table had, which scans it
        // whole until it is analyzed again: each row is looked up by its index.
        let mut writing = config.clone();
        writing.options(format!(
            "{} {WRITERS_PLAN}",
            config.get_options().unwrap_or_default()
        ));
        let writers = pool_of(&writing, batch::WRITERS)?;
        Ok(Self {
            pool,
            control,
            writers,
            config: std::sync::Arc::new(config),
            place,
            unreachable: Default::default(),
            writes: Default::default(),
        })
    }

    /// Writes one row in the next group commit, through the statement it shares with
    /// the other rows for `row.sql` there (`batch::RowWrite` says how that SQL reads
    /// them): whether the statement wrote it, once its batch committed.
    pub async fn write_row(&self, row: RowWrite) -> Result<bool> {
        self.writes().write_row(row).await
    }

    /// Commits `statements` together in the next group commit, in the transaction of
    /// `group` when it names one (the row they lock that other writers share:
    /// `batch.rs`); what each did, once committed.
    pub async fn write_together(
        &self,
        group: Option<String>,
        statements: Vec<Statement>,
    ) -> Result<Vec<Done>> {
        self.writes().write(group, statements).await
    }

    fn writes(&self) -> &batch::Writes {
        self.writes.get_or_init(|| {
            // The writers' own handle has no writers of its own: nothing holds them but
            // this handle and its clones.
            batch::Writes::start(Self {
                writes: Default::default(),
                ..self.clone()
            })
        })
    }

    /// Why the database cannot be reached now, if the last attempt to reach it failed:
    /// `/readyz` then says the agent should be sent no new work.
    pub fn unreachable(&self) -> Option<String> {
        self.unreachable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn reached(&self, failure: Option<String>) {
        *self
            .unreachable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = failure;
    }

    /// Where the database is, for messages: host, port and name.
    pub fn place(&self) -> &str {
        &self.place
    }

    /// A connection from the pool (opened if none is free and the pool is not full).
    pub async fn connection(&self) -> Result<Connection> {
        self.connection_from(&self.pool).await
    }

    /// A connection for a group-commit writer (`batch.rs`).
    async fn writer_connection(&self) -> Result<Connection> {
        self.connection_from(&self.writers).await
    }

    async fn connection_from(&self, pool: &Pool) -> Result<Connection> {
        // A pooled connection whose socket closed is not handed out (the pool checks), so
        // a connection got is one the database accepted.
        match pool.get().await {
            Ok(connection) => {
                self.reached(None);
                Ok(connection)
            }
            Err(e) => {
                let why = format!("cannot reach PostgreSQL at {}: {}", self.place, chain(&e));
                self.reached(Some(why.clone()));
                Err(Error::store(why))
            }
        }
    }

    /// A connection for a statement that must not wait behind the work queued on the
    /// pool: renewing leases, claiming lapsed sagas. At most `CONTROL_CONNECTIONS`.
    pub async fn control_connection(&self) -> Result<Connection> {
        match self.control.get().await {
            Ok(connection) => Ok(connection),
            Err(e) => {
                let why = format!("cannot reach PostgreSQL at {}: {}", self.place, chain(&e));
                self.reached(Some(why.clone()));
                Err(Error::store(why))
            }
        }
    }

    /// Brings `store` to the last of `migrations`, in one transaction under a lock that
    /// replicas starting together share (so one migrates and the others wait), or
    /// refuses a database whose store is at a version past them.
    pub async fn migrate(&self, store: &str, migrations: &[Migration]) -> Result<()> {
        let mut conn = self.connection().await?;
        let failed = |what: &str, e: tokio_postgres::Error| {
            Error::store(format!(
                "cannot migrate the {store} store in {} ({what}): {}",
                self.place,
                chain(&e)
            ))
        };
        let tx = conn.transaction().await.map_err(|e| failed("begin", e))?;
        tx.batch_execute(
            "SELECT pg_advisory_xact_lock(7305846130925613568);
             CREATE TABLE IF NOT EXISTS schema_versions (
                 store   TEXT PRIMARY KEY,
                 version INTEGER NOT NULL
             );",
        )
        .await
        .map_err(|e| failed("the version table", e))?;
        let held: i32 = tx
            .query_opt(
                "SELECT version FROM schema_versions WHERE store = $1",
                &[&store],
            )
            .await
            .map_err(|e| failed("its version", e))?
            .map_or(0, |row| row.get(0));
        let held = usize::try_from(held).unwrap_or(0);
        if held > migrations.len() {
            return Err(Error::store(format!(
                "the {store} store in {} is at schema version {held}, newer than this binary \
                 knows ({}): run the binary that wrote it, or a newer one",
                self.place,
                migrations.len()
            )));
        }
        if held == migrations.len() {
            return Ok(());
        }
        for migration in &migrations[held..] {
            tracing::info!(store, migration = migration.what, "migrating the schema");
            tx.batch_execute(migration.sql)
                .await
                .map_err(|e| failed(migration.what, e))?;
        }
        let version = i32::try_from(migrations.len()).unwrap_or(i32::MAX);
        tx.execute(
            "INSERT INTO schema_versions (store, version) VALUES ($1, $2)
             ON CONFLICT (store) DO UPDATE SET version = excluded.version",
            &[&store, &version],
        )
        .await
        .map_err(|e| failed("its new version", e))?;
        tx.commit().await.map_err(|e| failed("commit", e))
    }
}

/// A driver error as a store error: what was being done, then every cause (the driver's
/// own text is "db error" alone; the server's message is its source).
pub fn failed(what: &str, e: &tokio_postgres::Error) -> Error {
    Error::store(format!("{what}: {}", chain(e)))
}

/// Whether the server refused a statement for a serialization failure or a deadlock:
/// the transaction can be run again.
pub fn is_retryable(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.code().is_some_and(|code| {
        *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
    })
}

pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

fn place_of(config: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("{host}:{port}/{db}")
}

/// A count or version from a `bigint` column (never negative in these stores).
pub fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A count or version for a `bigint` column.
pub fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
