//! The registry of curated agents: A2A agents from their cards, MCP servers from a curated
//! manifest and the server's tool list. Either is accepted only when a trusted platform
//! key signed it and its reversibility declarations are consistent; accepted entries are
//! kept in SQLite, or in the PostgreSQL database replicas share (`registry/postgres.rs`),
//! checked again when loaded, and form the catalog plans are validated against. On
//! PostgreSQL a replica reads the tables again (`refresh`) once another one registered
//! something, before its next plan.

mod postgres;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use rusqlite::{Transaction, params};
use sagaplane_storage::schema::{self, Migration};
use sagaplane_storage::sqlite::{Database, open_connection};
use serde_json::Value;
use shared_types::catalog::agent_from_card;
use shared_types::mcp::McpManifest;
use shared_types::{Catalog, CatalogAgent, TrustStore};

use crate::error::{Error, Result};
use crate::registry_history::{self, Registration};
use crate::sync;

/// One curated agent.
#[derive(Debug, Clone, PartialEq)]
pub struct RegisteredAgent {
    pub name: String,
    /// The platform key that signed the card or manifest.
    pub signed_by: String,
    /// The agent's JSON-RPC interface URL (A2A) or MCP endpoint.
    pub url: Option<String>,
    pub kind: AgentKind,
    /// The agent's curated skills.
    pub declarations: CatalogAgent,
}

/// How the executor reaches an agent, and what it was curated from.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentKind {
    /// An A2A agent, curated by its signed card.
    A2a { card: Value },
    /// An MCP server, curated by a signed manifest over the tools it listed.
    Mcp {
        manifest: McpManifest,
        /// The raw `tools/list` entries the manifest was checked against.
        tools: Vec<Value>,
    },
}

/// The rows a registry is loaded from: cards, and MCP servers (url, manifest, tools).
#[derive(Debug, Default)]
struct Stored {
    cards: Vec<String>,
    servers: Vec<(String, String, String)>,
}

/// Where the registry is kept.
#[derive(Debug, Clone)]
enum Place {
    Sqlite(Database),
    /// Shared with other replicas; `seen` is the newest registration read.
    Postgres {
        db: sagaplane_storage::postgres::Postgres,
        seen: Arc<AtomicI64>,
    },
}

#[derive(Debug)]
enum Row {
    Card { name: String, card: String },
    Mcp(McpRow),
}

#[derive(Debug)]
struct McpRow {
    name: String,
    url: String,
    manifest: String,
    tools: String,
}

fn upsert(tx: &Transaction<'_>, row: &Row) -> rusqlite::Result<()> {
    match row {
        Row::Card { name, card } => {
            tx.prepare_cached("DELETE FROM mcp_servers WHERE name = ?1")?
                .execute(params![name])?;
            tx.prepare_cached(
                "INSERT INTO cards (name, card) VALUES (?1, ?2)
                 ON CONFLICT (name) DO UPDATE SET card = excluded.card",
            )?
            .execute(params![name, card])
            .map(|_| ())
        }
        Row::Mcp(row) => {
            tx.prepare_cached("DELETE FROM cards WHERE name = ?1")?
                .execute(params![row.name])?;
            tx.prepare_cached(
                "INSERT INTO mcp_servers (name, url, manifest, tools) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name) DO UPDATE SET url = excluded.url,
                   manifest = excluded.manifest, tools = excluded.tools",
            )?
            .execute(params![row.name, row.url, row.manifest, row.tools])
            .map(|_| ())
        }
    }
}

/// What a server answered when the executor looked at it before registering it.
#[derive(Debug, Clone)]
pub struct McpListing {
    pub url: String,
    /// `serverInfo.name`, when the server gave one.
    pub server_name: Option<String>,
    /// The raw `tools/list` entries.
    pub tools: Vec<Value>,
}

/// An MCP manifest whose signature and endpoint checked out; the only thing the executor
/// opens an MCP session from.
#[derive(Debug, Clone)]
pub struct CuratedManifest {
    pub manifest: McpManifest,
    /// The endpoint the manifest names (`server.url`).
    pub url: String,
    /// The platform key that signed it.
    pub signed_by: String,
}

impl CuratedManifest {
    /// The agent id the manifest curates the server as.
    pub fn agent(&self) -> &str {
        &self.manifest.agent
    }
}

/// The registry: verified cards in memory, persisted through group commit.
#[derive(Debug, Clone)]
pub struct Registry {
    platform_keys: Arc<TrustStore>,
    agents: Arc<RwLock<BTreeMap<String, Arc<RegisteredAgent>>>>,
    /// Bumped by every registration, so what is built from the registry can tell it is
    /// stale.
    generation: Arc<AtomicU64>,
    place: Place,
}

/// The registry's schema, in order; the count is its version (`sagaplane_storage::schema`).
const MIGRATIONS: &[Migration] = &[
    Migration {
        what: "agent cards and MCP servers",
        apply: |tx| {
            tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS cards (name TEXT PRIMARY KEY, card TEXT NOT NULL);
                 CREATE TABLE IF NOT EXISTS mcp_servers (name TEXT PRIMARY KEY, url TEXT NOT NULL,
                   manifest TEXT NOT NULL, tools TEXT NOT NULL);",
            )
        },
    },
    Migration {
        what: "the history of registrations",
        apply: |tx| tx.execute_batch(registry_history::SCHEMA),
    },
];

impl Registry {
    /// Opens a registry of its own at `path`; see `on`.
    pub fn open(path: &Path, platform_keys: TrustStore) -> Result<Self> {
        Self::on(&Database::open(path, "registry")?, platform_keys)
    }

    /// The registry in `db`, with the cards kept there loaded. A stored card that no
    /// longer verifies (a platform key was withdrawn) is left out, with a warning.
    pub fn on(db: &Database, platform_keys: TrustStore) -> Result<Self> {
        schema::migrate(db, "registry", MIGRATIONS)?;
        let reader = open_connection(db.path(), "registry")?;
        let unreadable = |source| Error::Database {
            what: "cannot read the registry",
            source,
        };
        let cards: Vec<String> = reader
            .prepare("SELECT card FROM cards ORDER BY name")
            .and_then(|mut s| s.query_map([], |row| row.get(0))?.collect())
            .map_err(unreadable)?;
        let servers: Vec<(String, String, String)> = reader
            .prepare("SELECT url, manifest, tools FROM mcp_servers ORDER BY name")
            .and_then(|mut s| {
                s.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
                    .collect()
            })
            .map_err(unreadable)?;
        let registry = Self::empty(platform_keys, Place::Sqlite(db.clone()));
        let agents = registry.verified(Stored { cards, servers });
        registry.replace(agents);
        Ok(registry)
    }

    /// The registry in a PostgreSQL database that replicas share, its schema brought to
    /// this binary's version and its entries loaded as `on` loads them.
    pub async fn on_postgres(
        db: &sagaplane_storage::postgres::Postgres,
        platform_keys: TrustStore,
    ) -> Result<Self> {
        db.migrate("registry", postgres::MIGRATIONS).await?;
        let registry = Self::empty(
            platform_keys,
            Place::Postgres {
                db: db.clone(),
                seen: Arc::new(AtomicI64::new(-1)),
            },
        );
        registry.refresh().await?;
        Ok(registry)
    }

    fn empty(platform_keys: TrustStore, place: Place) -> Self {
        Self {
            platform_keys: Arc::new(platform_keys),
            agents: Arc::new(RwLock::new(BTreeMap::new())),
            generation: Arc::new(AtomicU64::new(0)),
            place,
        }
    }

    /// On a shared database, reads the entries again if another replica registered
    /// something since they were last read; the agents whose entry changed (added,
    /// replaced or removed). Elsewhere nothing changes but through this registry.
    pub async fn refresh(&self) -> Result<Vec<String>> {
        let Place::Postgres { db, seen } = &self.place else {
            return Ok(Vec::new());
        };
        // Read before the rows: rows newer than it only cause one more read later.
        let latest = postgres::latest(db).await?;
        if latest <= seen.load(Ordering::SeqCst) {
            return Ok(Vec::new());
        }
        let fresh = self.verified(postgres::stored(db).await?);
        let changed: Vec<String> = {
            let before = sync::read(&self.agents);
            let names: std::collections::BTreeSet<&String> =
                before.keys().chain(fresh.keys()).collect();
            names
                .into_iter()
                .filter(|name| before.get(*name) != fresh.get(*name))
                .cloned()
                .collect()
        };
        if !changed.is_empty() {
            self.replace(fresh);
        }
        seen.fetch_max(latest, Ordering::SeqCst);
        Ok(changed)
    }

    /// The stored entries that still verify; the others are left out, with a warning.
    fn verified(&self, stored: Stored) -> BTreeMap<String, Arc<RegisteredAgent>> {
        let mut accepted = Vec::new();
        for text in stored.cards {
            accepted.push(
                serde_json::from_str(&text)
                    .map_err(|e| e.to_string())
                    .and_then(|card| self.check(card).map_err(|e| e.to_string())),
            );
        }
        for (url, manifest, tools) in stored.servers {
            accepted.push(
                serde_json::from_str(&manifest)
                    .and_then(|m: Value| Ok((m, serde_json::from_str(&tools)?)))
                    .map_err(|e| e.to_string())
                    .and_then(|(manifest, tools)| {
                        let listing = McpListing {
                            url,
                            server_name: None,
                            tools,
                        };
                        self.verify_manifest(&manifest)
                            .and_then(|curated| self.check_mcp(curated, listing))
                            .map_err(|e| e.to_string())
                    }),
            );
        }
        let mut agents = BTreeMap::new();
        for agent in accepted {
            match agent {
                Ok(agent) => {
                    agents.insert(agent.name.clone(), Arc::new(agent));
                }
                Err(why) => {
                    tracing::warn!(reason = %why, "a stored entry was left out of the registry")
                }
            }
        }
        agents
    }

    fn replace(&self, agents: BTreeMap<String, Arc<RegisteredAgent>>) {
        *sync::write(&self.agents) = agents;
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Verifies a card: trusted signature, then consistent declarations.
    pub fn check(&self, mut card: Value) -> Result<RegisteredAgent> {
        // A card served through an SDK's protobuf types carries `5000` as `5000.0`; its
        // signature covers both alike (RFC 8785), and the declarations read integers.
        shared_types::json::normalize_integers(&mut card);
        let signed_by = self
            .platform_keys
            .verify(&card)
            .map_err(|e| Error::Refused(format!("the card is not curated: {e}")))?;
        let (name, declarations) =
            agent_from_card(&card).map_err(|e| Error::Refused(e.to_string()))?;
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
            kind: AgentKind::A2a { card },
            declarations,
        })
    }

    /// Verifies an MCP manifest on its own, before anything is sent to its server: a
    /// trusted signature, a well-formed manifest, and the endpoint it names. Only a
    /// manifest that passes may decide where the executor sends a tool's credential.
    pub fn verify_manifest(&self, manifest: &Value) -> Result<CuratedManifest> {
        let signed_by = self
            .platform_keys
            .verify(manifest)
            .map_err(|e| Error::Refused(format!("the MCP manifest is not curated: {e}")))?;
        let parsed = McpManifest::parse(manifest).map_err(|e| Error::Refused(e.to_string()))?;
        let url = parsed.server.url.clone().ok_or_else(|| {
            Error::Refused(
                "the MCP manifest names no server.url: the endpoint the executor sends the \
                 tool's credential to must be signed with the manifest"
                    .into(),
            )
        })?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Error::Refused(format!(
                "the MCP manifest's server.url {url:?} is not an http(s) URL"
            )));
        }
        Ok(CuratedManifest {
            manifest: parsed,
            url,
            signed_by,
        })
    }

    /// Checks a verified manifest against what its server listed: the server it names,
    /// and every curated tool's class and pinned recovery declaration.
    /// `listing.server_name` is checked when given (registration), not when reloading.
    pub fn check_mcp(
        &self,
        curated: CuratedManifest,
        listing: McpListing,
    ) -> Result<RegisteredAgent> {
        let CuratedManifest {
            manifest,
            url,
            signed_by,
        } = curated;
        if listing.url != url {
            return Err(Error::Refused(format!(
                "the tools were listed at {:?}, but the manifest names {url:?}",
                listing.url
            )));
        }
        if let Some(name) = &listing.server_name
            && *name != manifest.server.name
        {
            return Err(Error::Refused(format!(
                "the manifest is for the MCP server {:?}, but {url} is {name:?}",
                manifest.server.name
            )));
        }
        let declarations = manifest
            .catalog_agent(&listing.tools)
            .map_err(|e| Error::Refused(e.to_string()))?;
        Ok(RegisteredAgent {
            name: manifest.agent.clone(),
            signed_by,
            url: Some(url),
            kind: AgentKind::Mcp {
                manifest,
                tools: listing.tools,
            },
            declarations,
        })
    }

    fn insert(&self, agent: RegisteredAgent) {
        let mut agents = sync::write(&self.agents);
        agents.insert(agent.name.clone(), Arc::new(agent));
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// On a database replicas share, the newest registration (by its sequence number in
    /// the history) these entries were read with: what is validated against them now
    /// knows every registration up to it, and a newer one in the database means they may
    /// be stale (`refresh`). `None` where this registry alone writes its entries.
    pub fn registrations_read(&self) -> Option<i64> {
        match &self.place {
            Place::Postgres { seen, .. } => Some(seen.load(Ordering::SeqCst)),
            Place::Sqlite(_) => None,
        }
    }

    /// How many registrations this registry has seen (it only grows).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Registers (or replaces) a card once it checks out, on behalf of `by`; durable, with
    /// its record in the history, when it returns.
    pub async fn register(&self, card: Value, by: &str) -> Result<(RegisteredAgent, Registration)> {
        let agent = self.check(card)?;
        let registration = self.persist(&agent, by).await?;
        Ok((agent, registration))
    }

    /// Registers (or replaces) an MCP server once its manifest checks out against what the
    /// server listed; durable when it returns.
    pub async fn register_mcp(
        &self,
        curated: CuratedManifest,
        listing: McpListing,
        by: &str,
    ) -> Result<(RegisteredAgent, Registration)> {
        let agent = self.check_mcp(curated, listing)?;
        let registration = self.persist(&agent, by).await?;
        Ok((agent, registration))
    }

    /// The newest registrations first (at most `limit`), of `agent` or of every agent.
    pub async fn history(&self, agent: Option<&str>, limit: u32) -> Result<Vec<Registration>> {
        let db = match &self.place {
            Place::Sqlite(db) => db.clone(),
            Place::Postgres { db, .. } => return postgres::history(db, agent, limit).await,
        };
        let agent = agent.map(str::to_owned);
        let read = tokio::task::spawn_blocking(move || {
            let reader = open_connection(db.path(), "registry")?;
            registry_history::read(&reader, agent.as_deref(), limit).map_err(|source| {
                Error::Database {
                    what: "cannot read the registry's history",
                    source,
                }
            })
        });
        read.await.map_err(|e| Error::Io {
            what: "the registry history's reader stopped".into(),
            source: std::io::Error::other(e),
        })?
    }

    async fn persist(&self, agent: &RegisteredAgent, by: &str) -> Result<Registration> {
        let before = self.agent(&agent.name);
        let changes = registry_history::diff(
            before.as_deref().map(|a| &a.declarations),
            &agent.declarations,
        );
        let kind = match (&before, changes.is_empty()) {
            (None, _) => "first",
            (Some(_), true) => "unchanged",
            (Some(_), false) => "changed",
        };
        let registration = Registration {
            at_ms: chrono::Utc::now().timestamp_millis(),
            agent: agent.name.clone(),
            by: by.to_owned(),
            kind: kind.to_owned(),
            changes,
        };
        let row = match &agent.kind {
            AgentKind::A2a { card } => Row::Card {
                name: agent.name.clone(),
                card: to_text(card)?,
            },
            AgentKind::Mcp { manifest, tools } => Row::Mcp(McpRow {
                name: agent.name.clone(),
                url: agent.url.clone().unwrap_or_default(),
                manifest: to_text(manifest)?,
                tools: to_text(tools)?,
            }),
        };
        match &self.place {
            Place::Sqlite(db) => {
                let record = registration.clone();
                db.submit(move |tx| {
                    upsert(tx, &row)?;
                    registry_history::record(tx, &record)
                })
                .await?;
            }
            Place::Postgres { db, .. } => postgres::persist(db, &row, &registration).await?,
        }
        self.insert(agent.clone());
        Ok(registration)
    }

    /// The catalog of every registered agent's declarations (no endpoints, no secrets).
    pub fn catalog(&self) -> Result<Catalog> {
        let agents = sync::read(&self.agents);
        let mut catalog = Catalog::default();
        for agent in agents.values() {
            catalog
                .add_agent(agent.name.clone(), agent.declarations.clone())
                .map_err(|e| Error::Refused(e.to_string()))?;
        }
        Ok(catalog)
    }

    /// One registered agent (shared: the invoker looks it up on every call).
    pub fn agent(&self, name: &str) -> Option<Arc<RegisteredAgent>> {
        sync::read(&self.agents).get(name).cloned()
    }
}

fn to_text<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|source| Error::Encoding {
        what: "a registry entry",
        source,
    })
}
