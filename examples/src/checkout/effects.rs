//! What each checkout tool does to the state, inside the ledger's transaction for the
//! call: make a reservation, a payment, a shipment or a refund, or release a reservation;
//! or say why it changed nothing (a compensation with nothing left to undo) or failed.

use rusqlite::{OptionalExtension, Transaction, params};
use serde_json::{Value, json};

use super::Result;
use super::ledger::store_error;
use super::tools::{ReceiptMode, SHIPMENT_REFUSAL, ShipmentMode};

/// What one tool decided, inside the call's transaction.
pub(crate) enum Decision {
    /// A new effect.
    Applied(Value),
    /// A success that changed nothing (`nothing-to-undo`, `already-undone`).
    Unchanged(Value, &'static str),
    /// A definite failure; nothing applied and nothing stored under the key.
    Failed(String),
}

fn arg<'a>(arguments: &'a Value, name: &str) -> &'a str {
    arguments.get(name).and_then(Value::as_str).unwrap_or("")
}

fn int(arguments: &Value, name: &str) -> i64 {
    arguments.get(name).and_then(Value::as_i64).unwrap_or(0)
}

/// The next id of a table: `<prefix>_0001`, `<prefix>_0002`, … (zero-padded so that
/// ids sort in the order they were made).
fn next_id(tx: &Transaction<'_>, table: &str, prefix: &str) -> Result<String> {
    let made: i64 = tx
        .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
        .map_err(store_error)?;
    Ok(format!("{prefix}_{:04}", made + 1))
}

pub(crate) fn reserve(tx: &Transaction<'_>, key: &str, arguments: &Value) -> Result<Decision> {
    let id = next_id(tx, "reservations", "res")?;
    let (sku, quantity) = (arg(arguments, "sku"), int(arguments, "quantity"));
    tx.execute(
        "INSERT INTO reservations (id, sku, quantity, status, reserved_by)
         VALUES (?1, ?2, ?3, 'held', ?4)",
        params![id, sku, quantity, key],
    )
    .map_err(store_error)?;
    Ok(Decision::Applied(
        json!({"reservationId": id, "sku": sku, "quantity": quantity}),
    ))
}

pub(crate) fn charge(
    tx: &Transaction<'_>,
    key: &str,
    arguments: &Value,
    receipt: ReceiptMode,
) -> Result<Decision> {
    let id = next_id(tx, "payments", "pay")?;
    let (order, amount) = (arg(arguments, "orderId"), int(arguments, "amountMinor"));
    let currency = arg(arguments, "currency");
    tx.execute(
        "INSERT INTO payments (id, order_id, amount_minor, currency, status, charged_by)
         VALUES (?1, ?2, ?3, ?4, 'captured', ?5)",
        params![id, order, amount, currency, key],
    )
    .map_err(store_error)?;
    let answer = match receipt {
        ReceiptMode::Full => json!({"paymentId": id, "amountMinor": amount, "currency": currency}),
        ReceiptMode::WithoutPaymentId => json!({"amountMinor": amount, "currency": currency}),
    };
    Ok(Decision::Applied(answer))
}

pub(crate) fn ship(
    tx: &Transaction<'_>,
    key: &str,
    arguments: &Value,
    mode: ShipmentMode,
) -> Result<Decision> {
    if mode == ShipmentMode::Refuse {
        return Ok(Decision::Failed(SHIPMENT_REFUSAL.to_owned()));
    }
    let reservation = arg(arguments, "reservationId");
    let status: Option<String> = tx
        .query_row(
            "SELECT status FROM reservations WHERE id = ?1",
            [reservation],
            |r| r.get(0),
        )
        .optional()
        .map_err(store_error)?;
    if status.as_deref() != Some("held") {
        return Ok(Decision::Failed(format!(
            "reservation {reservation:?} is not held (unknown or released); nothing was shipped"
        )));
    }
    let id = next_id(tx, "shipments", "shp")?;
    tx.execute(
        "INSERT INTO shipments (id, order_id, reservation_id, address, created_by)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            id,
            arg(arguments, "orderId"),
            reservation,
            arg(arguments, "address"),
            key
        ],
    )
    .map_err(store_error)?;
    Ok(Decision::Applied(json!({"shipmentId": id})))
}

pub(crate) fn refund(tx: &Transaction<'_>, key: &str, arguments: &Value) -> Result<Decision> {
    let payment = arg(arguments, "paymentId");
    let (amount, currency) = (int(arguments, "amountMinor"), arg(arguments, "currency"));
    let found: Option<(i64, String, Option<String>)> = tx
        .query_row(
            "SELECT amount_minor, currency, refund_id FROM payments WHERE id = ?1",
            [payment],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()
        .map_err(store_error)?;
    // A compensation of a charge that never happened has nothing to undo: that is a
    // success, so the saga can finish unwinding.
    let Some((captured, captured_currency, refunded)) = found else {
        return Ok(Decision::Unchanged(
            json!({"refundId": null, "paymentId": payment,
                   "note": "no such payment; nothing to refund"}),
            "nothing-to-undo",
        ));
    };
    if let Some(refund) = refunded {
        return Ok(Decision::Unchanged(
            json!({"refundId": refund, "paymentId": payment, "note": "already refunded"}),
            "already-undone",
        ));
    }
    if (captured, captured_currency.as_str()) != (amount, currency) {
        return Ok(Decision::Failed(format!(
            "payment {payment} captured {captured} {captured_currency}; a refund of {amount} \
             {currency} does not match it, so nothing was refunded"
        )));
    }
    let id = next_id(tx, "refunds", "ref")?;
    tx.execute(
        "INSERT INTO refunds (id, payment_id, amount_minor, currency, refunded_by)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, payment, amount, currency, key],
    )
    .map_err(store_error)?;
    tx.execute(
        "UPDATE payments SET status = 'refunded', refund_id = ?1 WHERE id = ?2",
        params![id, payment],
    )
    .map_err(store_error)?;
    Ok(Decision::Applied(
        json!({"refundId": id, "paymentId": payment}),
    ))
}

pub(crate) fn release(tx: &Transaction<'_>, key: &str, arguments: &Value) -> Result<Decision> {
    let reservation = arg(arguments, "reservationId");
    let found: Option<(String, String)> = tx
        .query_row(
            "SELECT sku, status FROM reservations WHERE id = ?1",
            [reservation],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(store_error)?;
    let Some((sku, status)) = found else {
        return Ok(Decision::Unchanged(
            json!({"reservationId": reservation, "released": false,
                   "note": "no such reservation; nothing to release"}),
            "nothing-to-undo",
        ));
    };
    if let Some(given) = arguments.get("sku").and_then(Value::as_str)
        && given != sku
    {
        return Ok(Decision::Failed(format!(
            "reservation {reservation} holds {sku}, not {given}; nothing was released"
        )));
    }
    if status == "released" {
        return Ok(Decision::Unchanged(
            json!({"reservationId": reservation, "released": true,
                   "note": "already released"}),
            "already-undone",
        ));
    }
    tx.execute(
        "UPDATE reservations SET status = 'released', released_by = ?1 WHERE id = ?2",
        params![key, reservation],
    )
    .map_err(store_error)?;
    Ok(Decision::Applied(
        json!({"reservationId": reservation, "released": true}),
    ))
}
