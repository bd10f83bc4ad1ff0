//! Demo scenarios' shared fixtures: where the committed agent cards and example plans live.

use std::path::PathBuf;

pub mod admin;
pub mod checkout;
pub mod sqlite;
pub mod supplier;

/// The workspace root, found from this crate's manifest directory.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// The folder of curated (unsigned) agent cards of the demo tool agents.
pub fn agent_cards_dir() -> PathBuf {
    workspace_root().join("agent-cards")
}

/// The folder of example plans.
pub fn plans_dir() -> PathBuf {
    workspace_root().join("examples").join("plans")
}
