//! The history of the registry: every registration, who made it and when, and what it
//! changed in the agent's declarations (skills added or removed; a skill's class,
//! compensation or other declaration, old and new). Kept in the state file (or the
//! shared PostgreSQL database, `registry/postgres.rs`), written in
//! the same transaction as the registration itself, so a change is never in force
//! without its record. Sagas already accepted are not affected by a change: each runs on
//! the declarations its journal header was written with.

use rusqlite::{Transaction, params};
use serde::Serialize;
use serde_json::Value;
use shared_types::{CatalogAgent, SkillDeclaration};

/// The table, created with the registry's own.
pub const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS registry_history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    agent TEXT NOT NULL,
    by_caller TEXT NOT NULL,
    kind TEXT NOT NULL,
    changes TEXT NOT NULL);
  CREATE INDEX IF NOT EXISTS registry_history_by_agent ON registry_history (agent, seq);";

/// What one registration did to one skill.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillChange {
    pub skill: String,
    /// `added`, `removed`, `class`, `compensation` or `declaration` (any other field).
    pub change: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new: Option<Value>,
}

impl SkillChange {
    /// Whether this change alters what may be undone: a class or a compensation.
    pub fn alters_reversibility(&self) -> bool {
        matches!(self.change, "class" | "compensation" | "removed")
    }
}

/// One registration as the history keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Registration {
    pub at_ms: i64,
    pub agent: String,
    pub by: String,
    /// `first` (the agent was not registered), `changed` or `unchanged`.
    pub kind: String,
    pub changes: Vec<SkillChange>,
}

fn as_json<T: Serialize>(value: &T) -> Option<Value> {
    serde_json::to_value(value).ok()
}

/// What `new` changes in the declarations `old` (none: a first registration).
pub fn diff(old: Option<&CatalogAgent>, new: &CatalogAgent) -> Vec<SkillChange> {
    let Some(old) = old else {
        return Vec::new();
    };
    let mut changes = Vec::new();
    for (skill, before) in &old.skills {
        match new.skills.get(skill) {
            None => changes.push(SkillChange {
                skill: skill.clone(),
                change: "removed",
                old: as_json(before),
                new: None,
            }),
            Some(after) => changes.extend(changed(skill, before, after)),
        }
    }
    for (skill, after) in &new.skills {
        if !old.skills.contains_key(skill) {
            changes.push(SkillChange {
                skill: skill.clone(),
                change: "added",
                old: None,
                new: as_json(after),
            });
        }
    }
    changes
}

fn changed(skill: &str, before: &SkillDeclaration, after: &SkillDeclaration) -> Vec<SkillChange> {
    let mut changes = Vec::new();
    let mut push = |change, old, new| {
        changes.push(SkillChange {
            skill: skill.to_owned(),
            change,
            old,
            new,
        })
    };
    if before.class != after.class {
        push("class", as_json(&before.class), as_json(&after.class));
    }
    if before.compensation != after.compensation {
        push(
            "compensation",
            as_json(&before.compensation),
            as_json(&after.compensation),
        );
    }
    let rest = |d: &SkillDeclaration| SkillDeclaration {
        class: after.class,
        compensation: None,
        ..d.clone()
    };
    if rest(before) != rest(after) {
        push("declaration", as_json(before), as_json(after));
    }
    changes
}

/// A registration's changes as they are stored.
pub fn changes_text(registration: &Registration) -> serde_json::Result<String> {
    serde_json::to_string(&registration.changes)
}

/// Records a registration in the transaction that makes it.
pub fn record(tx: &Transaction<'_>, registration: &Registration) -> rusqlite::Result<()> {
    let changes = changes_text(registration)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    tx.prepare_cached(
        "INSERT INTO registry_history (at_ms, agent, by_caller, kind, changes)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        registration.at_ms,
        registration.agent,
        registration.by,
        registration.kind,
        changes
    ])
    .map(|_| ())
}

/// The newest registrations first, at most `limit`, of one agent or of all.
pub fn read(
    connection: &rusqlite::Connection,
    agent: Option<&str>,
    limit: u32,
) -> rusqlite::Result<Vec<Registration>> {
    let mut statement = connection.prepare_cached(
        "SELECT at_ms, agent, by_caller, kind, changes FROM registry_history
         WHERE ?1 IS NULL OR agent = ?1 ORDER BY seq DESC LIMIT ?2",
    )?;
    let rows = statement.query_map(params![agent, limit], |row| {
        Ok(registration(
            row.get(0)?,
            row.get(1)?,
            row.get(2)?,
            row.get(3)?,
            row.get(4)?,
        ))
    })?;
    rows.collect()
}

/// A registration read back from its stored columns.
pub fn registration(
    at_ms: i64,
    agent: String,
    by: String,
    kind: String,
    changes: String,
) -> Registration {
    let changes: Vec<Value> = serde_json::from_str(&changes).unwrap_or_default();
    Registration {
        at_ms,
        agent,
        by,
        kind,
        changes: changes.into_iter().filter_map(stored_change).collect(),
    }
}

/// A stored change read back (its `change` is one of the fixed names).
fn stored_change(value: Value) -> Option<SkillChange> {
    let change = match value.get("change")?.as_str()? {
        "added" => "added",
        "removed" => "removed",
        "class" => "class",
        "compensation" => "compensation",
        _ => "declaration",
    };
    Some(SkillChange {
        skill: value.get("skill")?.as_str()?.to_owned(),
        change,
        old: value.get("old").cloned(),
        new: value.get("new").cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared_types::ReversibilityClass;

    fn agent(skills: &[(&str, ReversibilityClass)]) -> CatalogAgent {
        let mut agent = CatalogAgent {
            description: String::new(),
            skills: Default::default(),
        };
        for (name, class) in skills {
            let declaration: SkillDeclaration =
                serde_json::from_value(serde_json::json!({"class": class})).unwrap();
            agent.skills.insert((*name).to_owned(), declaration);
        }
        agent
    }

    #[test]
    fn a_diff_names_each_skill_added_removed_or_reclassified() {
        use ReversibilityClass::*;
        let old = agent(&[("a", Compensable), ("b", Retriable)]);
        let new = agent(&[("a", Irreversible), ("c", Retriable)]);
        let changes = diff(Some(&old), &new);
        let names: Vec<(&str, &str)> = changes
            .iter()
            .map(|c| (c.skill.as_str(), c.change))
            .collect();
        assert_eq!(
            names,
            vec![("a", "class"), ("b", "removed"), ("c", "added")]
        );
        assert!(changes[0].alters_reversibility());
        assert!(!changes[2].alters_reversibility());
        assert!(diff(Some(&old), &old).is_empty());
        assert!(diff(None, &new).is_empty());
    }
}
