//! A completed step's undo deadline (the seed's undo token: "post this back before T and
//! it never happened"): the earlier of the time the tool's result reports, where its card's
//! `undoExpiresAt` points, and `undoTtlSeconds` after the step's success. Computed from the
//! journaled result and event times only, so replaying the journal finds the same one.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use shared_types::expr::{EvalContext, Expr};

use super::spec::StepSpec;

/// The longest piece of a tool's unreadable deadline quoted in a reason.
const QUOTED_CHARS: usize = 64;

/// What the tool's result said about its undo deadline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum Reported {
    /// The skill's card names no place in its result.
    NotDeclared,
    /// An RFC 3339 time, in ms since the Unix epoch.
    At { at_ms: i64 },
    /// Missing, or not an RFC 3339 time: the TTL alone decides.
    Unreadable { reason: String },
}

/// Which bound set the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SetBy {
    /// The time the tool reported.
    Reported,
    /// The card's `undoTtlSeconds`, from the step's success.
    UndoTtlSeconds,
}

/// A completed compensable step's undo deadline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UndoDeadline {
    /// After this (ms since the epoch) the undo is not attempted; `None`: it never expires.
    pub at_ms: Option<i64>,
    pub set_by: Option<SetBy>,
    pub reported: Reported,
    /// The tool reported a deadline before its card's `undoTtlSeconds` could have run out,
    /// counted from the first call of the step (the earliest the tool could have acted):
    /// the card misdeclares the tool. Counted from the success instead, every honest tool
    /// would be short by the call's own latency.
    pub earlier_than_declared: bool,
}

impl UndoDeadline {
    /// The deadline of `step`, which first started at `started_ms` and succeeded at
    /// `succeeded_ms` with `response`.
    pub fn of(step: &StepSpec, response: &Value, started_ms: i64, succeeded_ms: i64) -> Self {
        let reported = match &step.undo_expires_at {
            None => Reported::NotDeclared,
            Some(at) => read_reported(at, response),
        };
        let ttl = step
            .undo_ttl_ms
            .map(|ttl| i64::try_from(ttl).unwrap_or(i64::MAX));
        let by_ttl = ttl.map(|ttl| succeeded_ms.saturating_add(ttl));
        let (at_ms, set_by) = match (&reported, by_ttl) {
            (Reported::At { at_ms }, Some(by_ttl)) if by_ttl < *at_ms => {
                (Some(by_ttl), Some(SetBy::UndoTtlSeconds))
            }
            (Reported::At { at_ms }, _) => (Some(*at_ms), Some(SetBy::Reported)),
            (_, Some(by_ttl)) => (Some(by_ttl), Some(SetBy::UndoTtlSeconds)),
            (_, None) => (None, None),
        };
        let earlier_than_declared = match (&reported, ttl) {
            (Reported::At { at_ms }, Some(ttl)) => *at_ms < started_ms.saturating_add(ttl),
            _ => false,
        };
        Self {
            at_ms,
            set_by,
            reported,
            earlier_than_declared,
        }
    }

    /// Whether the undo has expired at `now_ms`.
    pub fn expired(&self, now_ms: i64) -> bool {
        self.at_ms.is_some_and(|at| now_ms > at)
    }

    /// Why an undo needed at `now_ms` is not attempted (only meaningful once expired).
    pub fn expiry_reason(&self) -> String {
        let by = match self.set_by {
            Some(SetBy::Reported) => "as the tool's result reported",
            _ => "undoTtlSeconds after the step succeeded",
        };
        format!("the undo expired at {} ({by})", rfc3339(self.at_ms))
    }

    /// The ledger's `undoDeadline` member.
    pub fn ledger(&self) -> Value {
        let mut shown = json!({
            "at": self.at_ms.map(|at| rfc3339(Some(at))),
            "setBy": self.set_by,
        });
        if let Value::Object(members) = &mut shown {
            match &self.reported {
                Reported::NotDeclared => {}
                Reported::At { at_ms } => {
                    members.insert("reported".into(), json!(rfc3339(Some(*at_ms))));
                }
                Reported::Unreadable { reason } => {
                    members.insert("reportedUnreadable".into(), json!(reason));
                }
            }
            if self.earlier_than_declared {
                members.insert("earlierThanDeclared".into(), json!(true));
            }
        }
        shown
    }
}

/// The reported deadline at `expression` in `response`.
fn read_reported(expression: &str, response: &Value) -> Reported {
    let unreadable = |reason: String| Reported::Unreadable { reason };
    let expr = match Expr::parse(expression) {
        Ok(expr) => expr,
        Err(e) => return unreadable(format!("the card's undoExpiresAt does not parse: {e}")),
    };
    let ctx = EvalContext {
        response_body: Some(response),
        ..EvalContext::default()
    };
    match expr.evaluate(&ctx) {
        Err(e) => unreadable(format!("the result has no deadline: {e}")),
        Ok(Value::String(text)) => match chrono::DateTime::parse_from_rfc3339(&text) {
            Ok(at) => Reported::At {
                at_ms: at.timestamp_millis(),
            },
            Err(e) => unreadable(format!(
                "{expression} is {:?}, not an RFC 3339 time: {e}",
                quoted(&text)
            )),
        },
        Ok(other) => unreadable(format!(
            "{expression} is {}, not an RFC 3339 time",
            quoted(&other.to_string())
        )),
    }
}

/// At most the first `QUOTED_CHARS` characters of what a tool sent.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// An RFC 3339 time (UTC, milliseconds) for the ledger and reasons.
pub fn rfc3339(at_ms: Option<i64>) -> String {
    at_ms
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| "never".into())
}
