//! The static plan validator: every check of docs/plans-and-mandates.md, against the curated catalog
//! and the trusted planner keys, before a single side effect. It reports all violations,
//! in a deterministic order (plan-level first, then by step, then by code).

mod order;
mod references;
mod timing;

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use timing::{
    call_worst_ms, makespan_bound_ms, undo_deadline_ms, undo_deadlines_ms, worst_path_ms,
};

use crate::catalog::Catalog;
use crate::dependencies::Dependencies;
use crate::error::{Error, Result};
use crate::expr::{self, EvalContext, Source};
use crate::money::Money;
use crate::plan::{MAX_SUPERSEDES_REASON_CHARS, Plan, Step, Supersedes, idempotency_key};
use crate::reversibility::{ReversibilityClass, SkillDeclaration, SpendDeclaration};
use crate::signing::{TrustStore, VerifiedSignatures, signer_kids, signing_payload};
use order::{check_pivot, check_undo_ttls, dependency_violation};

/// The stable violation codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ViolationCode {
    SignatureInvalid,
    SignerUntrusted,
    SchemaInvalid,
    DuplicateStepId,
    UnknownDependency,
    DependencyCycle,
    DependencyOrder,
    UnknownSkill,
    ClassMismatch,
    CompensationNotDeclared,
    IrreversibleWithCompensation,
    PivotOrdering,
    UndoTtlTooShort,
    MandateExceeded,
    MandateExpired,
    BadReference,
    ArgsInvalid,
    IdempotencyKeyMismatch,
    PlanConflict,
    MandateUntrusted,
    MandateScope,
    MandateExhausted,
    MandateRevoked,
}

impl ViolationCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SignatureInvalid => "SIGNATURE_INVALID",
            Self::SignerUntrusted => "SIGNER_UNTRUSTED",
            Self::SchemaInvalid => "SCHEMA_INVALID",
            Self::DuplicateStepId => "DUPLICATE_STEP_ID",
            Self::UnknownDependency => "UNKNOWN_DEPENDENCY",
            Self::DependencyCycle => "DEPENDENCY_CYCLE",
            Self::DependencyOrder => "DEPENDENCY_ORDER",
            Self::UnknownSkill => "UNKNOWN_SKILL",
            Self::ClassMismatch => "CLASS_MISMATCH",
            Self::CompensationNotDeclared => "COMPENSATION_NOT_DECLARED",
            Self::IrreversibleWithCompensation => "IRREVERSIBLE_WITH_COMPENSATION",
            Self::PivotOrdering => "PIVOT_ORDERING",
            Self::UndoTtlTooShort => "UNDO_TTL_TOO_SHORT",
            Self::MandateExceeded => "MANDATE_EXCEEDED",
            Self::MandateExpired => "MANDATE_EXPIRED",
            Self::BadReference => "BAD_REFERENCE",
            Self::ArgsInvalid => "ARGS_INVALID",
            Self::IdempotencyKeyMismatch => "IDEMPOTENCY_KEY_MISMATCH",
            Self::PlanConflict => "PLAN_CONFLICT",
            Self::MandateUntrusted => "MANDATE_UNTRUSTED",
            Self::MandateScope => "MANDATE_SCOPE",
            Self::MandateExhausted => "MANDATE_EXHAUSTED",
            Self::MandateRevoked => "MANDATE_REVOKED",
        }
    }

    pub const ALL: [ViolationCode; 23] = [
        Self::SignatureInvalid,
        Self::SignerUntrusted,
        Self::SchemaInvalid,
        Self::DuplicateStepId,
        Self::UnknownDependency,
        Self::DependencyCycle,
        Self::DependencyOrder,
        Self::UnknownSkill,
        Self::ClassMismatch,
        Self::CompensationNotDeclared,
        Self::IrreversibleWithCompensation,
        Self::PivotOrdering,
        Self::UndoTtlTooShort,
        Self::MandateExceeded,
        Self::MandateExpired,
        Self::BadReference,
        Self::ArgsInvalid,
        Self::IdempotencyKeyMismatch,
        Self::PlanConflict,
        Self::MandateUntrusted,
        Self::MandateScope,
        Self::MandateExhausted,
        Self::MandateRevoked,
    ];
}

impl fmt::Display for ViolationCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One violation: its code, the step it concerns (if any), and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub code: ViolationCode,
    pub step: Option<String>,
    pub message: String,
}

/// The result of validating one plan.
#[derive(Debug, Clone)]
pub struct Report {
    /// The typed plan, when the JSON typed at all.
    pub plan: Option<Plan>,
    pub violations: Vec<Violation>,
    /// The key id of the principal whose signature on the plan's mandate verified.
    pub mandate_signer: Option<String>,
    /// The key id of the trusted planner whose signature on the plan verified.
    pub plan_signer: Option<String>,
}

impl Report {
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The most steps of one saga under way at once, unless the executor is told otherwise
/// (a plan's `maxParallelSteps` may only lower it).
pub const DEFAULT_MAX_PARALLEL_STEPS: u32 = 8;

/// Checks plans against a catalog and the planner keys this party trusts.
pub struct PlanValidator {
    catalog: Catalog,
    planner_keys: TrustStore,
    /// The principals whose mandates are honoured; none until `with_principals`.
    principal_keys: TrustStore,
    /// Compiled input schemas by agent, then skill.
    input_schemas: HashMap<String, HashMap<String, jsonschema::Validator>>,
    /// The principals' mandate signatures verified already.
    verified_mandates: VerifiedSignatures,
    /// The most steps of a saga under way at once (a plan may ask for fewer).
    max_parallel_steps: u32,
}

impl fmt::Debug for PlanValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlanValidator")
            .field("agents", &self.catalog.agents.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl PlanValidator {
    /// Compiles every input schema once. A schema that does not compile is a card error.
    pub fn new(catalog: Catalog, planner_keys: TrustStore) -> Result<Self> {
        let mut input_schemas: HashMap<String, HashMap<String, jsonschema::Validator>> =
            HashMap::new();
        for (agent, entry) in &catalog.agents {
            for (skill, declaration) in &entry.skills {
                if let Some(schema) = &declaration.input_schema {
                    let compiled = jsonschema::options()
                        .should_validate_formats(true)
                        .build(schema)
                        .map_err(|e| {
                            Error::Card(format!(
                                "{agent}/{skill}: inputSchema does not compile: {e}"
                            ))
                        })?;
                    input_schemas
                        .entry(agent.clone())
                        .or_default()
                        .insert(skill.clone(), compiled);
                }
            }
        }
        Ok(Self {
            catalog,
            planner_keys,
            principal_keys: TrustStore::new(),
            input_schemas,
            verified_mandates: VerifiedSignatures::default(),
            max_parallel_steps: DEFAULT_MAX_PARALLEL_STEPS,
        })
    }

    /// Times plans as run with at most `max` steps under way at once (at least 1), the
    /// executor's bound: `DEFAULT_MAX_PARALLEL_STEPS` unless set.
    pub fn with_max_parallel_steps(mut self, max: u32) -> Self {
        self.max_parallel_steps = max.max(1);
        self
    }

    /// The most steps of `plan` under way at once: the lower of the plan's
    /// `maxParallelSteps` and this validator's bound, at least 1.
    pub fn max_parallel_steps(&self, plan: &Plan) -> u32 {
        plan.max_parallel_steps
            .map_or(self.max_parallel_steps, |m| m.min(self.max_parallel_steps))
            .max(1)
    }

    /// Honours mandates signed by these principals (without, every mandate is refused
    /// `MANDATE_UNTRUSTED`).
    pub fn with_principals(mut self, principal_keys: TrustStore) -> Self {
        self.principal_keys = principal_keys;
        self
    }

    /// What each step of `plan` spends at most, in the mandate's minor units (0 for a
    /// step that spends nothing, or whose spend the validator refused).
    pub fn step_spends(&self, plan: &Plan) -> Vec<u64> {
        plan.steps
            .iter()
            .map(|step| {
                let declaration = self.catalog.declaration(&step.agent, &step.skill);
                match step_spend(step, declaration) {
                    Some(Ok(m)) => m.amount_minor.get(),
                    _ => 0,
                }
            })
            .collect()
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Validates a plan as received: signature over the raw JSON first, then its type,
    /// then every semantic check. `now` is the validation time (the validator reads no clock).
    pub fn validate(&self, plan: &Value, now: DateTime<Utc>) -> Report {
        self.validate_verified(plan, self.verify(plan), now)
    }

    /// The planner signature on a plan as received: the trusted key id that signed it.
    pub fn verify(&self, plan: &Value) -> Result<String> {
        self.planner_keys.verify(plan)
    }

    /// `validate`, given what `verify` said of the same plan (a caller that measures or
    /// reuses the signature check apart).
    pub fn validate_verified(
        &self,
        plan: &Value,
        signature: Result<String>,
        now: DateTime<Utc>,
    ) -> Report {
        let mut violations = Vec::new();
        let mut planner_kid = None;
        match signature {
            Ok(kid) => planner_kid = Some(kid),
            Err(Error::SignerUntrusted { kids }) => violations.push(Violation {
                code: ViolationCode::SignerUntrusted,
                step: None,
                message: format!(
                    "the plan is signed by {kids}, which is not a trusted planner key"
                ),
            }),
            Err(e) => violations.push(Violation {
                code: ViolationCode::SignatureInvalid,
                step: None,
                message: format!("the plan's signature does not verify: {e}"),
            }),
        }
        // Transports that carry JSON numbers as doubles (A2A data parts) turn 25000 into
        // 25000.0; the signature cannot tell them apart, so neither does typing.
        let typed = if crate::json::has_integral_doubles(plan) {
            let mut normalized = plan.clone();
            crate::json::normalize_integers(&mut normalized);
            Plan::from_value(&normalized)
        } else {
            Plan::from_value(plan)
        };
        let mut mandate_signer = None;
        let typed = match typed {
            Ok(typed) => {
                violations.extend(self.check(&typed, now));
                match self.check_grant(plan.get("mandate"), &typed, planner_kid.as_deref()) {
                    Ok(signer) => mandate_signer = Some(signer),
                    Err(v) => violations.push(v),
                }
                Some(typed)
            }
            Err(e) => {
                violations.push(Violation {
                    code: ViolationCode::SchemaInvalid,
                    step: None,
                    message: format!("the plan does not have the plan artifact's shape: {e}"),
                });
                None
            }
        };
        sort_violations(&mut violations, typed.as_ref());
        Report {
            plan: typed,
            violations,
            mandate_signer,
            plan_signer: planner_kid,
        }
    }

    /// The principal's signature on the mandate as received, and that the plan's signer
    /// is among its grantees: the principal's key id, or why the grant does not hold.
    fn check_grant(
        &self,
        mandate: Option<&Value>,
        plan: &Plan,
        planner_kid: Option<&str>,
    ) -> std::result::Result<String, Violation> {
        let untrusted = |message: String| Violation {
            code: ViolationCode::MandateUntrusted,
            step: None,
            message,
        };
        let mandate = mandate.ok_or_else(|| untrusted("the plan carries no mandate".into()))?;
        let signer = crate::mandate::verify_grant_remembering(
            mandate,
            &self.principal_keys,
            &self.planner_keys,
            Some(&self.verified_mandates),
        )
            .map_err(|why| {
                untrusted(format!(
                    "the mandate is not a principal's grant: {why}; ask the principal for a signed mandate"
                ))
            })?;
        // An unsigned or untrusted plan is refused for that; it is no grantee of anything.
        if let Some(kid) = planner_kid
            && !plan.mandate.grantees.iter().any(|g| g == kid)
        {
            return Err(untrusted(format!(
                "mandate {:?} is not granted to planner key {kid:?} (it is granted to {})",
                plan.mandate.mandate_id,
                plan.mandate.grantees.join(", ")
            )));
        }
        Ok(signer)
    }

    /// Every check that does not involve the signature, on a typed plan.
    pub fn check(&self, plan: &Plan, now: DateTime<Utc>) -> Vec<Violation> {
        let mut out = Vec::new();
        let mut push = |code, step: Option<&Step>, message: String| {
            out.push(Violation {
                code,
                step: step.map(|s| s.id.clone()),
                message,
            })
        };
        check_identity(plan, &mut push);

        // Step ids and where each one stands, for references (a repeated id names its
        // first step, as in `after`).
        let mut positions: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, step) in plan.steps.iter().enumerate() {
            if positions.entry(step.id.as_str()).or_insert(i) != &i {
                push(
                    ViolationCode::DuplicateStepId,
                    Some(step),
                    format!(
                        "step id {:?} is used more than once; give every step its own id",
                        step.id
                    ),
                );
            }
        }

        let dependencies = Dependencies::of(plan);
        for problem in dependencies.problems() {
            let (code, message) = dependency_violation(plan, problem);
            push(code, plan.steps.get(problem.step()), message);
        }

        let declarations: Vec<Option<&SkillDeclaration>> = plan
            .steps
            .iter()
            .map(|step| {
                let found = self.catalog.declaration(&step.agent, &step.skill);
                if found.is_none() {
                    let hint = match self.catalog.agents.get(&step.agent) {
                        None => format!("no agent {:?} is registered", step.agent),
                        Some(a) => format!(
                            "agent {:?} has no skill {:?} (it has: {})",
                            step.agent,
                            step.skill,
                            a.skills.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    };
                    push(
                        ViolationCode::UnknownSkill,
                        Some(step),
                        format!("{hint}; use a skill from the executor's catalog"),
                    );
                }
                found
            })
            .collect();

        for (i, (step, declaration)) in plan.steps.iter().zip(&declarations).enumerate() {
            let expected_key = idempotency_key(&plan.saga_id, &step.id);
            if step.idempotency_key != expected_key {
                push(
                    ViolationCode::IdempotencyKeyMismatch,
                    Some(step),
                    format!(
                        "idempotencyKey is {:?}; it must be {expected_key:?} (sagaId:stepId)",
                        step.idempotency_key
                    ),
                );
            }
            let args = &step.args;
            references::check_step(
                &plan.steps,
                i,
                &positions,
                &dependencies,
                &declarations,
                &mut push,
            );
            if let Some(declaration) = declaration {
                check_reversibility(step, declaration, &mut push);
                self.check_args(step, args, &mut push);
            }
        }

        let max_parallel = self.max_parallel_steps(plan);
        check_pivot(plan, &dependencies, &declarations, &mut push);
        check_undo_ttls(
            plan,
            &dependencies,
            max_parallel,
            &declarations,
            &self.catalog,
            &mut push,
        );
        check_mandate(
            plan,
            &dependencies,
            max_parallel,
            &declarations,
            now,
            &mut push,
        );
        out
    }

    fn check_args(
        &self,
        step: &Step,
        args: &Value,
        push: &mut impl FnMut(ViolationCode, Option<&Step>, String),
    ) {
        let Some(schema) = self
            .input_schemas
            .get(&step.agent)
            .and_then(|s| s.get(&step.skill))
        else {
            return;
        };
        if schema.is_valid(args) {
            return;
        }
        // Values bound at run time are unknown now: errors at or under them are not counted.
        let mut bound_at = Vec::new();
        let _ = expr::for_each_expr(args, &mut |at, _| bound_at.push(at.to_string()));
        let is_bound = |path: &str| {
            bound_at.iter().any(|b| {
                path == b
                    || path
                        .strip_prefix(b.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            })
        };
        for error in schema.iter_errors(args) {
            let path = error.instance_path().as_str();
            if is_bound(path) {
                continue;
            }
            let at = if path.is_empty() {
                "the arguments"
            } else {
                path
            };
            push(
                ViolationCode::ArgsInvalid,
                Some(step),
                format!("{at}: {error} (skill {} inputSchema)", step.skill),
            );
        }
    }
}

/// `supersedes` names another saga by a well-formed id, and says why in bounded text.
fn check_supersedes(
    plan: &Plan,
    superseded: &Supersedes,
    push: &mut impl FnMut(ViolationCode, Option<&Step>, String),
) {
    let mut refuse = |why: String| push(ViolationCode::SchemaInvalid, None, why);
    if !expr::is_valid_id(&superseded.saga_id) {
        refuse(format!(
            "supersedes.sagaId {:?} must be 1-64 of A-Z a-z 0-9 '_' '-'",
            superseded.saga_id
        ));
    } else if superseded.saga_id == plan.saga_id {
        refuse(
            "supersedes.sagaId names this plan's own saga: a new plan takes a new sagaId".into(),
        );
    }
    if superseded.executor_task_id.is_empty() || superseded.executor_task_id.len() > 128 {
        refuse("supersedes.executorTaskId must be 1-128 bytes".into());
    }
    if let Some(step) = &superseded.failed_step
        && !expr::is_valid_id(step)
    {
        refuse(format!(
            "supersedes.failedStep {step:?} must be 1-64 of A-Z a-z 0-9 '_' '-'"
        ));
    }
    if superseded.reason.chars().count() > MAX_SUPERSEDES_REASON_CHARS {
        refuse(format!(
            "supersedes.reason is longer than {MAX_SUPERSEDES_REASON_CHARS} characters; shorten it"
        ));
    }
}

fn check_identity(plan: &Plan, push: &mut impl FnMut(ViolationCode, Option<&Step>, String)) {
    if !expr::is_valid_id(&plan.saga_id) {
        push(
            ViolationCode::SchemaInvalid,
            None,
            format!(
                "sagaId {:?} must be 1-64 of A-Z a-z 0-9 '_' '-'",
                plan.saga_id
            ),
        );
    }
    if plan.plan_version == 0 {
        push(
            ViolationCode::SchemaInvalid,
            None,
            "planVersion starts at 1".into(),
        );
    }
    if plan.max_parallel_steps == Some(0) {
        push(
            ViolationCode::SchemaInvalid,
            None,
            "maxParallelSteps is at least 1 (leave it out for the executor's bound)".into(),
        );
    }
    if let Some(superseded) = &plan.supersedes {
        check_supersedes(plan, superseded, push);
    }
    if plan.steps.is_empty() {
        push(
            ViolationCode::SchemaInvalid,
            None,
            "the plan has no steps".into(),
        );
    }
    for step in &plan.steps {
        if !expr::is_valid_id(&step.id) {
            push(
                ViolationCode::SchemaInvalid,
                Some(step),
                format!("step id {:?} must be 1-64 of A-Z a-z 0-9 '_' '-'", step.id),
            );
        }
    }
}

fn check_reversibility(
    step: &Step,
    declaration: &SkillDeclaration,
    push: &mut impl FnMut(ViolationCode, Option<&Step>, String),
) {
    if step.class != declaration.class {
        push(
            ViolationCode::ClassMismatch,
            Some(step),
            format!(
                "the plan calls {} {}, but the registry declares it {}",
                step.skill,
                step.class.as_str(),
                declaration.class.as_str()
            ),
        );
    }
    let irreversible = declaration.class == ReversibilityClass::Irreversible
        || step.class == ReversibilityClass::Irreversible;
    match (&step.compensation, &declaration.compensation) {
        (Some(_), _) if irreversible => push(
            ViolationCode::IrreversibleWithCompensation,
            Some(step),
            format!(
                "{} is irreversible and may not carry a compensation; remove it",
                step.skill
            ),
        ),
        (Some(planned), Some(declared)) if planned != declared => push(
            ViolationCode::CompensationNotDeclared,
            Some(step),
            format!(
                "the plan's compensation ({} with {}) differs from the registry's ({} with {}); copy the declared one unchanged",
                planned.skill, planned.args, declared.skill, declared.args
            ),
        ),
        (Some(planned), None) => push(
            ViolationCode::CompensationNotDeclared,
            Some(step),
            format!(
                "the plan gives {} a compensation ({}), but the registry declares none; the planner never authors an undo",
                step.skill, planned.skill
            ),
        ),
        (None, Some(declared)) => push(
            ViolationCode::CompensationNotDeclared,
            Some(step),
            format!(
                "the registry declares {} as the compensation of {}; the plan must carry it unchanged",
                declared.skill, step.skill
            ),
        ),
        _ => {}
    }
}

fn check_mandate(
    plan: &Plan,
    dependencies: &Dependencies,
    max_parallel: u32,
    declarations: &[Option<&SkillDeclaration>],
    now: DateTime<Utc>,
    push: &mut impl FnMut(ViolationCode, Option<&Step>, String),
) {
    let mandate = &plan.mandate;
    for problem in mandate.problems() {
        push(
            ViolationCode::SchemaInvalid,
            None,
            format!("the mandate: {problem}"),
        );
    }
    let until = mandate.not_after.to_rfc3339();
    if now < mandate.not_before {
        push(
            ViolationCode::MandateExpired,
            None,
            format!(
                "the mandate is valid from {} only; send the plan then",
                mandate.not_before.to_rfc3339()
            ),
        );
    } else if mandate.not_after <= now {
        push(
            ViolationCode::MandateExpired,
            None,
            format!("the mandate expired at {until}; ask the principal for a new one"),
        );
    } else {
        let forward: Vec<u64> = declarations
            .iter()
            .map(|d| d.map_or(0, call_worst_ms))
            .collect();
        let worst = worst_path_ms(dependencies, &forward, max_parallel);
        let ends = TimeDelta::try_milliseconds(i64::try_from(worst).unwrap_or(i64::MAX))
            .and_then(|d| now.checked_add_signed(d));
        if ends.is_none_or(|end| end > mandate.not_after) {
            push(
                ViolationCode::MandateExpired,
                None,
                format!(
                    "the worst-case path takes {}, which ends after the mandate expires at {until}",
                    human_ms(worst)
                ),
            );
        }
    }

    // A skill the catalog lacks is refused for that (UNKNOWN_SKILL) alone.
    for (step, _) in plan
        .steps
        .iter()
        .zip(declarations)
        .filter(|(_, d)| d.is_some())
    {
        if !mandate.allows(&step.agent, &step.skill) {
            push(
                ViolationCode::MandateScope,
                Some(step),
                format!(
                    "mandate {:?} does not allow {} of agent {:?}; its scope is {}",
                    mandate.mandate_id,
                    step.skill,
                    step.agent,
                    scope_text(mandate)
                ),
            );
        }
    }

    let cap = mandate.saga_cap();
    let cap_name = if mandate.per_saga.is_some() {
        "per-saga cap"
    } else {
        "budget"
    };
    let mut total: u64 = 0;
    for (step, declaration) in plan.steps.iter().zip(declarations) {
        let Some(spent) = step_spend(step, *declaration) else {
            continue;
        };
        match spent {
            Err(why) => push(
                ViolationCode::MandateExceeded,
                Some(step),
                format!("{}: {why}", step.skill),
            ),
            Ok(m) if m.currency != cap.currency => push(
                ViolationCode::MandateExceeded,
                Some(step),
                format!(
                    "{} spends in {}, but the mandate is in {}",
                    step.skill, m.currency, cap.currency
                ),
            ),
            Ok(m) => {
                let before = total;
                total = total.saturating_add(m.amount_minor.get());
                let max = cap.amount_minor.get();
                if total > max && before <= max {
                    push(
                        ViolationCode::MandateExceeded,
                        Some(step),
                        format!(
                            "spend reaches {total} {} minor units at this step, over the mandate's {cap_name} of {max}",
                            m.currency
                        ),
                    );
                }
            }
        }
    }
}

fn scope_text(mandate: &crate::mandate::Mandate) -> String {
    let agents: Vec<String> = mandate
        .scope
        .iter()
        .map(|s| format!("{}: {}", s.agent, s.skills.join(", ")))
        .collect();
    agents.join("; ")
}

/// What `step` spends at most, when its skill declares a spend: the amount, or why it
/// cannot be known before the step runs.
fn step_spend(
    step: &Step,
    declaration: Option<&SkillDeclaration>,
) -> Option<std::result::Result<Money, String>> {
    let spend = declaration.and_then(|d| d.spend.as_ref())?;
    let request = &step.args;
    let ctx = EvalContext {
        request_body: Some(request),
        ..EvalContext::default()
    };
    if bound_at_run_time(request, spend) {
        return Some(Err(
            "its spend depends on a value known only at run time, so the mandate cannot bound it"
                .to_owned(),
        ));
    }
    Some(
        match (
            expr::bind(&spend.amount_minor, &ctx),
            expr::bind(&spend.currency, &ctx),
        ) {
            (Ok(a), Ok(c)) => serde_json::from_value::<Money>(
                serde_json::json!({"amountMinor": a, "currency": c}),
            )
            .map_err(|e| format!("its spend is not an amount in minor units with a currency: {e}")),
            (Err(e), _) | (_, Err(e)) => {
                Err(format!("its spend cannot be read from its arguments: {e}"))
            }
        },
    )
}

/// Whether a spend field reads an argument that is itself bound at run time
/// (`$steps…`): then the amount is not known statically.
fn bound_at_run_time(request: &Value, spend: &SpendDeclaration) -> bool {
    [&spend.amount_minor, &spend.currency]
        .into_iter()
        .any(|field| {
            let Some(Ok(expr::Binding::Expr(e))) = field.as_str().map(expr::parse_string) else {
                return false;
            };
            let Source::RequestBody(pointer) = &e.source else {
                return false;
            };
            pointer
                .resolve(request)
                .and_then(Value::as_str)
                .is_some_and(|s| s.starts_with('$') || s.contains("{$"))
        })
}

pub(super) fn human_ms(ms: u64) -> String {
    if ms == u64::MAX {
        "forever".into()
    } else if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// Plan-level violations first, then by step position, then by code.
fn sort_violations(violations: &mut [Violation], plan: Option<&Plan>) {
    let position = |v: &Violation| -> usize {
        match (&v.step, plan) {
            (Some(id), Some(plan)) => plan
                .steps
                .iter()
                .position(|s| &s.id == id)
                .map_or(usize::MAX, |i| i + 1),
            _ => 0,
        }
    };
    violations.sort_by_key(|v| (position(v), v.code));
}

/// How a received plan relates to one already accepted with the same saga id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resubmission {
    /// Same content, signed by the same keys: return the existing task.
    Identical,
    /// Same `sagaId`, and different content or another `planVersion`.
    Conflict(Violation),
    /// Another saga.
    Unrelated,
}

/// Compares a received plan with an accepted one (`PLAN_CONFLICT`).
pub fn compare_with_accepted(accepted: &Value, received: &Value) -> Resubmission {
    if accepted.get("sagaId") != received.get("sagaId") {
        return Resubmission::Unrelated;
    }
    let saga = received.get("sagaId").unwrap_or(&Value::Null);
    let (was, is) = (accepted.get("planVersion"), received.get("planVersion"));
    if was != is {
        // A saga id carries one plan for good: its steps' idempotency keys name the saga,
        // not the version, so a second version would reuse the first one's keys.
        return Resubmission::Conflict(Violation {
            code: ViolationCode::PlanConflict,
            step: None,
            message: format!(
                "saga {saga} already has a plan (version {}); a saga id carries one plan for good, so sign the new plan under a new sagaId",
                was.unwrap_or(&Value::Null)
            ),
        });
    }
    let same_signers = {
        let (mut a, mut b) = (signer_kids(accepted), signer_kids(received));
        a.sort();
        b.sort();
        a == b
    };
    match (signing_payload(accepted), signing_payload(received)) {
        // Sent again by whoever signed it: the same plan. Signed by another key, it is
        // not, and its sender learns nothing of the accepted plan's task.
        (Ok(a), Ok(b)) if a == b && same_signers => Resubmission::Identical,
        (Ok(a), Ok(b)) if a == b => Resubmission::Conflict(Violation {
            code: ViolationCode::PlanConflict,
            step: None,
            message: format!(
                "saga {saga} was accepted under another signature; sign the new plan under a new sagaId"
            ),
        }),
        _ => Resubmission::Conflict(Violation {
            code: ViolationCode::PlanConflict,
            step: None,
            message: format!(
                "saga {saga} version {} was already accepted with different content; sign the new plan under a new sagaId",
                is.unwrap_or(&Value::Null)
            ),
        }),
    }
}

#[cfg(test)]
mod tests;
