//! The checkout server's ledger, one SQLite database (a file under `--data`, durable with
//! `synchronous=FULL`, so a restarted server still replays its keys; or in memory): the
//! answer stored under each idempotency key, the state (reservations, payments, refunds,
//! shipments) and a log of every call. Each call's decision, its effect and its log line
//! are one IMMEDIATE transaction, committed before the server answers.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde_json::{Value, json};

use super::effects::{Decision, charge, refund, release, reserve, ship};
use super::report::{
    CheckoutState, Hold, LedgerEntry, LedgerReport, Payment, PaymentStatus, Refund, Reservation,
    Shipment,
};
use super::tools::{
    CHARGE_PAYMENT, CREATE_SHIPMENT, PAYMENT_STATUS, REFUND_PAYMENT, RELEASE_INVENTORY,
    RESERVE_INVENTORY, ReceiptMode, ShipmentMode,
};
use super::{CheckoutError, Result, SERVER_NAME};

/// A checked call to decide.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub tool: &'static str,
    pub key: String,
    /// Validated against the tool's input schema, integers normalised.
    pub arguments: Value,
    pub shipment: ShipmentMode,
    pub receipt: ReceiptMode,
}

/// How the ledger answered a call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// A success: applied now, or a replay of the stored answer.
    Done { result: Value, replayed: bool },
    /// A tool error: nothing applied.
    Error(String),
}

/// The server's ledger; clones share one connection.
#[derive(Debug, Clone)]
pub(crate) struct Ledger {
    conn: Arc<Mutex<Connection>>,
}

pub(crate) fn store_error(e: impl std::fmt::Display) -> CheckoutError {
    CheckoutError::Ledger(e.to_string())
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The canonical text of the arguments, so that the same payload compares equal however
/// its keys were ordered.
fn canonical(value: &Value) -> Result<String> {
    let bytes = shared_types::json::canonicalize(value).map_err(store_error)?;
    String::from_utf8(bytes).map_err(store_error)
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}
const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS answers (
        key       TEXT PRIMARY KEY,
        tool      TEXT NOT NULL,
        arguments TEXT NOT NULL,
        result    TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS calls (
        seq        INTEGER PRIMARY KEY AUTOINCREMENT,
        key        TEXT,
        tool       TEXT NOT NULL,
        arguments  TEXT NOT NULL,
        result     TEXT,
        is_error   INTEGER NOT NULL,
        outcome    TEXT NOT NULL,
        new_effect INTEGER NOT NULL,
        reason     TEXT,
        at         TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS reservations (
        id TEXT PRIMARY KEY, sku TEXT NOT NULL, quantity INTEGER NOT NULL,
        status TEXT NOT NULL, reserved_by TEXT NOT NULL, released_by TEXT
    );
    CREATE TABLE IF NOT EXISTS payments (
        id TEXT PRIMARY KEY, order_id TEXT NOT NULL, amount_minor INTEGER NOT NULL,
        currency TEXT NOT NULL, status TEXT NOT NULL, charged_by TEXT NOT NULL, refund_id TEXT
    );
    CREATE TABLE IF NOT EXISTS refunds (
        id TEXT PRIMARY KEY, payment_id TEXT NOT NULL, amount_minor INTEGER NOT NULL,
        currency TEXT NOT NULL, refunded_by TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS dead_keys (
        key TEXT PRIMARY KEY, found_by TEXT NOT NULL, at TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS shipments (
        id TEXT PRIMARY KEY, order_id TEXT NOT NULL, reservation_id TEXT NOT NULL,
        address TEXT NOT NULL, created_by TEXT NOT NULL
    );";

impl Ledger {
    /// Opens (or creates) the ledger at `path`; `None` keeps it in memory.
    pub fn open(path: Option<&Path>) -> Result<Self> {
        let conn = match path {
            Some(path) => sagaplane_storage::sqlite::open_connection(path, "ledger")
                .map_err(agent_host::Error::from)?,
            None => Connection::open_in_memory().map_err(store_error)?,
        };
        conn.execute_batch(SCHEMA).map_err(store_error)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Runs `work` in one IMMEDIATE transaction on the blocking pool and commits it.
    async fn transact<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Transaction<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        crate::sqlite::transact(&self.conn, work, CheckoutError::Ledger).await
    }

    /// Records a call refused before it reached the ledger's decision (no key, bad
    /// arguments, conflicting keys).
    pub async fn refuse(
        &self,
        tool: &str,
        key: Option<&str>,
        arguments: &Value,
        why: &str,
    ) -> Result<()> {
        let (tool, key, why) = (tool.to_owned(), key.map(str::to_owned), why.to_owned());
        let arguments = arguments.to_string();
        self.transact(move |tx| {
            log(
                tx,
                key.as_deref(),
                &tool,
                &arguments,
                None,
                "refused",
                Some(&why),
            )
        })
        .await
    }

    /// Whether the `charge_payment` call under `forward_key` captured a payment: its
    /// result if it did; if not, the key is dead from now on (a late charge under it is
    /// refused), so the answer stays true. Changes no payment.
    pub async fn payment_status(&self, forward_key: String, arguments: Value) -> Result<Value> {
        let arguments = canonical(&arguments)?;
        self.transact(move |tx| {
            let charged: Option<String> = tx
                .query_row(
                    "SELECT result FROM answers WHERE key = ?1 AND tool = ?2",
                    params![forward_key, CHARGE_PAYMENT],
                    |r| r.get(0),
                )
                .optional()
                .map_err(store_error)?;
            let answer = match charged {
                Some(result) => json!({"status": "applied", "response": parse(&result)}),
                None => {
                    tx.execute(
                        "INSERT OR IGNORE INTO dead_keys (key, found_by, at) VALUES (?1, ?2, ?3)",
                        params![forward_key, PAYMENT_STATUS, now()],
                    )
                    .map_err(store_error)?;
                    json!({"status": "not-applied"})
                }
            };
            log(
                tx,
                None,
                PAYMENT_STATUS,
                &arguments,
                Some(&answer),
                "answered",
                None,
            )?;
            Ok(answer)
        })
        .await
    }

    /// Decides a call and records it: replays it, refuses it, applies it or fails it.
    pub async fn perform(&self, call: Call) -> Result<Answer> {
        let arguments = canonical(&call.arguments)?;
        self.transact(move |tx| {
            let key = call.key.as_str();
            let dead: Option<String> = tx
                .query_row(
                    "SELECT found_by FROM dead_keys WHERE key = ?1",
                    [key],
                    |r| r.get(0),
                )
                .optional()
                .map_err(store_error)?;
            if let Some(found_by) = dead {
                let why = format!(
                    "idempotency key {key:?} was found not applied by {found_by}; a call \
                     under it arriving after that is refused and changes nothing"
                );
                return refused(tx, key, call.tool, &arguments, why);
            }
            let earlier: Option<(String, String, String)> = tx
                .query_row(
                    "SELECT tool, arguments, result FROM answers WHERE key = ?1",
                    [key],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()
                .map_err(store_error)?;
            if let Some((tool, earlier_arguments, result)) = earlier {
                if tool == call.tool && earlier_arguments == arguments {
                    let result = parse(&result);
                    log(
                        tx,
                        Some(key),
                        call.tool,
                        &arguments,
                        Some(&result),
                        "replayed",
                        None,
                    )?;
                    return Ok(Answer::Done {
                        result,
                        replayed: true,
                    });
                }
                let why = format!(
                    "idempotency key {key:?} was already used for {tool} with a different \
                     payload; a key names exactly one call, so this one is refused and \
                     changes nothing"
                );
                return refused(tx, key, call.tool, &arguments, why);
            }
            let decision = match call.tool {
                RESERVE_INVENTORY => reserve(tx, key, &call.arguments)?,
                CHARGE_PAYMENT => charge(tx, key, &call.arguments, call.receipt)?,
                CREATE_SHIPMENT => ship(tx, key, &call.arguments, call.shipment)?,
                REFUND_PAYMENT => refund(tx, key, &call.arguments)?,
                RELEASE_INVENTORY => release(tx, key, &call.arguments)?,
                other => Decision::Failed(format!("no tool named {other:?}")),
            };
            let (result, outcome) = match decision {
                Decision::Failed(why) => {
                    log(
                        tx,
                        Some(key),
                        call.tool,
                        &arguments,
                        None,
                        "failed",
                        Some(&why),
                    )?;
                    return Ok(Answer::Error(why));
                }
                Decision::Applied(result) => (result, "applied"),
                Decision::Unchanged(result, outcome) => (result, outcome),
            };
            tx.execute(
                "INSERT INTO answers (key, tool, arguments, result) VALUES (?1, ?2, ?3, ?4)",
                params![key, call.tool, arguments, result.to_string()],
            )
            .map_err(store_error)?;
            log(
                tx,
                Some(key),
                call.tool,
                &arguments,
                Some(&result),
                outcome,
                None,
            )?;
            Ok(Answer::Done {
                result,
                replayed: false,
            })
        })
        .await
    }

    /// The whole ledger.
    pub async fn report(&self) -> Result<LedgerReport> {
        self.transact(|tx| {
            Ok(LedgerReport {
                server: SERVER_NAME.to_owned(),
                calls: calls(tx)?,
                state: state(tx)?,
            })
        })
        .await
    }
}

/// Records a call under `key` refused for `why`, and answers it so.
fn refused(
    tx: &Transaction<'_>,
    key: &str,
    tool: &str,
    arguments: &str,
    why: String,
) -> Result<Answer> {
    log(tx, Some(key), tool, arguments, None, "refused", Some(&why))?;
    Ok(Answer::Error(why))
}

fn log(
    tx: &Transaction<'_>,
    key: Option<&str>,
    tool: &str,
    arguments: &str,
    result: Option<&Value>,
    outcome: &str,
    reason: Option<&str>,
) -> Result<()> {
    let is_error = matches!(outcome, "refused" | "failed");
    tx.execute(
        "INSERT INTO calls (key, tool, arguments, result, is_error, outcome, new_effect,
                            reason, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            key,
            tool,
            arguments,
            result.map(Value::to_string),
            is_error,
            outcome,
            outcome == "applied",
            reason,
            now()
        ],
    )
    .map(|_| ())
    .map_err(store_error)
}
fn calls(tx: &Transaction<'_>) -> Result<Vec<LedgerEntry>> {
    let mut statement = tx
        .prepare(
            "SELECT seq, key, tool, arguments, result, is_error, outcome, new_effect, reason, at
             FROM calls ORDER BY seq",
        )
        .map_err(store_error)?;
    let rows = statement
        .query_map([], |r| {
            Ok(LedgerEntry {
                seq: r.get(0)?,
                idempotency_key: r.get(1)?,
                tool: r.get(2)?,
                arguments: parse(&r.get::<_, String>(3)?),
                result: r.get::<_, Option<String>>(4)?.map(|t| parse(&t)),
                is_error: r.get(5)?,
                outcome: r.get(6)?,
                new_effect: r.get(7)?,
                reason: r.get(8)?,
                at: r.get(9)?,
            })
        })
        .map_err(store_error)?;
    rows.collect::<rusqlite::Result<_>>().map_err(store_error)
}

/// Reads `SELECT id, …` rows into a map by id.
fn by_id<T>(
    tx: &Transaction<'_>,
    sql: &str,
    row: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<BTreeMap<String, T>> {
    let mut statement = tx.prepare(sql).map_err(store_error)?;
    let rows = statement
        .query_map([], |r| Ok((r.get::<_, String>(0)?, row(r)?)))
        .map_err(store_error)?;
    rows.collect::<rusqlite::Result<_>>().map_err(store_error)
}

fn state(tx: &Transaction<'_>) -> Result<CheckoutState> {
    Ok(CheckoutState {
        reservations: by_id(
            tx,
            "SELECT id, sku, quantity, status, reserved_by, released_by FROM reservations",
            |r| {
                Ok(Reservation {
                    sku: r.get(1)?,
                    quantity: r.get(2)?,
                    status: match r.get::<_, String>(3)?.as_str() {
                        "released" => Hold::Released,
                        _ => Hold::Held,
                    },
                    reserved_by: r.get(4)?,
                    released_by: r.get(5)?,
                })
            },
        )?,
        payments: by_id(
            tx,
            "SELECT id, order_id, amount_minor, currency, status, charged_by, refund_id
             FROM payments",
            |r| {
                Ok(Payment {
                    order_id: r.get(1)?,
                    amount_minor: r.get(2)?,
                    currency: r.get(3)?,
                    status: match r.get::<_, String>(4)?.as_str() {
                        "refunded" => PaymentStatus::Refunded,
                        _ => PaymentStatus::Captured,
                    },
                    charged_by: r.get(5)?,
                    refund_id: r.get(6)?,
                })
            },
        )?,
        refunds: by_id(
            tx,
            "SELECT id, payment_id, amount_minor, currency, refunded_by FROM refunds",
            |r| {
                Ok(Refund {
                    payment_id: r.get(1)?,
                    amount_minor: r.get(2)?,
                    currency: r.get(3)?,
                    refunded_by: r.get(4)?,
                })
            },
        )?,
        shipments: by_id(
            tx,
            "SELECT id, order_id, reservation_id, address, created_by FROM shipments",
            |r| {
                Ok(Shipment {
                    order_id: r.get(1)?,
                    reservation_id: r.get(2)?,
                    address: r.get(3)?,
                    created_by: r.get(4)?,
                })
            },
        )?,
    })
}
