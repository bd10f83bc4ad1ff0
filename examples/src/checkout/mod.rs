//! The MCP checkout scenario of docs/getting-started.md, the reference scenario of SEP-3172: an MCP
//! server (rmcp, streamable HTTP at `/mcp`) with `reserve_inventory`, `charge_payment`,
//! `create_shipment`, `refund_payment` and `release_inventory`, recovery metadata
//! exposed as chosen (`annotations.recovery`, `_meta["dev.sagaplane/recovery"]`, both or
//! neither), idempotency keys honoured on every side effect, and a durable ledger.
//!
//! Start it in-process with [`start`] on a listener you bound; flip its switches with
//! [`RunningCheckout::switches`] or `PUT /faults`; read its ledger with
//! [`RunningCheckout::ledger`] or [`fetch_ledger`]; print it with [`render_summary`]
//! and [`side_by_side`]; check it with [`check_ledger`].

mod effects;
mod ledger;
mod report;
mod server;
mod service;
mod sse;
mod tools;

pub use report::{
    CheckoutState, Hold, LedgerEntry, LedgerReport, Payment, PaymentStatus, Refund, Reservation,
    Shipment, check_ledger, render_summary, side_by_side,
};
pub use service::{
    CheckoutSettings, RunningCheckout, fetch_ledger, fetch_switches, put_switches, start,
};
pub use tools::{
    CHARGE_PAYMENT, CREATE_SHIPMENT, ChargeMode, CheckoutSwitches, PAYMENT_STATUS,
    RECOVERY_META_KEY, REFUND_PAYMENT, RELEASE_INVENTORY, RESERVE_INVENTORY, ReceiptMode,
    RecoveryMode, RecoveryVariant, SAGA_META_KEY, SHIPMENT_REFUSAL, ShipmentMode, StatusMode,
    Switches, TOOLS, recovery_declaration,
};

/// The server's name in `serverInfo` and in its ledger.
pub const SERVER_NAME: &str = "checkout-mcp";

/// What can go wrong starting, running or talking to the checkout server.
#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    /// A switch value, a token or a setting that does not fit.
    #[error("{0}")]
    Config(String),
    /// The ledger's SQLite database failed.
    #[error("ledger: {0}")]
    Ledger(String),
    /// Binding, serving or an HTTP exchange failed.
    #[error("{0}")]
    Io(String),
    /// The hosting layer failed (serving).
    #[error(transparent)]
    Host(#[from] agent_host::Error),
}

/// Results of this module.
pub type Result<T, E = CheckoutError> = std::result::Result<T, E>;
