//! `checkout-mcp`: runs the MCP checkout server of the SEP-3172 reference scenario
//! (docs/getting-started.md) on streamable HTTP at `/mcp`, with its ledger, its recovery-metadata
//! mode and its fault switches.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;
use sagaplane_examples::checkout::{
    ChargeMode, CheckoutSettings, ReceiptMode, RecoveryMode, RecoveryVariant, ShipmentMode,
    StatusMode, Switches, start,
};
use tokio_util::sync::CancellationToken;

/// Environment variable holding the bearer token callers must present.
const TOKEN_ENV: &str = "CHECKOUT_MCP_TOKEN";

#[derive(Debug, Parser)]
#[command(
    version,
    about = "The MCP checkout server of the SEP-3172 reference scenario: reserve_inventory, \
             charge_payment, create_shipment (fails by default), refund_payment, release_inventory, \
             payment_status (read-only: whether a charge under a key took effect)",
    after_help = "Routes: POST|GET|DELETE /mcp (MCP streamable HTTP), GET /ledger, GET /faults, \
PUT /faults {\"recovery\": \"both|annotations|meta|hidden\", \"recoveryVariant\": \"curated|altered\", \
\"shipment\": \"refuse|accept\", \"receipt\": \"full|without-payment-id\", \"charge\": \
\"answered|lost-after|lost-before\", \"status\": \"up|down\"} (replaces all; omitted fields take their defaults).\n\
With a token, every route needs Authorization: Bearer <token>.\n\n\
Environment:\n  CHECKOUT_MCP_TOKEN   the bearer token (or --token-file); none: the server is open\n  \
RUST_LOG             log filter (default: info)"
)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Directory of the durable ledger (`checkout.ledger.db`); without it the ledger
    /// lives in memory.
    #[arg(long)]
    data: Option<PathBuf>,
    /// File holding the bearer token (instead of CHECKOUT_MCP_TOKEN).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Where tools/list shows recovery metadata: both, annotations, meta, hidden.
    #[arg(long, default_value_t = RecoveryMode::Both)]
    recovery: RecoveryMode,
    /// Which recovery declarations are made: curated, or altered after curation.
    #[arg(long, default_value_t = RecoveryVariant::Curated)]
    recovery_variant: RecoveryVariant,
    /// What the carrier does with create_shipment: refuse (the scenario) or accept.
    #[arg(long, default_value_t = ShipmentMode::Refuse)]
    shipment: ShipmentMode,
    /// What charge_payment answers: full, or without-payment-id (its compensation's
    /// binding then cannot be resolved).
    #[arg(long, default_value_t = ReceiptMode::Full)]
    receipt: ReceiptMode,
    /// Whether charge_payment's answer reaches the caller: answered, lost-after (captured,
    /// never answered) or lost-before (never captured, never answered).
    #[arg(long, default_value_t = ChargeMode::Answered)]
    charge: ChargeMode,
    /// Whether payment_status answers: up, or down (a tool error every time).
    #[arg(long, default_value_t = StatusMode::Up)]
    status: StatusMode,
    #[command(flatten)]
    serving: agent_host::cli::ServingArgs,
}

fn token(file: Option<&Path>) -> anyhow::Result<Option<String>> {
    let token = match file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?,
        None => std::env::var(TOKEN_ENV).unwrap_or_default(),
    };
    let token = token.trim();
    if token.is_empty() {
        anyhow::ensure!(file.is_none(), "the token file is empty");
        return Ok(None);
    }
    Ok(Some(token.to_owned()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    agent_host::process::init_logging();
    let args = Args::parse();

    let token = token(args.token_file.as_deref())?;
    if token.is_none() {
        tracing::warn!("no bearer token ({TOKEN_ENV} or --token-file): the server is open");
    }
    let settings = CheckoutSettings {
        data_dir: args.data,
        token,
        switches: Switches {
            recovery: args.recovery,
            recovery_variant: args.recovery_variant,
            shipment: args.shipment,
            receipt: args.receipt,
            charge: args.charge,
            status: args.status,
        },
        serving: args.serving.serving(),
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let shutdown = CancellationToken::new();
    let running = start(settings, listener, shutdown.clone()).await?;
    println!("checkout-mcp listening on {}", running.mcp_url);
    tokio::spawn(agent_host::process::shutdown_on_signal(shutdown));
    running.stopped().await?;
    Ok(())
}
