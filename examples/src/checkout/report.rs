//! The checkout server's ledger as `GET /ledger` serves it (every call in order, and the
//! state the calls left: reservations, payments, refunds, shipments), a short
//! human-readable rendering of it, and the invariants it must satisfy.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::tools::{
    CHARGE_PAYMENT, CREATE_SHIPMENT, REFUND_PAYMENT, RELEASE_INVENTORY, RESERVE_INVENTORY,
};

/// One call the server answered, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntry {
    pub seq: i64,
    pub tool: String,
    pub idempotency_key: Option<String>,
    pub arguments: Value,
    /// The `structuredContent` answered (none when the call was refused or failed).
    pub result: Option<Value>,
    /// Whether the answer was a tool error (`isError: true`).
    pub is_error: bool,
    /// `applied` (a new effect), `replayed` (the stored answer to the same key and
    /// arguments), `nothing-to-undo` / `already-undone` (a compensation with nothing left
    /// to do), `refused` (no key, a reused key, bad arguments) or `failed` (a definite
    /// failure, nothing applied).
    pub outcome: String,
    /// Whether this call changed the state (only `applied` ones do).
    pub new_effect: bool,
    /// Why it was refused or failed.
    pub reason: Option<String>,
    /// RFC 3339 time it was answered.
    pub at: String,
}

/// Whether a reservation still holds its stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Hold {
    Held,
    Released,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    pub sku: String,
    pub quantity: i64,
    pub status: Hold,
    /// The idempotency key of the call that made it.
    pub reserved_by: String,
    /// The idempotency key of the call that released it.
    pub released_by: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PaymentStatus {
    Captured,
    Refunded,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Payment {
    pub order_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub status: PaymentStatus,
    pub charged_by: String,
    pub refund_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refund {
    pub payment_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub refunded_by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Shipment {
    pub order_id: String,
    pub reservation_id: String,
    pub address: String,
    pub created_by: String,
}

/// What the calls left behind, by id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckoutState {
    pub reservations: BTreeMap<String, Reservation>,
    pub payments: BTreeMap<String, Payment>,
    pub refunds: BTreeMap<String, Refund>,
    pub shipments: BTreeMap<String, Shipment>,
}

/// The ledger as `GET /ledger` serves it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerReport {
    pub server: String,
    pub calls: Vec<LedgerEntry>,
    pub state: CheckoutState,
}

impl LedgerReport {
    /// The calls of `tool`.
    pub fn calls_of(&self, tool: &str) -> Vec<&LedgerEntry> {
        self.calls.iter().filter(|c| c.tool == tool).collect()
    }

    /// The calls of `tool` answered with `outcome`.
    pub fn count(&self, tool: &str, outcome: &str) -> usize {
        self.calls
            .iter()
            .filter(|c| c.tool == tool && c.outcome == outcome)
            .count()
    }

    /// The calls that changed the state.
    pub fn new_effects(&self) -> Vec<&LedgerEntry> {
        self.calls.iter().filter(|c| c.new_effect).collect()
    }

    /// The calls made with `key`.
    pub fn with_key(&self, key: &str) -> Vec<&LedgerEntry> {
        self.calls
            .iter()
            .filter(|c| c.idempotency_key.as_deref() == Some(key))
            .collect()
    }
}

/// A few lines saying what the ledger holds: each reservation, payment and shipment with
/// its state, and how the calls were answered.
pub fn render_summary(report: &LedgerReport) -> String {
    let state = &report.state;
    let mut out = String::new();
    let mut section = |label: &str, lines: Vec<String>| {
        let mut lines = lines.into_iter();
        let first = lines.next().unwrap_or_else(|| "none".into());
        let _ = writeln!(out, "{label:<13} {first}");
        for line in lines {
            let _ = writeln!(out, "{:<13} {line}", "");
        }
    };
    section(
        "reservations:",
        state
            .reservations
            .iter()
            .map(|(id, r)| {
                let status = match r.status {
                    Hold::Held => "HELD",
                    Hold::Released => "released",
                };
                format!("{id} {} x {} {status}", r.quantity, r.sku)
            })
            .collect(),
    );
    section(
        "payments:",
        state
            .payments
            .iter()
            .map(|(id, p)| {
                let status = match (&p.status, &p.refund_id) {
                    (PaymentStatus::Captured, _) => "CAPTURED".to_owned(),
                    (PaymentStatus::Refunded, Some(refund)) => format!("refunded ({refund})"),
                    (PaymentStatus::Refunded, None) => "refunded".to_owned(),
                };
                format!("{id} {} {} {status}", p.amount_minor, p.currency)
            })
            .collect(),
    );
    section(
        "shipments:",
        state
            .shipments
            .iter()
            .map(|(id, s)| format!("{id} for {} ({})", s.order_id, s.reservation_id))
            .collect(),
    );
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    for call in &report.calls {
        *outcomes.entry(call.outcome.as_str()).or_default() += 1;
    }
    let outcomes: Vec<String> = outcomes.iter().map(|(o, n)| format!("{n} {o}")).collect();
    let calls = if outcomes.is_empty() {
        "none".to_owned()
    } else {
        format!("{} ({})", report.calls.len(), outcomes.join(", "))
    };
    section("calls:", vec![calls]);
    out
}

/// Blocks of text (each under its title) set next to each other in columns.
pub fn side_by_side(columns: &[(&str, &str)]) -> String {
    let blocks: Vec<Vec<String>> = columns
        .iter()
        .map(|(title, text)| {
            let mut lines = vec![(*title).to_owned(), "-".repeat(title.chars().count())];
            lines.extend(text.lines().map(str::to_owned));
            lines
        })
        .collect();
    let widths: Vec<usize> = blocks
        .iter()
        .map(|b| b.iter().map(|l| l.chars().count()).max().unwrap_or(0))
        .collect();
    let height = blocks.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = String::new();
    for row in 0..height {
        let mut line = String::new();
        for (column, block) in blocks.iter().enumerate() {
            let cell = block.get(row).map(String::as_str).unwrap_or("");
            if column + 1 < blocks.len() {
                let pad = widths[column].saturating_sub(cell.chars().count());
                let _ = write!(line, "{cell}{}   ", " ".repeat(pad));
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn text<'a>(value: Option<&'a Value>, pointer: &str) -> Option<&'a str> {
    value?.pointer(pointer)?.as_str()
}

/// Every broken invariant of `report`, as sentences; empty when it is sound: no key
/// applied twice, every replay repeating an earlier answer to the same call, and every
/// reservation, payment, refund and shipment made by exactly the applied call that
/// claims it, with every refund matching a payment it refunded.
pub fn check_ledger(report: &LedgerReport) -> Vec<String> {
    let mut problems = Vec::new();
    let mut answered: HashMap<&str, &LedgerEntry> = HashMap::new();
    for call in &report.calls {
        let Some(key) = call.idempotency_key.as_deref() else {
            if call.new_effect {
                problems.push(format!("call {} applied an effect without a key", call.seq));
            }
            continue;
        };
        let answers = !call.is_error && call.outcome != "replayed";
        match (answered.get(key), call.outcome.as_str()) {
            (Some(first), _) if answers => problems.push(format!(
                "key {key:?} was answered anew at call {} after call {}",
                call.seq, first.seq
            )),
            (Some(first), "replayed")
                if first.tool != call.tool
                    || first.arguments != call.arguments
                    || first.result != call.result =>
            {
                problems.push(format!(
                    "call {} replayed {key:?} with another call or answer than call {}",
                    call.seq, first.seq
                ));
            }
            (None, "replayed") => problems.push(format!(
                "call {} replayed {key:?}, which was never answered",
                call.seq
            )),
            (None, _) if answers => {
                answered.insert(key, call);
            }
            _ => {}
        }
    }
    let applied = |key: &str, tool: &str| {
        answered
            .get(key)
            .filter(|c| c.tool == tool && c.new_effect)
            .copied()
    };
    let state = &report.state;
    for (id, r) in &state.reservations {
        match applied(&r.reserved_by, RESERVE_INVENTORY) {
            Some(c) if text(c.result.as_ref(), "/reservationId") == Some(id) => {}
            _ => problems.push(format!(
                "reservation {id} was not made by {:?}",
                r.reserved_by
            )),
        }
        match (r.status, &r.released_by) {
            (Hold::Held, None) => {}
            (Hold::Released, Some(by)) => match applied(by, RELEASE_INVENTORY) {
                Some(c) if text(Some(&c.arguments), "/reservationId") == Some(id) => {}
                _ => problems.push(format!("reservation {id} was not released by {by:?}")),
            },
            _ => problems.push(format!(
                "reservation {id} is {:?} but released by {:?}",
                r.status, r.released_by
            )),
        }
    }
    for (id, p) in &state.payments {
        match applied(&p.charged_by, CHARGE_PAYMENT) {
            Some(c) if text(c.result.as_ref(), "/paymentId") == Some(id) => {}
            _ => problems.push(format!("payment {id} was not made by {:?}", p.charged_by)),
        }
        match (p.status, &p.refund_id) {
            (PaymentStatus::Captured, None) => {}
            (PaymentStatus::Refunded, Some(refund)) => match state.refunds.get(refund) {
                Some(r) if r.payment_id == *id => {}
                _ => problems.push(format!(
                    "payment {id} names refund {refund}, which is not its"
                )),
            },
            _ => problems.push(format!(
                "payment {id} is {:?} with refund {:?}",
                p.status, p.refund_id
            )),
        }
    }
    let mut refunded = HashMap::new();
    for (id, r) in &state.refunds {
        match state.payments.get(&r.payment_id) {
            Some(p) if p.refund_id.as_deref() == Some(id) => {
                if (p.amount_minor, &p.currency) != (r.amount_minor, &r.currency) {
                    problems.push(format!(
                        "refund {id} does not match payment {}",
                        r.payment_id
                    ));
                }
            }
            _ => problems.push(format!(
                "refund {id} refers to {}, which is not a payment it refunded",
                r.payment_id
            )),
        }
        if let Some(other) = refunded.insert(r.payment_id.as_str(), id) {
            problems.push(format!(
                "payment {} was refunded by {other} and {id}",
                r.payment_id
            ));
        }
        match applied(&r.refunded_by, REFUND_PAYMENT) {
            Some(c) if text(c.result.as_ref(), "/refundId") == Some(id) => {}
            _ => problems.push(format!("refund {id} was not made by {:?}", r.refunded_by)),
        }
    }
    for (id, s) in &state.shipments {
        if !state.reservations.contains_key(&s.reservation_id) {
            problems.push(format!(
                "shipment {id} ships unknown reservation {}",
                s.reservation_id
            ));
        }
        match applied(&s.created_by, CREATE_SHIPMENT) {
            Some(c) if text(c.result.as_ref(), "/shipmentId") == Some(id) => {}
            _ => problems.push(format!("shipment {id} was not made by {:?}", s.created_by)),
        }
    }
    let made = |tool: &str| {
        report
            .calls
            .iter()
            .filter(|c| c.tool == tool && c.new_effect)
            .count()
    };
    let counts = [
        (RESERVE_INVENTORY, state.reservations.len()),
        (CHARGE_PAYMENT, state.payments.len()),
        (REFUND_PAYMENT, state.refunds.len()),
        (CREATE_SHIPMENT, state.shipments.len()),
        (
            RELEASE_INVENTORY,
            state
                .reservations
                .values()
                .filter(|r| r.status == Hold::Released)
                .count(),
        ),
    ];
    for (tool, rows) in counts {
        if made(tool) != rows {
            problems.push(format!(
                "{} applied {tool} calls left {rows} records",
                made(tool)
            ));
        }
    }
    problems
}
