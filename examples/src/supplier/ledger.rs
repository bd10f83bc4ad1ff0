//! A tool agent's durable ledger (one SQLite file): every effect once, keyed by its
//! `Idempotency-Key`, with the undo that reversed it; tombstones for undos of calls that
//! never happened; and a log of every call and how it was answered. Each call's decision
//! and its record are one IMMEDIATE transaction, durable (`synchronous=FULL`) before the
//! agent answers.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use sagaplane_storage::sqlite::open_connection;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::skills::{Behaviour, fresh_result, resource_of};
use super::{Result, SupplierError};

/// What kind of entry an effect is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EffectKind {
    /// A change (a vendor created, a capture made, an email sent).
    Forward,
    /// A compensation; `undoes` names the forward effect it reversed, if there was one.
    Undo,
    /// A read-only answer, kept so that a repeat with the same key gets the same answer.
    Read,
}

impl EffectKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Forward => "forward",
            Self::Undo => "undo",
            Self::Read => "read",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "forward" => Self::Forward,
            "undo" => Self::Undo,
            _ => Self::Read,
        }
    }
}

/// One applied call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Effect {
    pub seq: i64,
    /// The `Idempotency-Key` (absent only for read-only calls sent without one).
    pub key: Option<String>,
    pub skill: String,
    pub kind: EffectKind,
    pub args: Value,
    pub result: Value,
    /// RFC 3339 time it was applied.
    pub at: String,
    /// For a forward effect: the key of the undo that reversed it.
    pub undone_by: Option<String>,
    /// For an undo: the key of the forward effect it reversed (none: nothing to undo).
    pub undoes: Option<String>,
}

/// An undo that found nothing applied under `forward_key`, or a status call that found
/// it not applied (`undo_key` is that call's key): the key is dead, and a late forward
/// call with it is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tombstone {
    pub forward_key: String,
    pub undo_key: String,
    pub at: String,
}

/// One call the agent received and how it answered: `applied`, `replayed`, `undone`,
/// `already-undone`, `nothing-to-undo`, `refused`, `declined`, `hung`, `unavailable`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRecord {
    pub seq: i64,
    pub key: Option<String>,
    pub skill: String,
    pub outcome: String,
    pub reason: Option<String>,
    pub at: String,
}

/// The ledger as `GET /ledger` serves it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerReport {
    pub agent: String,
    pub effects: Vec<Effect>,
    pub tombstones: Vec<Tombstone>,
    /// The calls refused (a reused key, a late forward after its undo, bad input).
    pub refused: Vec<CallRecord>,
    /// How many calls reached the agent.
    pub calls: u64,
    pub call_log: Vec<CallRecord>,
}

impl LedgerReport {
    /// The effect recorded under `key`.
    pub fn effect(&self, key: &str) -> Option<&Effect> {
        self.effects.iter().find(|e| e.key.as_deref() == Some(key))
    }

    /// The forward effects of `skill`.
    pub fn forwards(&self, skill: &str) -> Vec<&Effect> {
        self.effects
            .iter()
            .filter(|e| e.kind == EffectKind::Forward && e.skill == skill)
            .collect()
    }

    /// Calls of `skill` answered with `outcome`.
    pub fn calls_with(&self, skill: &str, outcome: &str) -> usize {
        self.call_log
            .iter()
            .filter(|c| c.skill == skill && c.outcome == outcome)
            .count()
    }
}

/// How the ledger answered a call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// Applied now (or, for an undo, done now).
    Applied(Value),
    /// The same call again: the stored result, nothing new applied.
    Replayed(Value),
    /// Refused, nothing applied.
    Refused(String),
}

/// The call to decide, with its arguments already normalised and checked.
#[derive(Debug, Clone)]
pub(crate) struct Call<'a> {
    pub key: Option<&'a str>,
    pub skill: &'a str,
    pub behaviour: Behaviour,
    pub args: &'a Value,
    /// How long a hold it makes lasts (`skills::HOLD`, unless a fault cuts it short).
    pub hold: chrono::TimeDelta,
    /// Whether a forward call undone before it arrived is refused (its tombstone
    /// honoured); only the `accept-late` fault turns it off.
    pub honour_tombstones: bool,
}

/// The ledger of one agent.
#[derive(Debug, Clone)]
pub(crate) struct Ledger {
    agent: String,
    conn: Arc<Mutex<Connection>>,
}

fn store_error(e: impl std::fmt::Display) -> SupplierError {
    SupplierError::Ledger(e.to_string())
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The canonical text of a JSON value, so that the same arguments compare equal.
fn canonical(value: &Value) -> Result<String> {
    let bytes = shared_types::json::canonicalize(value).map_err(store_error)?;
    String::from_utf8(bytes).map_err(store_error)
}

struct Row {
    seq: i64,
    key: Option<String>,
    skill: String,
    kind: String,
    args: String,
    result: String,
    at: String,
    undone_by: Option<String>,
    undoes: Option<String>,
}

const ROW: &str = "seq, key, skill, kind, args, result, at, undone_by, undoes";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        seq: r.get(0)?,
        key: r.get(1)?,
        skill: r.get(2)?,
        kind: r.get(3)?,
        args: r.get(4)?,
        result: r.get(5)?,
        at: r.get(6)?,
        undone_by: r.get(7)?,
        undoes: r.get(8)?,
    })
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

impl Row {
    fn effect(self) -> Effect {
        Effect {
            seq: self.seq,
            key: self.key,
            skill: self.skill,
            kind: EffectKind::parse(&self.kind),
            args: parse(&self.args),
            result: parse(&self.result),
            at: self.at,
            undone_by: self.undone_by,
            undoes: self.undoes,
        }
    }
}

impl Ledger {
    /// Opens (or creates) the ledger of `agent` at `path`.
    pub fn open(path: &Path, agent: &str) -> Result<Self> {
        let conn = open_connection(path, "ledger").map_err(agent_host::Error::from)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS effects (
                 seq       INTEGER PRIMARY KEY AUTOINCREMENT,
                 key       TEXT UNIQUE,
                 skill     TEXT NOT NULL,
                 kind      TEXT NOT NULL,
                 args      TEXT NOT NULL,
                 result    TEXT NOT NULL,
                 resource  TEXT,
                 at        TEXT NOT NULL,
                 undone_by TEXT,
                 undoes    TEXT
             );
             CREATE INDEX IF NOT EXISTS effects_resource ON effects (skill, resource);
             CREATE TABLE IF NOT EXISTS tombstones (
                 forward_key TEXT PRIMARY KEY,
                 undo_key    TEXT NOT NULL,
                 at          TEXT NOT NULL
             );
             CREATE TABLE IF NOT EXISTS calls (
                 seq     INTEGER PRIMARY KEY AUTOINCREMENT,
                 key     TEXT,
                 skill   TEXT NOT NULL,
                 outcome TEXT NOT NULL,
                 reason  TEXT,
                 at      TEXT NOT NULL
             );",
        )
        .map_err(|e| SupplierError::Ledger(format!("cannot prepare {}: {e}", path.display())))?;
        Ok(Self {
            agent: agent.to_owned(),
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Runs `work` in one IMMEDIATE transaction on the blocking pool and commits it.
    async fn transact<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Transaction<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        crate::sqlite::transact(&self.conn, work, SupplierError::Ledger).await
    }

    /// Records a call that was answered without touching the ledger's effects.
    pub async fn note(
        &self,
        key: Option<&str>,
        skill: &str,
        outcome: &str,
        reason: Option<&str>,
    ) -> Result<()> {
        let (key, skill, outcome) = (key.map(str::to_owned), skill.to_owned(), outcome.to_owned());
        let reason = reason.map(str::to_owned);
        self.transact(move |tx| log_call(tx, key.as_deref(), &skill, &outcome, reason.as_deref()))
            .await
    }

    /// Decides a call and records it: applies it, replays it, or refuses it.
    pub async fn perform(&self, call: Call<'_>) -> Result<Outcome> {
        let args = canonical(call.args)?;
        let (key, skill) = (call.key.map(str::to_owned), call.skill.to_owned());
        let (behaviour, value, hold) = (call.behaviour, call.args.clone(), call.hold);
        let honour_tombstones = call.honour_tombstones;
        self.transact(move |tx| {
            let decision = Decision {
                behaviour,
                hold,
                honour_tombstones,
            };
            let (outcome, name) = decide(tx, key.as_deref(), &skill, decision, &value, &args)?;
            let reason = match &outcome {
                Outcome::Refused(why) => Some(why.as_str()),
                _ => None,
            };
            log_call(tx, key.as_deref(), &skill, name, reason)?;
            Ok(outcome)
        })
        .await
    }

    /// The whole ledger.
    pub async fn report(&self) -> Result<LedgerReport> {
        let agent = self.agent.clone();
        self.transact(move |tx| {
            let effects = tx
                .prepare(&format!("SELECT {ROW} FROM effects ORDER BY seq"))
                .and_then(|mut s| s.query_map([], row)?.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(store_error)?
                .into_iter()
                .map(Row::effect)
                .collect();
            let tombstones = tx
                .prepare("SELECT forward_key, undo_key, at FROM tombstones ORDER BY rowid")
                .and_then(|mut s| {
                    s.query_map([], |r| {
                        Ok(Tombstone {
                            forward_key: r.get(0)?,
                            undo_key: r.get(1)?,
                            at: r.get(2)?,
                        })
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(store_error)?;
            let call_log: Vec<CallRecord> = tx
                .prepare("SELECT seq, key, skill, outcome, reason, at FROM calls ORDER BY seq")
                .and_then(|mut s| {
                    s.query_map([], |r| {
                        Ok(CallRecord {
                            seq: r.get(0)?,
                            key: r.get(1)?,
                            skill: r.get(2)?,
                            outcome: r.get(3)?,
                            reason: r.get(4)?,
                            at: r.get(5)?,
                        })
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(store_error)?;
            Ok(LedgerReport {
                agent,
                effects,
                tombstones,
                refused: call_log
                    .iter()
                    .filter(|c| c.outcome == "refused")
                    .cloned()
                    .collect(),
                calls: call_log.len() as u64,
                call_log,
            })
        })
        .await
    }
}

fn log_call(
    tx: &Transaction<'_>,
    key: Option<&str>,
    skill: &str,
    outcome: &str,
    reason: Option<&str>,
) -> Result<()> {
    tx.execute(
        "INSERT INTO calls (key, skill, outcome, reason, at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![key, skill, outcome, reason, now()],
    )
    .map(|_| ())
    .map_err(store_error)
}

fn by_key(tx: &Transaction<'_>, key: &str) -> Result<Option<Row>> {
    tx.query_row(
        &format!("SELECT {ROW} FROM effects WHERE key = ?1"),
        [key],
        row,
    )
    .optional()
    .map_err(store_error)
}

fn by_resource(tx: &Transaction<'_>, skill: &str, resource: &str) -> Result<Option<Row>> {
    tx.query_row(
        &format!("SELECT {ROW} FROM effects WHERE skill = ?1 AND resource = ?2"),
        [skill, resource],
        row,
    )
    .optional()
    .map_err(store_error)
}

fn insert(
    tx: &Transaction<'_>,
    key: Option<&str>,
    skill: &str,
    kind: EffectKind,
    args: &str,
    result: &Value,
    undoes: Option<&str>,
) -> Result<()> {
    let resource = match kind {
        EffectKind::Forward => resource_of(skill, result),
        _ => None,
    };
    tx.execute(
        "INSERT INTO effects (key, skill, kind, args, result, resource, at, undoes)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            key,
            skill,
            kind.as_str(),
            args,
            result.to_string(),
            resource,
            now(),
            undoes
        ],
    )
    .map(|_| ())
    .map_err(store_error)
}

/// How a call is decided: what the skill does, how long a hold it makes lasts, and
/// whether its tombstone, if any, is honoured.
struct Decision {
    behaviour: Behaviour,
    hold: chrono::TimeDelta,
    honour_tombstones: bool,
}

/// The decision itself, inside the call's transaction.
fn decide(
    tx: &Transaction<'_>,
    key: Option<&str>,
    skill: &str,
    decision: Decision,
    value: &Value,
    args: &str,
) -> Result<(Outcome, &'static str)> {
    let Decision {
        behaviour,
        hold,
        honour_tombstones,
    } = decision;
    let refused = |why: String| Ok((Outcome::Refused(why), "refused"));
    if let Some(key) = key {
        if let Some(earlier) = by_key(tx, key)? {
            if earlier.skill != skill || earlier.args != args {
                return refused(format!(
                    "Idempotency-Key {key:?} was already used for {} with other arguments; \
                     a key names exactly one call, so this one is refused and changes nothing",
                    earlier.skill
                ));
            }
            if let Some(undo) = &earlier.undone_by {
                return refused(format!(
                    "the effect of {key:?} was undone by {undo:?}; it is not applied again"
                ));
            }
            return Ok((Outcome::Replayed(parse(&earlier.result)), "replayed"));
        }
        if honour_tombstones && matches!(behaviour, Behaviour::Forward { .. }) {
            let tombstone: Option<String> = tx
                .query_row(
                    "SELECT undo_key FROM tombstones WHERE forward_key = ?1",
                    [key],
                    |r| r.get(0),
                )
                .optional()
                .map_err(store_error)?;
            if let Some(undo) = tombstone {
                return refused(format!(
                    "{key:?} was compensated by {undo:?} before it was ever applied; \
                     this late call is refused and changes nothing"
                ));
            }
        }
    }
    match behaviour {
        Behaviour::Forward { prefix } | Behaviour::Read { prefix } => {
            let made: i64 = tx
                .query_row(
                    "SELECT COUNT(*) FROM effects WHERE skill = ?1",
                    [skill],
                    |r| r.get(0),
                )
                .map_err(store_error)?;
            let id = format!("{prefix}_{:04}", made + 1);
            let result = fresh_result(skill, &id, value, chrono::Utc::now(), hold);
            let kind = match behaviour {
                Behaviour::Forward { .. } => EffectKind::Forward,
                _ => EffectKind::Read,
            };
            insert(tx, key, skill, kind, args, &result, None)?;
            Ok((Outcome::Applied(result), "applied"))
        }
        // Never recorded as an effect: asking again under the same key asks anew.
        Behaviour::Status { of } => status(tx, skill, of, value, key),
        Behaviour::Undo { of, field, answer } => {
            let Some(key) = key else {
                return refused(format!(
                    "{skill} changes state and needs an Idempotency-Key"
                ));
            };
            undo(tx, key, skill, (of, field, answer), value, args)
        }
    }
}

/// Whether the call of `of` under `forwardKey` took effect. Asked and answered without
/// an effect of its own; a key found not applied gets a tombstone, so that a call under
/// it arriving late is refused and the answer given stays true.
fn status(
    tx: &Transaction<'_>,
    skill: &str,
    of: &str,
    value: &Value,
    key: Option<&str>,
) -> Result<(Outcome, &'static str)> {
    let Some(forward_key) = value.get("forwardKey").and_then(Value::as_str) else {
        return Ok((
            Outcome::Refused(format!("{skill} needs forwardKey")),
            "refused",
        ));
    };
    match by_key(tx, forward_key)? {
        Some(found) if found.skill == of => Ok((
            Outcome::Applied(json!({"status": "applied", "response": parse(&found.result)})),
            "answered",
        )),
        Some(found) => Ok((
            Outcome::Refused(format!(
                "forwardKey {forward_key:?} names a {} call, not a {of} call",
                found.skill
            )),
            "refused",
        )),
        None => {
            tx.execute(
                "INSERT OR IGNORE INTO tombstones (forward_key, undo_key, at) VALUES (?1, ?2, ?3)",
                params![forward_key, key.unwrap_or(skill), now()],
            )
            .map_err(store_error)?;
            Ok((
                Outcome::Applied(json!({"status": "not-applied"})),
                "answered",
            ))
        }
    }
}

/// An undo: reverse the forward effect it names, or record that there was none.
fn undo(
    tx: &Transaction<'_>,
    key: &str,
    skill: &str,
    (of, field, answer): (&str, &str, &str),
    value: &Value,
    args: &str,
) -> Result<(Outcome, &'static str)> {
    let forward_key = value.get("forwardKey").and_then(Value::as_str);
    let target = match (value.get(field).and_then(Value::as_str), forward_key) {
        (Some(resource), _) => by_resource(tx, of, resource)?,
        (None, Some(forward_key)) => match by_key(tx, forward_key)? {
            Some(found) if found.skill != of => {
                let why = format!(
                    "forwardKey {forward_key:?} names a {} call, not a {of} call",
                    found.skill
                );
                return Ok((Outcome::Refused(why), "refused"));
            }
            found => found,
        },
        (None, None) => {
            let why = format!("{skill} needs {field} or forwardKey");
            return Ok((Outcome::Refused(why), "refused"));
        }
    };
    let (result, name) = match target {
        Some(forward) if forward.undone_by.is_none() => {
            tx.execute(
                "UPDATE effects SET undone_by = ?1 WHERE seq = ?2",
                params![key, forward.seq],
            )
            .map_err(store_error)?;
            let result = json!({ answer: true });
            insert(
                tx,
                Some(key),
                skill,
                EffectKind::Undo,
                args,
                &result,
                forward.key.as_deref(),
            )?;
            return Ok((Outcome::Applied(result), "undone"));
        }
        // Reversed earlier by another undo: the resource is already gone.
        Some(_) => (json!({ answer: true }), "already-undone"),
        None => {
            if let Some(forward_key) = forward_key {
                tx.execute(
                    "INSERT OR IGNORE INTO tombstones (forward_key, undo_key, at)
                     VALUES (?1, ?2, ?3)",
                    params![forward_key, key, now()],
                )
                .map_err(store_error)?;
            }
            (
                json!({ answer: false, "nothingToUndo": true }),
                "nothing-to-undo",
            )
        }
    };
    insert(tx, Some(key), skill, EffectKind::Undo, args, &result, None)?;
    Ok((Outcome::Applied(result), name))
}
