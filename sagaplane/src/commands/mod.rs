//! The command tree and its dispatch.

mod cards;
mod keys;
mod plan;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::failure::Failure;

/// Sagaplane: signed plans, curated agent cards, and sagas that unwind safely.
#[derive(Debug, Parser)]
#[command(name = "sagaplane", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate an Ed25519 key pair: NAME.jwk (private, mode 0600) and NAME.pub.jwk.
    Keygen {
        /// Path prefix of the two files to write.
        #[arg(long, value_name = "NAME")]
        out: PathBuf,
        /// Key id (default: the RFC 7638 thumbprint of the public key).
        #[arg(long)]
        kid: Option<String>,
        /// Replace existing files.
        #[arg(long)]
        force: bool,
    },
    /// Validate, sign and verify plans.
    #[command(subcommand)]
    Plan(plan::PlanCommand),
    /// Sign and verify curated agent cards.
    #[command(subcommand)]
    Cards(cards::CardsCommand),
}

/// Runs one command.
pub fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Keygen { out, kid, force } => keys::keygen(&out, kid, force),
        Command::Plan(command) => plan::run(command),
        Command::Cards(command) => cards::run(command),
    }
}
