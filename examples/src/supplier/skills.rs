//! What each demo tool agent's skills do: create a resource, undo one, or only read; the
//! ids they mint; and the results they answer with (shaped by the cards' output schemas).

use serde_json::{Value, json};

/// The six supplier-onboarding agents, in the order the plan calls them.
pub const AGENTS: [&str; 6] = [
    "vendor-registry",
    "budget",
    "sandbox",
    "compliance-registry",
    "payments",
    "mailer",
];

/// How a skill acts on the agent's ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// An effect: mints a resource id `<prefix>_NNNN` and answers with it.
    Forward { prefix: &'static str },
    /// Undoes the forward skill `of`, located by the resource id in argument `field` (the
    /// member of `of`'s result that carries it) or by `forwardKey`; answers
    /// `{<answer>: bool}`.
    Undo {
        of: &'static str,
        field: &'static str,
        answer: &'static str,
    },
    /// Changes nothing; answers with a fresh reference `<prefix>_NNNN`.
    Read { prefix: &'static str },
    /// Says whether the call of `of` under the key in argument `forwardKey` took effect:
    /// `{"status": "applied", "response": <its result>}` or `{"status": "not-applied"}`.
    /// A key found not applied is dead from then on (a late call under it is refused), so
    /// the answer stays true.
    Status { of: &'static str },
}

impl Behaviour {
    /// Whether calls must carry an `Idempotency-Key` (everything that changes state).
    pub fn needs_key(self) -> bool {
        !matches!(self, Self::Read { .. } | Self::Status { .. })
    }
}

/// One skill of one agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkillSpec {
    pub agent: &'static str,
    pub skill: &'static str,
    pub behaviour: Behaviour,
}

/// Every skill of the six agents (the committed cards declare exactly these).
pub const SKILLS: [SkillSpec; 11] = [
    SkillSpec {
        agent: "vendor-registry",
        skill: "vendor.create",
        behaviour: Behaviour::Forward { prefix: "v" },
    },
    SkillSpec {
        agent: "vendor-registry",
        skill: "vendor.archive",
        behaviour: Behaviour::Undo {
            of: "vendor.create",
            field: "vendorId",
            answer: "archived",
        },
    },
    SkillSpec {
        agent: "budget",
        skill: "budget.reserve",
        behaviour: Behaviour::Forward { prefix: "r" },
    },
    SkillSpec {
        agent: "budget",
        skill: "budget.release",
        behaviour: Behaviour::Undo {
            of: "budget.reserve",
            field: "reservationId",
            answer: "released",
        },
    },
    SkillSpec {
        agent: "sandbox",
        skill: "sandbox.provision",
        behaviour: Behaviour::Forward { prefix: "t" },
    },
    SkillSpec {
        agent: "sandbox",
        skill: "sandbox.deprovision",
        behaviour: Behaviour::Undo {
            of: "sandbox.provision",
            field: "tenantId",
            answer: "deprovisioned",
        },
    },
    SkillSpec {
        agent: "compliance-registry",
        skill: "compliance.check",
        behaviour: Behaviour::Read { prefix: "cr" },
    },
    SkillSpec {
        agent: "compliance-registry",
        skill: "compliance.review",
        behaviour: Behaviour::Read { prefix: "rv" },
    },
    SkillSpec {
        agent: "payments",
        skill: "payments.capture",
        behaviour: Behaviour::Forward { prefix: "cap" },
    },
    SkillSpec {
        agent: "payments",
        skill: "payments.status",
        behaviour: Behaviour::Status {
            of: "payments.capture",
        },
    },
    SkillSpec {
        agent: "mailer",
        skill: "email.send",
        behaviour: Behaviour::Forward { prefix: "msg" },
    },
];

/// The skills of `agent`.
pub fn skills_of(agent: &str) -> Vec<SkillSpec> {
    SKILLS
        .iter()
        .filter(|s| s.agent == agent)
        .copied()
        .collect()
}

/// The agent that offers `skill`.
pub fn agent_of(skill: &str) -> Option<&'static str> {
    SKILLS.iter().find(|s| s.skill == skill).map(|s| s.agent)
}

/// The spec of `skill`.
pub fn spec(skill: &str) -> Option<SkillSpec> {
    SKILLS.iter().find(|s| s.skill == skill).copied()
}

/// How long a budget hold lasts: the 24 hours the budget card declares as the undo's
/// `undoTtlSeconds`, stated in each reservation's `holdExpiresAt`.
pub const HOLD: chrono::TimeDelta = chrono::TimeDelta::hours(24);

/// The result of a forward or read skill that minted `id` from `args` at `at`; a budget
/// hold made then lapses `hold` later.
pub(crate) fn fresh_result(
    skill: &str,
    id: &str,
    args: &Value,
    at: chrono::DateTime<chrono::Utc>,
    hold: chrono::TimeDelta,
) -> Value {
    match skill {
        "vendor.create" => json!({"vendorId": id}),
        "budget.reserve" => json!({
            "reservationId": id,
            "holdExpiresAt": (at + hold).to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        }),
        "sandbox.provision" => json!({"tenantId": id, "login": format!("admin@{id}")}),
        "compliance.check" | "compliance.review" => json!({"status": "clear", "reference": id}),
        "payments.capture" => json!({
            "captureId": id,
            "amountMinor": args.get("amountMinor").cloned().unwrap_or(Value::Null),
            "currency": args.get("currency").cloned().unwrap_or(Value::Null),
        }),
        "email.send" => json!({"messageId": id}),
        _ => json!({"id": id}),
    }
}

/// The member of a forward result that names the resource it made, for the undo that
/// locates it by that id.
pub(crate) fn resource_of(skill: &str, result: &Value) -> Option<String> {
    let field = SKILLS.iter().find_map(|s| match s.behaviour {
        Behaviour::Undo { of, field, .. } if of == skill => Some(field),
        _ => None,
    })?;
    result.get(field).and_then(Value::as_str).map(str::to_owned)
}
