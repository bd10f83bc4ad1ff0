//! The registry of curated agents. A card is accepted only when a trusted platform key
//! signed it and its reversibility declarations are consistent; accepted cards are kept
//! in SQLite (checked again when loaded) and form the catalog plans are validated against.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use agent_host::store::durable::{GroupCommit, open_connection};
use rusqlite::{Transaction, params};
use serde_json::Value;
use shared_types::catalog::agent_from_card;
use shared_types::{Catalog, TrustStore};

use crate::error::{Error, Result};

/// One curated agent.
#[derive(Debug, Clone, PartialEq)]
pub struct RegisteredAgent {
    pub name: String,
    /// The platform key that signed the card.
    pub signed_by: String,
    /// The agent's JSON-RPC interface URL, from the card.
    pub url: Option<String>,
    pub card: Value,
}

#[derive(Debug)]
struct CardRow {
    name: String,
    card: String,
}

fn upsert(tx: &Transaction<'_>, row: &CardRow) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO cards (name, card) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET card = excluded.card",
    )?
    .execute(params![row.name, row.card])
    .map(|_| ())
}

/// The registry: verified cards in memory, persisted through group commit.
#[derive(Debug, Clone)]
pub struct Registry {
    platform_keys: Arc<TrustStore>,
    agents: Arc<RwLock<BTreeMap<String, RegisteredAgent>>>,
    writer: GroupCommit<CardRow>,
}

impl Registry {
    /// Opens the registry at `path` and loads the cards kept there. A stored card that no
    /// longer verifies (a platform key was withdrawn) is left out, with a warning.
    pub fn open(path: &Path, platform_keys: TrustStore) -> Result<Self> {
        let conn = open_connection(path, "registry")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS cards (name TEXT PRIMARY KEY, card TEXT NOT NULL);",
        )
        .map_err(|e| Error::Journal(format!("cannot prepare the registry: {e}")))?;
        let reader = open_connection(path, "registry")?;
        let stored: Vec<String> = {
            let mut statement = reader
                .prepare("SELECT card FROM cards ORDER BY name")
                .map_err(|e| Error::Journal(e.to_string()))?;
            statement
                .query_map([], |row| row.get(0))
                .and_then(|rows| rows.collect())
                .map_err(|e| Error::Journal(e.to_string()))?
        };
        let registry = Self {
            platform_keys: Arc::new(platform_keys),
            agents: Arc::new(RwLock::new(BTreeMap::new())),
            writer: GroupCommit::spawn("registry", conn, upsert)?,
        };
        for text in stored {
            let accepted = serde_json::from_str(&text)
                .map_err(|e| e.to_string())
                .and_then(|card| registry.check(card).map_err(|e| e.to_string()));
            match accepted {
                Ok(agent) => registry.insert(agent)?,
                Err(why) => {
                    tracing::warn!(reason = %why, "a stored card was left out of the registry")
                }
            }
        }
        Ok(registry)
    }

    /// Verifies a card: trusted signature, then consistent declarations.
    pub fn check(&self, card: Value) -> Result<RegisteredAgent> {
        let signed_by = self
            .platform_keys
            .verify(&card)
            .map_err(|e| Error::Refused(format!("the card is not curated: {e}")))?;
        let (name, _) = agent_from_card(&card).map_err(|e| Error::Refused(e.to_string()))?;
        let url = card
            .get("supportedInterfaces")
            .and_then(Value::as_array)
            .and_then(|interfaces| {
                interfaces
                    .iter()
                    .find(|i| i.get("protocolBinding").and_then(Value::as_str) == Some("JSONRPC"))
            })
            .and_then(|i| i.get("url").and_then(Value::as_str))
            .map(str::to_owned);
        Ok(RegisteredAgent {
            name,
            signed_by,
            url,
            card,
        })
    }

    fn insert(&self, agent: RegisteredAgent) -> Result<()> {
        let mut agents = self
            .agents
            .write()
            .map_err(|_| Error::Journal("registry lock poisoned".into()))?;
        agents.insert(agent.name.clone(), agent);
        Ok(())
    }

    /// Registers (or replaces) a card once it checks out; durable when it returns.
    pub async fn register(&self, card: Value) -> Result<RegisteredAgent> {
        let agent = self.check(card)?;
        let row = CardRow {
            name: agent.name.clone(),
            card: serde_json::to_string(&agent.card).map_err(|e| Error::Journal(e.to_string()))?,
        };
        self.writer.submit(row).await?;
        self.insert(agent.clone())?;
        Ok(agent)
    }

    /// The catalog of every registered agent's declarations (no endpoints, no secrets).
    pub fn catalog(&self) -> Result<Catalog> {
        let agents = self
            .agents
            .read()
            .map_err(|_| Error::Journal("registry lock poisoned".into()))?;
        let mut catalog = Catalog::default();
        for agent in agents.values() {
            catalog
                .add_card(&agent.card)
                .map_err(|e| Error::Refused(e.to_string()))?;
        }
        Ok(catalog)
    }

    pub fn agent(&self, name: &str) -> Option<RegisteredAgent> {
        self.agents.read().ok()?.get(name).cloned()
    }
}
