//! The catalog of curated skills: what the executor's registry knows about each agent's
//! skills, read from the reversibility extension of (signed) agent cards.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::reversibility::{REVERSIBILITY_EXTENSION_URI, ReversibilityParams, SkillDeclaration};

/// One agent's curated skills.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogAgent {
    #[serde(default)]
    pub description: String,
    #[serde(deserialize_with = "crate::reversibility::skills")]
    pub skills: BTreeMap<String, SkillDeclaration>,
}

/// Agents by id (the card's `name`), each with its declared skills.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Catalog {
    pub agents: BTreeMap<String, CatalogAgent>,
}

impl Catalog {
    pub fn declaration(&self, agent: &str, skill: &str) -> Option<&SkillDeclaration> {
        self.agents.get(agent)?.skills.get(skill)
    }

    /// Adds a card's declarations. The card's signature is the caller's business (the
    /// executor checks it against platform keys first; offline checks may skip it).
    pub fn add_card(&mut self, card: &Value) -> Result<&CatalogAgent> {
        let (name, agent) = agent_from_card(card)?;
        self.add_agent(name, agent)
    }

    /// Adds one agent's declarations (an agent card's or an MCP manifest's).
    pub fn add_agent(&mut self, name: String, agent: CatalogAgent) -> Result<&CatalogAgent> {
        if self.agents.contains_key(&name) {
            return Err(Error::Card(format!(
                "agent {name:?} is already in the catalog"
            )));
        }
        Ok(self.agents.entry(name).or_insert(agent))
    }
}

/// Reads one card: its name, its A2A skills, and the reversibility declaration of each.
pub fn agent_from_card(card: &Value) -> Result<(String, CatalogAgent)> {
    let shape = |what: &str| Error::Card(format!("the agent card {what}"));
    let name = card
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| shape("has no \"name\""))?
        .to_owned();
    let description = card
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let a2a_skills: Vec<&str> = card
        .get("skills")
        .and_then(Value::as_array)
        .ok_or_else(|| shape("has no \"skills\" array"))?
        .iter()
        .map(|s| {
            s.get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| shape("has a skill without an \"id\""))
        })
        .collect::<Result<_, _>>()?;
    let extension = card
        .pointer("/capabilities/extensions")
        .and_then(Value::as_array)
        .and_then(|exts| {
            exts.iter()
                .find(|e| e.get("uri").and_then(Value::as_str) == Some(REVERSIBILITY_EXTENSION_URI))
        })
        .ok_or_else(|| {
            Error::Card(format!(
                "agent card {name:?} has no {REVERSIBILITY_EXTENSION_URI} extension"
            ))
        })?;
    let params = extension.get("params").unwrap_or(&Value::Null);
    let params = ReversibilityParams::from_value(params).map_err(|e| {
        Error::Card(format!(
            "agent card {name:?}: the reversibility params do not type: {e}"
        ))
    })?;

    let mut problems = Vec::new();
    for skill in &a2a_skills {
        if !params.skills.contains_key(*skill) {
            problems.push(format!("skill {skill} has no reversibility declaration"));
        }
    }
    let has_skill = |s: &str| a2a_skills.contains(&s);
    for (skill, declaration) in &params.skills {
        if !has_skill(skill) {
            problems.push(format!(
                "{skill} is declared but is not one of the card's skills"
            ));
        }
        problems.extend(declaration.problems(skill, &has_skill));
    }
    problems.extend(crate::reversibility::verification_problems(&params.skills));
    if !problems.is_empty() {
        return Err(Error::Card(format!(
            "agent card {name:?}: {}",
            problems.join("; ")
        )));
    }
    Ok((
        name,
        CatalogAgent {
            description,
            skills: params.skills,
        },
    ))
}

/// What a curator should know about an accepted agent without it being refused: each
/// skill whose result others may bind from (every skill a plan may call, that is every
/// one that is not only the undo of another, and every one whose undo reads its
/// response) but whose `outputSchema` is missing or names no member, so that pointers
/// into its result cannot be checked before the first effect; and each skill that takes
/// an amount of money but declares no `spend`, which no mandate's budget then counts.
/// One sentence each.
pub fn registration_warnings(agent: &CatalogAgent) -> Vec<String> {
    let undo_only = |skill: &str| {
        agent
            .skills
            .values()
            .any(|d| d.compensation.as_ref().is_some_and(|c| c.skill == skill))
    };
    let undo_reads_response = |declaration: &SkillDeclaration| {
        let mut reads = false;
        if let Some(comp) = &declaration.compensation {
            let _ = crate::expr::for_each_expr(&comp.args, &mut |_, e| {
                reads |= matches!(e.source, crate::expr::Source::ResponseBody(_));
            });
        }
        reads
    };
    // A member no schema would declare: if it passes, any misspelt one does too.
    let probe = crate::expr::JsonPointer::from_tokens(["\u{0}"]);
    let mut out = Vec::new();
    for (skill, declaration) in &agent.skills {
        if undo_only(skill) && !undo_reads_response(declaration) {
            continue;
        }
        match &declaration.output_schema {
            None => out.push(format!(
                "{skill} declares no outputSchema: pointers into its result \
                 ($steps.<id>.response.body#/…, $response.body#/…) cannot be checked before the first effect"
            )),
            Some(schema) if crate::expr::check_pointer(schema, &probe).is_ok() => {
                out.push(format!(
                    "{skill}'s outputSchema admits any member at the top level: pointers into its result \
                     cannot be checked before the first effect"
                ))
            }
            Some(_) => {}
        }
        if declaration.spend.is_none()
            && let Some(fields) = money_arguments(declaration)
        {
            out.push(format!(
                "{skill} takes {fields} but declares no spend: a mandate's budget counts nothing \
                 of it; if it moves money, declare spend (amountMinor and currency from its arguments)"
            ));
        }
    }
    out
}

/// The arguments of a skill that look like an amount of money (an integer amount and a
/// currency, by their names), as a phrase; `None` when it takes none.
fn money_arguments(declaration: &SkillDeclaration) -> Option<String> {
    let properties = declaration
        .input_schema
        .as_ref()?
        .get("properties")?
        .as_object()?;
    let named = |names: &[&'static str]| -> Option<&'static str> {
        names.iter().copied().find(|n| properties.contains_key(*n))
    };
    let amount = named(&["amountMinor", "amount", "amountCents", "price", "total"])?;
    let currency = named(&["currency", "currencyCode"])?;
    Some(format!("{amount} and {currency}"))
}
