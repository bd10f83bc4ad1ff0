//! The one way the example tools write their SQLite ledgers: a closure run in an
//! IMMEDIATE transaction on the blocking pool, committed before the answer goes out.

use std::sync::{Arc, Mutex};

use rusqlite::{Connection, Transaction, TransactionBehavior};

/// Runs `work` in one IMMEDIATE transaction on `conn` and commits it. Storage failures
/// become `E` through `error`.
pub async fn transact<T, E>(
    conn: &Arc<Mutex<Connection>>,
    work: impl FnOnce(&Transaction<'_>) -> Result<T, E> + Send + 'static,
    error: fn(String) -> E,
) -> Result<T, E>
where
    T: Send + 'static,
    E: Send + 'static,
{
    let conn = conn.clone();
    let done = tokio::task::spawn_blocking(move || {
        let mut conn = conn
            .lock()
            .map_err(|_| error("connection poisoned".into()))?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| error(e.to_string()))?;
        let value = work(&tx)?;
        tx.commit().map_err(|e| error(e.to_string()))?;
        Ok(value)
    })
    .await;
    done.unwrap_or_else(|e| Err(error(e.to_string())))
}
