//! What the saga engine runs: a validated plan joined with the curated declarations of
//! each step (the plan's own claims are never used for behaviour).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use shared_types::plan::undo_idempotency_key;
use shared_types::reversibility::{RetryPolicy, ReversibilityClass};
use shared_types::{Catalog, Dependencies, Money, Plan};

/// The executor's default bound on the steps of one saga under way at once, which the
/// validator times plans with too.
pub use shared_types::DEFAULT_MAX_PARALLEL_STEPS;

/// How to call one skill: where, with what, and how patiently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallSpec {
    pub agent: String,
    pub skill: String,
    pub idempotent: bool,
    pub timeout_ms: u64,
    pub retry: RetryPolicy,
}

/// A step's declared compensation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompensationSpec {
    pub call: CallSpec,
    pub args: Value,
    pub args_when_unknown: Option<Value>,
    pub idempotency_key: String,
    /// How to ask whether the compensation took effect when its outcome is unknown: the
    /// compensation skill's own `verify` (absent in headers from before it was used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationSpec>,
}

/// How the engine asks a tool whether a call in doubt took effect: the verification
/// skill (read-only, of the same agent), its argument bindings, and the schema the
/// response it reports must meet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerificationSpec {
    pub call: CallSpec,
    pub args: Value,
    /// The forward skill's `outputSchema`: an `applied` answer's response must meet it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
}

/// One step as the engine runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepSpec {
    pub id: String,
    pub call: CallSpec,
    pub args: Value,
    pub idempotency_key: String,
    pub class: ReversibilityClass,
    pub read_only: bool,
    pub undo_ttl_ms: Option<u64>,
    /// Where the result states the undo deadline (the card's `undoExpiresAt`). Absent in
    /// the headers of sagas begun before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_expires_at: Option<String>,
    pub approval_timeout_ms: Option<u64>,
    pub compensation: Option<CompensationSpec>,
    /// How to ask whether the forward call took effect when its outcome is unknown
    /// (absent in the headers of sagas begun before verifications existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationSpec>,
    /// The positions of the steps it waits for, when the plan names them (`after`);
    /// absent: the step before it (none for the first), as in every plan before `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<usize>>,
}

/// A whole saga.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SagaSpec {
    pub saga_id: String,
    pub steps: Vec<StepSpec>,
    /// The first step that cannot be unwound past: the pivot, or else the first
    /// retriable step that changes something; `None` when every step can be unwound.
    pub point_of_no_return: Option<usize>,
    /// The mandate's expiry, in ms since the Unix epoch.
    pub expires_at_ms: i64,
    /// What the saga holds against its principal's mandate (absent in journals from
    /// before mandates were principals' own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mandate: Option<MandateHold>,
    /// The most steps under way at once (calls out, or waiting to be retried): the lower
    /// of the plan's `maxParallelSteps` and the executor's bound. Absent in the headers of
    /// sequences, which never have more than one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel_steps: Option<u32>,
}

/// Why a plan cannot become a saga (it should have failed validation first).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step {step}: {reason}")]
pub struct SpecError {
    pub step: String,
    pub reason: String,
}

impl SagaSpec {
    /// Joins a validated plan with the catalog's declarations.
    pub fn new(plan: &Plan, catalog: &Catalog) -> Result<Self, SpecError> {
        let mut steps = Vec::with_capacity(plan.steps.len());
        let dependencies = Dependencies::of(plan);
        if let Some(problem) = dependencies.problems().first() {
            return Err(SpecError {
                step: plan.steps[problem.step()].id.clone(),
                reason: format!("its after cannot be followed: {problem:?}"),
            });
        }
        for (index, step) in plan.steps.iter().enumerate() {
            let error = |reason: &str| SpecError {
                step: step.id.clone(),
                reason: reason.to_owned(),
            };
            let declared = catalog
                .declaration(&step.agent, &step.skill)
                .ok_or_else(|| error("the skill is not in the catalog"))?;
            let call = |skill: &str, d: &shared_types::SkillDeclaration| CallSpec {
                agent: step.agent.clone(),
                skill: skill.to_owned(),
                idempotent: d.idempotent,
                timeout_ms: d.timeout_ms(),
                retry: d.retry(),
            };
            // How a call of a skill declared `d` is verified, if it declares how.
            let verification_of = |d: &shared_types::SkillDeclaration| match &d.verify {
                None => Ok(None),
                Some(v) => {
                    let asked = catalog
                        .declaration(&step.agent, &v.skill)
                        .ok_or_else(|| error("its verification skill is not in the catalog"))?;
                    Ok(Some(VerificationSpec {
                        call: call(&v.skill, asked),
                        args: v.args.clone(),
                        response_schema: d.output_schema.clone(),
                    }))
                }
            };
            let compensation = match &declared.compensation {
                None => None,
                Some(c) => {
                    let undo = catalog
                        .declaration(&step.agent, &c.skill)
                        .ok_or_else(|| error("its compensation skill is not in the catalog"))?;
                    Some(CompensationSpec {
                        call: call(&c.skill, undo),
                        args: c.args.clone(),
                        args_when_unknown: c.args_when_unknown.clone(),
                        idempotency_key: undo_idempotency_key(&plan.saga_id, &step.id),
                        verification: verification_of(undo)?,
                    })
                }
            };
            let verification = verification_of(declared)?;
            steps.push(StepSpec {
                id: step.id.clone(),
                call: call(&step.skill, declared),
                args: step.args.clone(),
                idempotency_key: step.idempotency_key.clone(),
                class: declared.class,
                read_only: declared.read_only,
                undo_ttl_ms: declared.undo_ttl_seconds.map(|s| s.saturating_mul(1000)),
                undo_expires_at: declared.undo_expires_at.clone(),
                approval_timeout_ms: declared.requires_approval.then(|| {
                    declared
                        .approval_timeout_seconds
                        .unwrap_or(0)
                        .saturating_mul(1000)
                }),
                compensation,
                verification,
                after: step
                    .after
                    .as_ref()
                    .map(|_| dependencies.waits_for(index).to_vec()),
            });
        }
        let point_of_no_return = steps
            .iter()
            .position(|s| s.class != ReversibilityClass::Compensable && !s.read_only);
        Ok(Self {
            saga_id: plan.saga_id.clone(),
            steps,
            point_of_no_return,
            expires_at_ms: plan.mandate.not_after.timestamp_millis(),
            mandate: None,
            max_parallel_steps: plan.steps.iter().any(|s| s.after.is_some()).then(|| {
                plan.max_parallel_steps
                    .unwrap_or(DEFAULT_MAX_PARALLEL_STEPS)
                    .max(1)
            }),
        })
    }

    /// The positions step `i` waits for.
    pub fn waits_for(&self, i: usize) -> Vec<usize> {
        match &self.steps[i].after {
            Some(after) => after.clone(),
            None => i.checked_sub(1).into_iter().collect(),
        }
    }

    /// How many steps may be under way at once.
    pub fn parallel_bound(&self) -> usize {
        self.max_parallel_steps.map_or(1, |n| n.max(1) as usize)
    }

    /// Lowers the parallel bound to the executor's `bound`.
    pub fn bound_parallelism(&mut self, bound: u32) {
        if let Some(n) = &mut self.max_parallel_steps {
            *n = (*n).min(bound).max(1);
        }
    }
}

/// What a saga holds against its mandate; kept in its spec, so in the journal header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MandateHold {
    /// The key id of the principal that signed the mandate.
    pub principal_key: String,
    pub mandate_id: String,
    pub principal: String,
    pub budget: Money,
    pub max_sagas: Option<u32>,
    /// SHA-256 of the mandate's signed content: another document under the same id is
    /// not the same mandate.
    pub document_sha256: String,
    /// The plan's worst-case spend, reserved at acceptance.
    pub reserved_minor: u64,
    /// What each step spends at most, by step position.
    pub spend_minor: Vec<u64>,
}

impl MandateHold {
    /// The hold of a validated plan signed under a mandate of `principal_key`.
    pub fn of(
        plan: &Plan,
        raw_mandate: &Value,
        principal_key: &str,
        spend_minor: Vec<u64>,
    ) -> Self {
        let document = shared_types::signing::signing_payload(raw_mandate).unwrap_or_default();
        Self {
            principal_key: principal_key.to_owned(),
            mandate_id: plan.mandate.mandate_id.clone(),
            principal: plan.mandate.principal.clone(),
            budget: plan.mandate.budget.clone(),
            max_sagas: plan.mandate.max_sagas,
            document_sha256: hex(&Sha256::digest(&document)),
            reserved_minor: spend_minor.iter().fold(0, |a, b| a.saturating_add(*b)),
            spend_minor,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
