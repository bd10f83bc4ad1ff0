//! The executor's state file: registry, journal and A2A tasks in one SQLite database,
//! so that one group commit (one fsync) serves them all. A data directory of the earlier
//! layout, one file per store, is imported into it the first time.

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use sagaplane_storage::sqlite::{Database, FileLock, open_connection};

use crate::error::{Error, Result};

/// The state file in the data directory.
pub const STATE_FILE: &str = "executor.db";

/// The name the state file's database (and its writer thread) goes by.
pub const STATE_FILE_NAME: &str = "executor";

/// The files of the earlier layout, one per store, in the order they are imported.
pub const EARLIER_FILES: [&str; 3] = ["registry.db", "journal.db", "tasks.db"];

/// Opens the state file in `dir`, first importing the files of the earlier layout if
/// there is no state file yet and any of them is there. Refused while another process
/// holds the state file (`FileLock`): two executors on one data directory would both
/// resume its unfinished sagas.
pub fn open(dir: &Path) -> Result<Database> {
    let path = dir.join(STATE_FILE);
    let lock = FileLock::acquire(&path, "the executor's state file")?;
    if !path.exists() {
        let earlier: Vec<PathBuf> = EARLIER_FILES
            .iter()
            .map(|name| dir.join(name))
            .filter(|p| p.exists())
            .collect();
        if !earlier.is_empty() {
            import(&earlier, &path)?;
        }
    }
    Ok(Database::open_locked(&path, STATE_FILE_NAME, lock)?)
}

/// Copies every table of `earlier` (schema, indexes and rows) into a new file that takes
/// the name `path` only once it holds all of them, so an import cut short is done again
/// at the next start instead of leaving a state file without the earlier state.
fn import(earlier: &[PathBuf], path: &Path) -> Result<()> {
    let importing = path.with_extension("db.importing");
    let failed = |source| Error::Database {
        what: "cannot import the earlier state files",
        source,
    };
    for suffix in ["", "-wal", "-shm"] {
        let mut stale = importing.clone().into_os_string();
        stale.push(suffix);
        let stale = PathBuf::from(stale);
        if stale.exists() {
            std::fs::remove_file(&stale).map_err(|source| Error::Io {
                what: format!("cannot remove {}", stale.display()),
                source,
            })?;
        }
    }
    {
        let mut conn = open_connection(&importing, "executor")?;
        for file in earlier {
            copy_file(&mut conn, file).map_err(failed)?;
        }
        // The next open finds every row in the file itself, none left in a WAL.
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
            .map_err(failed)?;
    }
    std::fs::rename(&importing, path).map_err(|source| Error::Io {
        what: format!("cannot move {} to {}", importing.display(), path.display()),
        source,
    })?;
    // The new name must be durable before anything is written under it: were it lost in
    // a crash, the next start would import again over what was written since.
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| Error::Io {
                what: format!("cannot sync {}", dir.display()),
                source,
            })?;
    }
    for file in earlier {
        tracing::info!(
            from = %file.display(),
            into = %path.display(),
            "imported an earlier state file; it is no longer read and may be deleted"
        );
    }
    Ok(())
}

/// One earlier file's tables, their indexes and rows, in one transaction.
fn copy_file(conn: &mut Connection, file: &Path) -> rusqlite::Result<()> {
    // ATTACH creates a file it does not find: a path changed on the way (not UTF-8) would
    // import an empty database instead of failing.
    let Some(name) = file.to_str() else {
        return Err(rusqlite::Error::InvalidPath(file.to_owned()));
    };
    conn.execute("ATTACH DATABASE ?1 AS earlier", [name])?;
    let copied = (|| {
        let tx = conn.transaction()?;
        // Tables before the indexes on them; SQLite's own objects are made by SQLite.
        let schema: Vec<(String, String, String)> = tx
            .prepare(
                "SELECT type, name, sql FROM earlier.sqlite_master
                 WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'
                 ORDER BY type = 'index', rowid",
            )?
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for (kind, name, sql) in &schema {
            // Every earlier file has its own stores' versions: they are merged into one
            // table, as the stores of the files are.
            if name == "schema_versions" {
                tx.execute_batch(
                    "CREATE TABLE IF NOT EXISTS main.schema_versions (
                         store TEXT PRIMARY KEY, version INTEGER NOT NULL);
                     INSERT OR REPLACE INTO main.schema_versions
                         SELECT store, version FROM earlier.schema_versions;",
                )?;
                continue;
            }
            tx.execute_batch(sql)?;
            if kind == "table" {
                let name = name.replace('"', "\"\"");
                tx.execute_batch(&format!(
                    "INSERT INTO main.\"{name}\" SELECT * FROM earlier.\"{name}\""
                ))?;
            }
        }
        tx.commit()
    })();
    let detached = conn.execute_batch("DETACH DATABASE earlier");
    copied.and(detached)
}

#[cfg(test)]
mod tests;
