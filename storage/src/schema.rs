//! One schema version per store in a SQLite file, and the migrations that bring a store
//! from the version its file holds to the last one its module knows.
//!
//! A store's module lists its migrations in order; the number applied is its version,
//! kept in the file's `schema_versions` table (one row per store, since several stores
//! share one file). `migrate` applies the missing ones in one transaction, so a start cut
//! short leaves the store at the version it had. A file written by a newer binary, whose
//! store is at a version this one does not know, is refused rather than read.
//!
//! Files from before versions have no row: every migration is then run, so each checks
//! what it adds (`IF NOT EXISTS`, `has_column`) where an earlier binary may have made it.

use rusqlite::{Connection, OptionalExtension, Transaction};

use crate::sqlite::{Database, open_connection};
use crate::{Error, Result};

/// One step of a store's schema, run inside the migrating transaction.
pub struct Migration {
    /// What it does, for the log and errors.
    pub what: &'static str,
    pub apply: fn(&Transaction<'_>) -> rusqlite::Result<()>,
}

/// Whether `table` has `column` (for the migrations that earlier binaries ran unversioned).
pub fn has_column(tx: &Transaction<'_>, table: &str, column: &str) -> rusqlite::Result<bool> {
    tx.prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?
        .exists([table, column])
}

/// The version of `store` in `conn`'s file: 0 when it has none yet.
pub fn version(conn: &Connection, store: &str) -> rusqlite::Result<usize> {
    let table = conn
        .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_versions'")?
        .exists([])?;
    if !table {
        return Ok(0);
    }
    let version: Option<i64> = conn
        .query_row(
            "SELECT version FROM schema_versions WHERE store = ?1",
            [store],
            |row| row.get(0),
        )
        .optional()?;
    Ok(version.map_or(0, |v| usize::try_from(v).unwrap_or(usize::MAX)))
}

/// Brings `store` in `db`'s file to the last of `migrations`, or refuses a file whose
/// store is at a version past them.
pub fn migrate(db: &Database, store: &str, migrations: &[Migration]) -> Result<()> {
    let mut conn = open_connection(db.path(), store)?;
    let failed = |what: &str, e: rusqlite::Error| {
        Error::store(format!(
            "cannot migrate the {store} store in {} ({what}): {e}",
            db.path().display()
        ))
    };
    // IMMEDIATE: two processes starting on one file do not both migrate it.
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(|e| failed("begin", e))?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_versions (
             store   TEXT PRIMARY KEY,
             version INTEGER NOT NULL
         );",
    )
    .map_err(|e| failed("the version table", e))?;
    let held = version(&tx, store).map_err(|e| failed("its version", e))?;
    if held > migrations.len() {
        return Err(Error::store(format!(
            "the {store} store in {} is at schema version {held}, newer than this binary knows \
             ({}): run the binary that wrote it, or a newer one",
            db.path().display(),
            migrations.len()
        )));
    }
    if held == migrations.len() {
        return Ok(());
    }
    for (number, migration) in migrations.iter().enumerate().skip(held) {
        if held > 0 {
            tracing::info!(store, version = number + 1, "migrating: {}", migration.what);
        }
        (migration.apply)(&tx).map_err(|e| failed(migration.what, e))?;
    }
    tx.execute(
        "INSERT INTO schema_versions (store, version) VALUES (?1, ?2)
         ON CONFLICT (store) DO UPDATE SET version = excluded.version",
        rusqlite::params![store, migrations.len() as i64],
    )
    .map_err(|e| failed("the new version", e))?;
    tx.commit().map_err(|e| failed("commit", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST: Migration = Migration {
        what: "a table",
        apply: |tx| tx.execute_batch("CREATE TABLE IF NOT EXISTS t (a INTEGER);"),
    };
    const SECOND: Migration = Migration {
        what: "a column",
        apply: |tx| {
            if !has_column(tx, "t", "b")? {
                tx.execute_batch("ALTER TABLE t ADD COLUMN b INTEGER;")?;
            }
            Ok(())
        },
    };
    const BROKEN: Migration = Migration {
        what: "a broken step",
        apply: |tx| tx.execute_batch("ALTER TABLE missing ADD COLUMN c INTEGER;"),
    };

    fn version_of(db: &Database, store: &str) -> usize {
        version(&open_connection(db.path(), "test").unwrap(), store).unwrap()
    }

    #[test]
    fn a_store_is_brought_up_in_order_and_each_store_keeps_its_own_version() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(&dir.path().join("s.db"), "test").unwrap();
        migrate(&db, "one", &[FIRST]).unwrap();
        assert_eq!(version_of(&db, "one"), 1);
        migrate(&db, "one", &[FIRST, SECOND]).unwrap();
        assert_eq!(version_of(&db, "one"), 2);
        assert_eq!(version_of(&db, "two"), 0);
        // Again at the same version: nothing to do.
        migrate(&db, "one", &[FIRST, SECOND]).unwrap();
        assert_eq!(version_of(&db, "one"), 2);
    }

    #[test]
    fn a_store_newer_than_the_binary_is_refused_and_a_failed_step_leaves_the_version() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(&dir.path().join("s.db"), "test").unwrap();
        migrate(&db, "one", &[FIRST, SECOND]).unwrap();
        let refused = migrate(&db, "one", &[FIRST]).unwrap_err().to_string();
        assert!(
            refused.contains("schema version 2, newer than this binary knows (1)"),
            "{refused}"
        );
        let failed = migrate(&db, "one", &[FIRST, SECOND, BROKEN])
            .unwrap_err()
            .to_string();
        assert!(failed.contains("a broken step"), "{failed}");
        assert_eq!(version_of(&db, "one"), 2);
    }
}
