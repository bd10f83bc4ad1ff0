//! `sagaplane cards sign|verify`.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use shared_types::SigningIdentity;
use shared_types::catalog::agent_from_card;

use super::plan::verify_signed;
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
