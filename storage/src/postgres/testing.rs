//! For tests: the database `scripts/test` starts (`SAGAPLANE_TEST_PG`), and a schema of
//! one's own in it, so that tests running at once never see each other's rows.
//!
//! Where `SAGAPLANE_TEST_PG` is unset a PostgreSQL test says so on stderr and checks
//! nothing; under `CI=true` it fails instead, so that a run without the database cannot
//! pass for one with it.

use super::{Postgres, chain};

/// The variable that names the test database.
pub const TEST_DATABASE: &str = "SAGAPLANE_TEST_PG";

/// The URL of a new, empty schema in the test database, for `test`; `None` (said on
/// stderr) when there is no test database. Panics under `CI=true` without one, or when
/// the database cannot be reached.
pub async fn scratch_database(test: &str) -> Option<String> {
    let Ok(base) = std::env::var(TEST_DATABASE) else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!(
                "{test}: {TEST_DATABASE} is unset under CI=true (scripts/test starts a database and sets it)"
            );
        }
        eprintln!(
            "{test}: SKIPPED, checks nothing: {TEST_DATABASE} is unset (scripts/test starts a PostgreSQL and sets it)"
        );
        return None;
    };
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let db = Postgres::connect(&base, 1).unwrap_or_else(|e| panic!("{test}: {e}"));
    let conn = db
        .connection()
        .await
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    conn.batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap_or_else(|e| panic!("{test}: cannot make a schema: {}", chain(&e)));
    let joiner = if base.contains('?') { '&' } else { '?' };
    Some(format!("{base}{joiner}options=-csearch_path%3D{schema}"))
}
