//! The plan artifact: the typed, signed boundary between the intent and execution planes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::mandate::Mandate;
use crate::reversibility::{self, Compensation, ReversibilityClass};
use crate::signing::{self, JwsSignature};
use crate::strict;

/// A signed plan. Unknown members are refused: a misspelt field in a safety artifact
/// must not be ignored silently. Read strictly, as `spec/schemas/plan.schema.json` says:
/// objects only as JSON objects, `createdAt` only as RFC 3339 (see `strict`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plan {
    pub saga_id: String,
    pub plan_version: u32,
    pub goal: String,
    #[serde(deserialize_with = "strict::date_time")]
    pub created_at: DateTime<Utc>,
    #[serde(deserialize_with = "authored_by")]
    pub authored_by: AuthoredBy,
    /// The principal's grant the plan runs under, embedded with its signature.
    #[serde(deserialize_with = "mandate")]
    pub mandate: Mandate,
    /// Index of the first irreversible step; `null` when there is none. Always written;
    /// an absent member reads as `null`.
    pub pivot_index: Option<usize>,
    /// The most steps of this saga the executor may have under way at once (calls out, or
    /// waiting to be retried); at most the executor's own bound. Absent: the executor's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel_steps: Option<u32>,
    /// The plan this one replaces: its saga unwound and the planner planned again under
    /// the same mandate, with that failure as input. Absent for a first plan.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "supersedes"
    )]
    pub supersedes: Option<Supersedes>,
    #[serde(deserialize_with = "steps")]
    pub steps: Vec<Step>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "signing::signatures"
    )]
    pub signatures: Vec<JwsSignature>,
}

/// Who wrote the plan, and from what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthoredBy {
    pub agent: String,
    pub model: String,
    #[serde(default)]
    pub prompt_sha256: Option<String>,
    #[serde(default)]
    pub rejected_alternatives: Vec<Value>,
}

/// The saga a plan replaces, and the failure it answers (as the executor reported it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Supersedes {
    /// The superseded plan's saga id.
    pub saga_id: String,
    /// The executor's task that ran it.
    pub executor_task_id: String,
    /// The step whose failure made it unwind, when the executor named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<String>,
    /// Why, in the executor's words (which may quote a tool: show it escaped).
    pub reason: String,
}

/// The longest `Supersedes::reason` a plan may carry, in characters.
pub const MAX_SUPERSEDES_REASON_CHARS: usize = 2000;

/// One step: a skill of a registered agent, with its arguments and the reversibility the
/// planner copied from the catalog (checked, never trusted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Step {
    pub id: String,
    pub agent: String,
    pub skill: String,
    /// A JSON object (refused otherwise); kept as a `Value` so checks and bindings
    /// read it without copying.
    #[serde(deserialize_with = "strict::any_object")]
    pub args: Value,
    pub class: ReversibilityClass,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "reversibility::compensation"
    )]
    pub compensation: Option<Compensation>,
    pub idempotency_key: String,
    /// The ids of the steps this one waits for: it is called once each of them has
    /// succeeded. Absent: the step listed before it (none for the first), so a plan
    /// without `after` is a sequence. `[]`: it waits for nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<String>>,
}

fn authored_by<'de, D: Deserializer<'de>>(deserializer: D) -> Result<AuthoredBy, D::Error> {
    strict::object(deserializer, "authoredBy")
}

fn mandate<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Mandate, D::Error> {
    strict::object(deserializer, "mandate")
}

fn supersedes<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Supersedes>, D::Error> {
    strict::object(deserializer, "supersedes").map(Some)
}

fn steps<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Step>, D::Error> {
    strict::objects(deserializer, "steps")
}

/// The idempotency key of a forward call: derived from the plan's identity, so that
/// regenerating any interface never changes it.
pub fn idempotency_key(saga_id: &str, step_id: &str) -> String {
    format!("{saga_id}:{step_id}")
}

/// The idempotency key of a step's compensation.
pub fn undo_idempotency_key(saga_id: &str, step_id: &str) -> String {
    format!("{saga_id}:{step_id}:undo")
}

impl Plan {
    /// Types a plan from JSON, naming the field that does not fit.
    pub fn from_value(value: &Value) -> Result<Self, String> {
        strict::document(value, "a plan")
    }

    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.id == id)
    }

    /// The ids step `index` waits for, as written or as implied (the step before it).
    pub fn waits_for(&self, index: usize) -> Vec<&str> {
        match &self.steps[index].after {
            Some(ids) => ids.iter().map(String::as_str).collect(),
            None => index
                .checked_sub(1)
                .map(|before| vec![self.steps[before].id.as_str()])
                .unwrap_or_default(),
        }
    }
}
