//! The reversibility extension (`urn:sagaplane:ext:reversibility:v1`): each skill's class,
//! declared compensation, timing and spend, as an agent card or MCP manifest declares it.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::expr::{self, Source};
use crate::strict;

/// The URI under which agent cards declare reversibility in `capabilities.extensions`.
pub const REVERSIBILITY_EXTENSION_URI: &str = "urn:sagaplane:ext:reversibility:v1";

/// Default per-attempt timeout when a declaration gives none.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// How a skill's effect can be undone. Written, and read, as its name only (serde's
/// derive would also read `{"compensable": null}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReversibilityClass {
    /// Has a declared compensation.
    Compensable,
    /// Idempotent and safe to repeat (`readOnly` when it changes nothing).
    Retriable,
    /// One-way: may not carry a compensation.
    Irreversible,
}

impl ReversibilityClass {
    const ALL: [Self; 3] = [Self::Compensable, Self::Retriable, Self::Irreversible];
    const NAMES: [&'static str; 3] = ["compensable", "retriable", "irreversible"];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Compensable => "compensable",
            Self::Retriable => "retriable",
            Self::Irreversible => "irreversible",
        }
    }
}

impl<'de> Deserialize<'de> for ReversibilityClass {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = ReversibilityClass;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let names = ReversibilityClass::NAMES;
                write!(f, "a reversibility class, one of the strings {names:?}")
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<Self::Value, E> {
                ReversibilityClass::ALL
                    .into_iter()
                    .find(|class| class.as_str() == name)
                    .ok_or_else(|| E::unknown_variant(name, &ReversibilityClass::NAMES))
            }
        }
        deserializer.deserialize_str(Name)
    }
}

/// Whether a definite failure is worth trying again: what a tool may say of it under
/// the extension's URI, `{"failure": "transient" | "permanent"}` (in a FAILED task's
/// status message metadata, or an MCP result's `_meta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FailureClass {
    /// Nothing took effect, and the same call may succeed later: tried again under the
    /// same key, per the skill's retry policy.
    Transient,
    /// Nothing took effect, and the same call will fail again.
    Permanent,
}

impl FailureClass {
    /// The class marked in `ours`, the member of a metadata map under the extension's
    /// URI, if one is.
    pub fn marked_in(ours: &Value) -> Option<Self> {
        Self::deserialize(ours.get("failure")?).ok()
    }
}

/// A compensation: the skill to call and how to bind its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Compensation {
    /// A skill of the same agent (an MCP tool of the same server).
    pub skill: String,
    /// Bindings over the forward call (`$response.body`, `$request.body`, `$step.*`,
    /// `$saga.id`): a JSON object (refused otherwise), as a step's arguments are.
    #[serde(deserialize_with = "strict::any_object")]
    pub args: Value,
    /// Bindings used when the forward call's outcome is unknown: no response to bind from.
    /// A JSON object when present; null reads as absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "strict::optional_any_object"
    )]
    pub args_when_unknown: Option<Value>,
}

/// How to ask whether a call took effect, when its outcome is unknown: a read-only skill
/// of the same agent, called with these bindings (typically `$step.idempotencyKey`). It
/// answers `{"status": "applied", "response": …}` (the response the call gave),
/// `{"status": "not-applied"}` or `{"status": "unknown"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Verification {
    /// A read-only skill of the same agent (an MCP tool of the same server).
    pub skill: String,
    /// Bindings over the call in doubt (`$request.body`, `$step.*`, `$saga.id`): a JSON
    /// object, as a step's arguments are. There is no response to bind from.
    #[serde(deserialize_with = "strict::any_object")]
    pub args: Value,
}

/// Retry policy: attempts in all (1 = no retry) and capped exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    #[serde(default)]
    pub initial_backoff_ms: u64,
    #[serde(default)]
    pub max_backoff_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 1,
            initial_backoff_ms: 0,
            max_backoff_ms: 0,
        }
    }
}

impl RetryPolicy {
    /// The longest wait before attempt `n + 1` (n ≥ 1): `initial × 2^(n-1)`, capped at
    /// `maxBackoffMs`. Jitter only ever shortens a wait, so this is also its upper bound.
    pub fn backoff_cap_ms(&self, after_attempt: u32) -> u64 {
        let shift = after_attempt.saturating_sub(1).min(63);
        let grown = self.initial_backoff_ms.saturating_mul(1u64 << shift);
        grown.min(self.max_backoff_ms.max(self.initial_backoff_ms))
    }
}

/// What a step spends: two bindings over its own arguments, or literals. Each is read as
/// a number or a string; `SkillDeclaration::problems` checks that a string starting with
/// `$` is one `$request.body` expression.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpendDeclaration {
    #[serde(deserialize_with = "literal_or_expression")]
    pub amount_minor: Value,
    #[serde(deserialize_with = "literal_or_expression")]
    pub currency: Value,
}

fn literal_or_expression<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
    match Value::deserialize(deserializer)? {
        value @ (Value::Number(_) | Value::String(_)) => Ok(value),
        other => Err(de::Error::custom(format_args!(
            "invalid type: {}, expected a number or a string (a literal or a $request.body expression)",
            strict::kind(&other)
        ))),
    }
}

/// The members of a declaration, and of an MCP manifest's tool, that hold a struct: read
/// only from a JSON object (see `strict`).
pub(crate) fn compensation<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Compensation>, D::Error> {
    strict::optional_object(deserializer, "compensation")
}

pub(crate) fn retry<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<RetryPolicy>, D::Error> {
    strict::optional_object(deserializer, "retry")
}

pub(crate) fn verify<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Verification>, D::Error> {
    strict::optional_object(deserializer, "verify")
}

pub(crate) fn spend<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SpendDeclaration>, D::Error> {
    strict::optional_object(deserializer, "spend")
}

pub(crate) fn skills<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, SkillDeclaration>, D::Error> {
    strict::object_values(deserializer, "skills")
}

/// One skill's reversibility declaration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SkillDeclaration {
    pub class: ReversibilityClass,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "compensation"
    )]
    pub compensation: Option<Compensation>,
    /// How to ask the tool whether a call of this skill took effect (`Verification`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "verify"
    )]
    pub verify: Option<Verification>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub idempotent: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub read_only: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub pivot: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "retry"
    )]
    pub retry: Option<RetryPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_ttl_seconds: Option<u64>,
    /// Where the tool's result states its undo deadline: one `$response.body` expression
    /// naming an RFC 3339 time (`"$response.body#/holdExpiresAt"`). The engine uses the
    /// earlier of it and `undoTtlSeconds` from the step's success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_expires_at: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub requires_approval: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_timeout_seconds: Option<u64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "spend"
    )]
    pub spend: Option<SpendDeclaration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl SkillDeclaration {
    pub fn timeout_ms(&self) -> u64 {
        self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)
    }

    pub fn retry(&self) -> RetryPolicy {
        self.retry.unwrap_or_default()
    }

    /// Whether the step may stand before the pivot: it can be undone, or it changed nothing.
    pub fn may_precede_pivot(&self) -> bool {
        self.class == ReversibilityClass::Compensable
            || (self.class == ReversibilityClass::Retriable && self.read_only)
    }

    /// Contradictions inside this one declaration, as sentences. `skills` are the other
    /// skill ids of the same agent (a compensation must name one of them).
    pub fn problems(&self, skill: &str, skills: &dyn Fn(&str) -> bool) -> Vec<String> {
        let mut out = Vec::new();
        match (self.class, &self.compensation) {
            (ReversibilityClass::Compensable, None) => {
                out.push(format!(
                    "{skill} is compensable but declares no compensation"
                ));
            }
            (ReversibilityClass::Irreversible, Some(_)) => {
                out.push(format!(
                    "{skill} is irreversible but declares a compensation"
                ));
            }
            (ReversibilityClass::Retriable, Some(_)) => {
                out.push(format!(
                    "{skill} is retriable; only compensable skills declare a compensation"
                ));
            }
            _ => {}
        }
        if let Some(comp) = &self.compensation {
            let exists = skills(&comp.skill);
            out.extend(named_skill_problems(
                skill,
                "compensation",
                "compensate",
                &comp.skill,
                exists,
            ));
            out.extend(binding_problems(
                skill,
                "compensation.args",
                &comp.args,
                true,
            ));
            if let Some(unknown) = &comp.args_when_unknown {
                out.extend(binding_problems(
                    skill,
                    "compensation.argsWhenUnknown",
                    unknown,
                    false,
                ));
            }
        }
        if let Some(verification) = &self.verify {
            let exists = skills(&verification.skill);
            out.extend(named_skill_problems(
                skill,
                "verify",
                "verify",
                &verification.skill,
                exists,
            ));
            out.extend(binding_problems(
                skill,
                "verify.args",
                &verification.args,
                false,
            ));
        }
        if self.pivot && self.class != ReversibilityClass::Irreversible {
            out.push(format!("{skill} is marked pivot but is not irreversible"));
        }
        if self.read_only && self.class != ReversibilityClass::Retriable {
            out.push(format!("{skill} is marked readOnly but is not retriable"));
        }
        if self.timeout_ms == Some(0) {
            out.push(format!("{skill} has timeoutMs 0"));
        }
        if let Some(retry) = self.retry {
            if retry.max_attempts == 0 {
                out.push(format!(
                    "{skill} has retry.maxAttempts 0; 1 means a single attempt"
                ));
            }
            if retry.max_backoff_ms < retry.initial_backoff_ms {
                out.push(format!(
                    "{skill} has retry.maxBackoffMs below initialBackoffMs"
                ));
            }
        }
        if let Some(at) = &self.undo_expires_at {
            if let Some(problem) = undo_expires_at_problem(at) {
                out.push(format!("{skill}'s undoExpiresAt {problem}"));
            }
            if self.class != ReversibilityClass::Compensable {
                out.push(format!(
                    "{skill} declares undoExpiresAt but is not compensable: it has no undo to expire"
                ));
            }
        }
        if self.requires_approval && self.approval_timeout_seconds.is_none() {
            out.push(format!(
                "{skill} requires approval but declares no approvalTimeoutSeconds"
            ));
        }
        if let Some(spend) = &self.spend {
            for (field, value) in [
                ("spend.amountMinor", &spend.amount_minor),
                ("spend.currency", &spend.currency),
            ] {
                if let Some(problem) = spend_binding_problem(value) {
                    out.push(format!("{skill}'s {field} {problem}"));
                }
            }
        }
        for (field, schema) in [
            ("inputSchema", &self.input_schema),
            ("outputSchema", &self.output_schema),
        ] {
            if let Some(schema) = schema
                && let Err(e) = jsonschema::validator_for(schema)
            {
                out.push(format!("{skill}'s {field} is not a valid JSON Schema: {e}"));
            }
        }
        out.extend(self.reference_problems(skill));
        out
    }

    /// Pointers of this declaration's own bindings that leave what its schemas declare:
    /// the compensation's `$response.body` against `outputSchema`, its `$request.body`
    /// (also in `argsWhenUnknown`) and the spend's against `inputSchema`. Without the
    /// schema, nothing is checked. Such an undo could not be bound when it is needed.
    pub fn reference_problems(&self, skill: &str) -> Vec<String> {
        let mut bindings: Vec<(&str, &Value)> = Vec::new();
        if let Some(comp) = &self.compensation {
            bindings.push(("compensation.args", &comp.args));
            if let Some(unknown) = &comp.args_when_unknown {
                bindings.push(("compensation.argsWhenUnknown", unknown));
            }
        }
        if let Some(verification) = &self.verify {
            bindings.push(("verify.args", &verification.args));
        }
        if let Some(spend) = &self.spend {
            bindings.push(("spend.amountMinor", &spend.amount_minor));
            bindings.push(("spend.currency", &spend.currency));
        }
        // The deadline's pointer: a single expression, not a binding template.
        let deadline = self
            .undo_expires_at
            .as_ref()
            .map(|at| Value::String(at.clone()));
        if let Some(deadline) = &deadline {
            bindings.push(("undoExpiresAt", deadline));
        }
        let mut out = Vec::new();
        for (field, args) in bindings {
            // Parse errors are reported by the binding checks above.
            let _ = expr::for_each_expr(args, &mut |at, e| {
                let (schema, which, pointer) = match &e.source {
                    Source::ResponseBody(p) => (&self.output_schema, "outputSchema", p),
                    Source::RequestBody(p) => (&self.input_schema, "inputSchema", p),
                    _ => return,
                };
                if let Some(schema) = schema
                    && let Err(divergence) = expr::check_pointer(schema, pointer)
                {
                    out.push(format!(
                        "{skill}'s {field} at '{at}' reads {:?}, which {skill}'s {which} does not declare: {divergence}",
                        e.to_string()
                    ));
                }
            });
        }
        out
    }
}

/// Each verification must name a read-only skill: asking must change nothing, since it is
/// asked whenever an outcome is in doubt, as often as that happens.
pub fn verification_problems(skills: &BTreeMap<String, SkillDeclaration>) -> Vec<String> {
    skills
        .iter()
        .filter_map(|(skill, declaration)| {
            let named = &declaration.verify.as_ref()?.skill;
            let target = skills.get(named)?;
            (!target.read_only).then(|| {
                format!("{skill}'s verify names {named}, which is not readOnly: asking whether a call took effect must change nothing")
            })
        })
        .collect()
}

/// What is wrong with `skill`'s `member` naming skill `named` (`exists`: the agent has
/// it), which the skill calls to `verb` it: it must be another skill of the same agent.
fn named_skill_problems(
    skill: &str,
    member: &str,
    verb: &str,
    named: &str,
    exists: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    if !exists {
        out.push(format!(
            "{skill}'s {member} names {named}, which this agent does not have"
        ));
    }
    if named == skill {
        out.push(format!("{skill} cannot {verb} itself"));
    }
    out
}

/// Compensation bindings may read the forward call (`$request`, and `$response` unless
/// the outcome is unknown) and the saga context; never other steps' results.
fn binding_problems(
    skill: &str,
    field: &str,
    args: &Value,
    response_available: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    let walked = expr::for_each_expr(args, &mut |at, e| {
        match &e.source {
        Source::ResponseBody(_) if !response_available => out.push(format!(
            "{skill}'s {field} at '{at}' uses {e}, but there is no response when the outcome is unknown"
        )),
        Source::StepResponseBody { .. } => out.push(format!(
            "{skill}'s {field} at '{at}' uses {e}; a declaration may only bind its own call and the saga context"
        )),
        _ => {}
    }
    });
    if let Err((at, e)) = walked {
        out.push(format!("{skill}'s {field} at '{at}': {e}"));
    }
    out
}

/// A spend field is a literal or a single `$request.body` expression.
fn spend_binding_problem(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if s.starts_with('$') => match expr::Expr::parse(s) {
            Ok(e) if matches!(e.source, Source::RequestBody(_)) => None,
            Ok(e) => Some(format!(
                "uses {e}; spend may only read the step's own arguments ($request.body)"
            )),
            Err(e) => Some(e.to_string()),
        },
        Value::String(_) | Value::Number(_) => None,
        other => Some(format!(
            "must be a literal or a $request.body expression, found {other}"
        )),
    }
}

/// `undoExpiresAt` is one `$response.body` expression: the deadline is read from the
/// step's own result, never from its arguments or another step.
fn undo_expires_at_problem(text: &str) -> Option<String> {
    match expr::Expr::parse(text) {
        Ok(e) if matches!(e.source, Source::ResponseBody(_)) => None,
        Ok(e) => Some(format!(
            "uses {e}; the undo deadline may only be read from the step's own result ($response.body)"
        )),
        Err(e) => Some(e.to_string()),
    }
}

/// The `params` of the extension entry in an agent card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReversibilityParams {
    #[serde(deserialize_with = "skills")]
    pub skills: BTreeMap<String, SkillDeclaration>,
}

impl ReversibilityParams {
    /// Types the params from JSON, as `spec/schemas/skill-declarations.schema.json` says
    /// (objects only as JSON objects), naming the member that does not fit. Says nothing
    /// of what `SkillDeclaration::problems` checks.
    pub fn from_value(value: &Value) -> Result<Self, String> {
        strict::document(value, "the reversibility params")
    }
}
