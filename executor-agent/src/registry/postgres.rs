//! The registry's tables in PostgreSQL, shared by executor replicas: the curated cards and
//! MCP servers, and the history of registrations, whose newest sequence number tells a
//! replica that another one registered something since it last read the tables.

use sagaplane_storage::postgres::{Cached, DriverError, Migration, Postgres, failed, to_i64};

use super::{Row, Stored};
use crate::error::{Error, Result};
use crate::registry_history::{self, Registration};

/// The registry's schema in PostgreSQL, in order; the count is its version.
pub(super) const MIGRATIONS: &[Migration] = &[Migration {
    what: "agent cards, MCP servers and the history of registrations",
    sql: "CREATE TABLE IF NOT EXISTS cards (name TEXT PRIMARY KEY, card TEXT NOT NULL);
          CREATE TABLE IF NOT EXISTS mcp_servers (name TEXT PRIMARY KEY, url TEXT NOT NULL,
              manifest TEXT NOT NULL, tools TEXT NOT NULL);
          CREATE TABLE IF NOT EXISTS registry_history (
              seq BIGSERIAL PRIMARY KEY,
              at_ms BIGINT NOT NULL,
              agent TEXT NOT NULL,
              by_caller TEXT NOT NULL,
              kind TEXT NOT NULL,
              changes TEXT NOT NULL);
          CREATE INDEX IF NOT EXISTS registry_history_by_agent ON registry_history (agent, seq);",
}];

fn store(what: &str) -> impl Fn(DriverError) -> Error + '_ {
    move |e| Error::from(failed(what, &e))
}

/// The newest registration's sequence number (0 before the first): every registration
/// writes one, in the transaction that makes it.
pub(super) async fn latest(db: &Postgres) -> Result<i64> {
    let conn = db.connection().await?;
    let row = conn
        .row(
            "SELECT COALESCE(MAX(seq), 0)::BIGINT FROM registry_history",
            &[],
        )
        .await
        .map_err(store("cannot read the registry's newest registration"))?;
    Ok(row.get(0))
}

/// Every stored card and MCP server, as `Registry::verified` reads them.
pub(super) async fn stored(db: &Postgres) -> Result<Stored> {
    let conn = db.connection().await?;
    let unreadable = store("cannot read the registry");
    let cards = conn
        .rows("SELECT card FROM cards ORDER BY name", &[])
        .await
        .map_err(&unreadable)?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let servers = conn
        .rows(
            "SELECT url, manifest, tools FROM mcp_servers ORDER BY name",
            &[],
        )
        .await
        .map_err(&unreadable)?
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    Ok(Stored { cards, servers })
}

/// Stores a registration and its record in one transaction.
pub(super) async fn persist(db: &Postgres, row: &Row, record: &Registration) -> Result<()> {
    let failed = store("cannot store a registration");
    let changes = registry_history::changes_text(record).map_err(|source| Error::Encoding {
        what: "a registration's changes",
        source,
    })?;
    let mut conn = db.connection().await?;
    let tx = conn.transaction().await.map_err(&failed)?;
    match row {
        Row::Card { name, card } => {
            tx.run("DELETE FROM mcp_servers WHERE name = $1", &[name])
                .await
                .map_err(&failed)?;
            tx.run(
                "INSERT INTO cards (name, card) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET card = excluded.card",
                &[name, card],
            )
            .await
            .map_err(&failed)?;
        }
        Row::Mcp(row) => {
            tx.run("DELETE FROM cards WHERE name = $1", &[&row.name])
                .await
                .map_err(&failed)?;
            tx.run(
                "INSERT INTO mcp_servers (name, url, manifest, tools) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (name) DO UPDATE SET url = excluded.url,
                   manifest = excluded.manifest, tools = excluded.tools",
                &[&row.name, &row.url, &row.manifest, &row.tools],
            )
            .await
            .map_err(&failed)?;
        }
    }
    tx.run(
        "INSERT INTO registry_history (at_ms, agent, by_caller, kind, changes)
         VALUES ($1, $2, $3, $4, $5)",
        &[
            &record.at_ms,
            &record.agent,
            &record.by,
            &record.kind,
            &changes,
        ],
    )
    .await
    .map_err(&failed)?;
    tx.commit().await.map_err(&failed)
}

/// The newest registrations first, at most `limit`, of one agent or of all.
pub(super) async fn history(
    db: &Postgres,
    agent: Option<&str>,
    limit: u32,
) -> Result<Vec<Registration>> {
    let conn = db.connection().await?;
    let rows = conn
        .rows(
            "SELECT at_ms, agent, by_caller, kind, changes FROM registry_history
             WHERE $1::TEXT IS NULL OR agent = $1 ORDER BY seq DESC LIMIT $2",
            &[&agent, &to_i64(u64::from(limit))],
        )
        .await
        .map_err(store("cannot read the registry's history"))?;
    Ok(rows
        .iter()
        .map(|row| {
            registry_history::registration(
                row.get(0),
                row.get(1),
                row.get(2),
                row.get(3),
                row.get(4),
            )
        })
        .collect())
}
