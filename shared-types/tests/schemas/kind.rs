//! The documents whose schema is held to a Rust parser on mutated documents: each kind's
//! schema, its seeds (the repository's examples) and the parser.

use serde_json::{Value, json};
use shared_types::reversibility::ReversibilityParams;
use shared_types::{Mandate, Plan, Revocation};

use crate::answer::{example_answers, parse_answer};
use crate::examples::{
    STRUCTURALLY_INVALID_PLANS, card_params, example_mandates, example_plans, example_revocation,
};
use crate::registry::{json_files, read_json};

/// A document kind with both a schema and a Rust parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    SkillDeclarations,
    Plan,
    Mandate,
    Revocation,
    Answer,
}

impl Kind {
    pub(crate) fn schema(self) -> &'static str {
        match self {
            Kind::SkillDeclarations => "skill-declarations",
            Kind::Plan => "plan",
            Kind::Mandate => "mandate",
            Kind::Revocation => "revocation",
            Kind::Answer => "answer",
        }
    }

    fn seeds(self) -> Vec<Value> {
        match self {
            Kind::SkillDeclarations => card_params().into_iter().map(|(_, p)| p).collect(),
            Kind::Plan => example_plans()
                .into_iter()
                .map(|(_, p)| p)
                .chain(
                    json_files("examples/plans/invalid", |name| {
                        !STRUCTURALLY_INVALID_PLANS.contains(&name)
                    })
                    .iter()
                    .map(|p| read_json(p)),
                )
                .collect(),
            Kind::Mandate => example_mandates().into_iter().map(|(_, m)| m).collect(),
            Kind::Revocation => vec![example_revocation()],
            Kind::Answer => example_answers(),
        }
    }

    /// The seeds, and one document more per kind with the optional members no example
    /// carries, so that mutations reach them too.
    pub(crate) fn seeds_with_every_member(self) -> Vec<Value> {
        let mut seeds = self.seeds();
        let mut full = seeds[0].clone();
        let signature = json!({"protected": "eyJhbGciOiJFZERTQSIsImtpZCI6ImsifQ", "signature": "AA", "header": {"kid": "k"}});
        match self {
            Kind::Plan => {
                full["authoredBy"]["promptSha256"] =
                    json!("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
                full["authoredBy"]["rejectedAlternatives"] = json!([{"steps": 7}]);
                full["mandate"]["maxSagas"] = json!(3);
                full["signatures"] = json!([signature]);
            }
            Kind::Mandate => {
                full["maxSagas"] = json!(3);
                full["signatures"] = json!([signature]);
            }
            Kind::Revocation => {
                let members = full.as_object_mut().unwrap();
                members.remove("reason");
                members.remove("signatures");
            }
            Kind::SkillDeclarations => {
                full["skills"]["x.undo"] = json!({"class": "retriable"});
                full["skills"]["x.do"] = json!({
                    "class": "compensable",
                    "compensation": {"skill": "x.undo", "args": {"id": "$response.body#/id"}},
                    "undoTtlSeconds": 60, "undoExpiresAt": "$response.body#/until",
                    "requiresApproval": true, "approvalTimeoutSeconds": 600,
                    "spend": {"amountMinor": 100, "currency": "EUR"},
                    "retry": {"maxAttempts": 2},
                });
            }
            Kind::Answer => return seeds,
        }
        seeds.push(full);
        seeds
    }

    /// The Rust parser the schema mirrors.
    pub(crate) fn parse(self, doc: &Value) -> Result<(), String> {
        match self {
            // As the catalog reads a card's params (`agent_from_card`), before it checks
            // what the schema only states (`SkillDeclaration::problems`).
            Kind::SkillDeclarations => ReversibilityParams::from_value(doc).map(drop),
            // As the executor types a plan (executor-agent/src/agent.rs, and
            // `PlanValidator::validate_verified`): integral doubles, which A2A data parts
            // make of every integer, become integers first.
            Kind::Plan => {
                let mut doc = doc.clone();
                shared_types::json::normalize_integers(&mut doc);
                Plan::from_value(&doc).map(drop)
            }
            Kind::Mandate => Mandate::from_value(doc).map(drop),
            Kind::Revocation => Revocation::from_value(doc).map(drop),
            Kind::Answer => parse_answer(doc),
        }
    }
}
