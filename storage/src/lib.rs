//! The storage engine under every durable store of Sagaplane: the executor's journal,
//! mandates and registry, and the task stores of `agent-host`. It knows rows and
//! transactions, never tasks or sagas.
//!
//! - `sqlite`: one state file, opened with WAL and `synchronous=FULL`, whose one writer
//!   thread commits every write waiting at that moment, from any store on the file, in one
//!   transaction (one fsync for many); an advisory lock keeps a file to one process.
//! - `schema`: a version per store in a SQLite file, migrations in order, a schema newer
//!   than the binary refused.
//! - `postgres`: the database replicas share: a pool, a schema version per store, group
//!   commit (`postgres/batch.rs`), notifications (`postgres/listen.rs`), the replicas
//!   table that shares out what a dead replica held, and throwaway clusters for tests and
//!   the demo. The one module of the workspace that names the driver (tokio-postgres with
//!   deadpool's pool, both pinned).

mod error;
pub mod postgres;
pub mod schema;
pub mod sqlite;

pub use error::{Error, Result};
