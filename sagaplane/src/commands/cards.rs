//! `sagaplane cards sign|verify|register`.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::json;
use shared_types::SigningIdentity;
use shared_types::catalog::agent_from_card;

use super::plan::verify_signed;
use crate::executor_api;
use crate::failure::Failure;
use crate::input::{read_json, read_jwk, read_trust};
use crate::output::{emit, pretty};

#[derive(Debug, Subcommand)]
pub enum CardsCommand {
    /// Sign an agent card (replacing any signatures) after checking its declarations.
    Sign {
        card: PathBuf,
        #[arg(long, value_name = "KEY.jwk")]
        key: PathBuf,
        /// Write here instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Verify an agent card's signature against trusted platform keys, and its declarations.
    Verify {
        card: PathBuf,
        #[arg(long = "trust", value_name = "PUB.jwk", required = true)]
        trust: Vec<PathBuf>,
    },
    /// Register a signed agent card with an executor (admin token from
    /// SAGAPLANE_ADMIN_TOKEN or --admin-token-file).
    Register {
        /// The signed card file (or use --url).
        #[arg(required_unless_present = "url", conflicts_with = "url")]
        card: Option<PathBuf>,
        /// The agent's base URL: the executor fetches its /.well-known/agent-card.json.
        #[arg(long)]
        url: Option<String>,
        /// The executor's base URL.
        #[arg(long)]
        executor: String,
        /// File holding the admin token.
        #[arg(long, value_name = "FILE")]
        admin_token_file: Option<PathBuf>,
    },
}

pub fn run(command: CardsCommand) -> Result<(), Failure> {
    match command {
        CardsCommand::Sign { card, key, out } => sign(&card, &key, out.as_deref()),
        CardsCommand::Verify { card, trust } => {
            let kid = verify_signed(&card, &read_trust(&trust)?)?;
            let (name, agent) = agent_from_card(&read_json(&card)?)
                .map_err(|e| Failure::rejected(format!("{}: {e}", card.display())))?;
            println!(
                "verified: agent card {name} ({} skills) is signed by trusted key {kid}",
                agent.skills.len()
            );
            Ok(())
        }
        CardsCommand::Register {
            card,
            url,
            executor,
            admin_token_file,
        } => {
            let token = executor_api::admin_token(admin_token_file.as_deref())?;
            let body = match (card, url) {
                (Some(card), _) => read_json(&card)?,
                (None, Some(url)) => json!({ "url": url }),
                (None, None) => return Err(Failure::unusable("give a card file or --url")),
            };
            let registered = executor_api::register(&executor, &token, &body)?;
            println!(
                "registered: agent {} (signed by {}) at {}",
                registered["name"].as_str().unwrap_or("?"),
                registered["signedBy"].as_str().unwrap_or("?"),
                registered["url"].as_str().unwrap_or("no URL")
            );
            Ok(())
        }
    }
}

fn sign(path: &Path, key: &Path, out: Option<&Path>) -> Result<(), Failure> {
    let identity = SigningIdentity::from_jwk(&read_jwk(key)?)
        .map_err(|e| Failure::unusable(format!("{}: {e}", key.display())))?;
    let mut card = read_json(path)?;
    // Refuse to attest a card whose declarations contradict themselves.
    agent_from_card(&card).map_err(|e| Failure::unusable(format!("{}: {e}", path.display())))?;
    identity
        .sign_in_place(&mut card)
        .map_err(|e| Failure::unusable(format!("{}: {e}", path.display())))?;
    emit(&pretty(&card), out)
}
