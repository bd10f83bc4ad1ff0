//! Planning backends behind one trait: the deterministic rules (the default, offline) and,
//! in `llm`, a model asked for a draft. Either way the result is a typed plan that has
//! passed every static check except the signature, which the agent adds and checks.

use async_trait::async_trait;
use shared_types::{Catalog, Plan, PlanValidator, Violation, ViolationCode};

use crate::compose::{PlanContext, rules_plan};
use crate::error::{Error, Result};
use crate::goal::Goal;
use crate::replan::Replan;
use crate::templates::Templates;

/// What a backend plans from.
#[derive(Debug, Clone, Copy)]
pub struct PlanRequest<'a> {
    pub goal: &'a Goal,
    pub catalog: &'a Catalog,
    /// A validator over the same catalog, trusting the planner's own key.
    pub validator: &'a PlanValidator,
    pub ctx: &'a PlanContext,
    /// Set when an earlier plan for the goal unwound, or was refused for a reason a new
    /// plan may avoid: what failed (the refusals), and that plan.
    pub replan: Option<&'a Replan>,
}

/// Turns a goal into an unsigned plan.
#[async_trait]
pub trait PlanBackend: Send + Sync + 'static {
    /// The backend's name for logs and the card (`rules-v1`, `llm:<model>`).
    fn name(&self) -> String;

    /// Composes a plan that validates (signature aside). `Error::Unsatisfiable` when the
    /// goal cannot be planned; `DraftsRefused` when no draft of a model passed,
    /// `Backend` when the model's server failed; `Defect` when the backend produced an
    /// invalid plan.
    async fn plan(&self, request: PlanRequest<'_>) -> Result<Plan>;
}

/// One violation per line: `CODE step: message`.
pub fn describe_violations(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            format!(
                "{} {}: {}",
                v.code,
                v.step.as_deref().unwrap_or("-"),
                v.message
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The deterministic planner (`rules-v1`): goal templates, bound and ordered from the
/// catalog.
#[derive(Debug, Clone, Default)]
pub struct RulesBackend {
    pub templates: Templates,
}

impl RulesBackend {
    pub fn new(templates: Templates) -> Self {
        Self { templates }
    }

    /// The templates to plan `goal` again with: its template with the skill that failed
    /// in the superseded plan replaced by the template's alternative. `None` when there
    /// is none (the same plan comes out, and the planner tries nothing more).
    fn instead_of_failed(&self, goal: &Goal, replan: &Replan) -> Option<Templates> {
        let failed = replan.supersedes.failed_step.as_deref()?;
        let skill = replan.previous["steps"]
            .as_array()?
            .iter()
            .find(|s| s["id"] == failed)?["skill"]
            .as_str()?;
        let template = self.templates.get(goal.intent.as_deref()?)?;
        Some(self.templates.with(template.instead_of(skill)?))
    }
}

#[async_trait]
impl PlanBackend for RulesBackend {
    fn name(&self) -> String {
        crate::compose::RULES_MODEL.into()
    }

    async fn plan(&self, request: PlanRequest<'_>) -> Result<Plan> {
        let replanned = request
            .replan
            .and_then(|r| self.instead_of_failed(request.goal, r));
        let templates = replanned.as_ref().unwrap_or(&self.templates);
        let mut plan = rules_plan(request.goal, templates, request.catalog, request.ctx)?;
        let mut violations = request.validator.check(&plan, request.ctx.now);
        // Branches during which an undo's deadline could pass (a slow step running beside
        // a step whose undo expires): the steps one after another, as listed, when that
        // is timed to fit.
        let too_slow = |violations: &[Violation]| {
            violations
                .iter()
                .any(|v| v.code == ViolationCode::UndoTtlTooShort)
        };
        if too_slow(&violations) && plan.steps.iter().any(|s| s.after.is_some()) {
            let mut sequence = plan.clone();
            for step in &mut sequence.steps {
                step.after = None;
            }
            let sequential = request.validator.check(&sequence, request.ctx.now);
            if !too_slow(&sequential) {
                plan = sequence;
                violations = sequential;
            }
        }
        if violations.is_empty() {
            return Ok(plan);
        }
        // Arguments that fail a schema come from the goal's parameters; a plan outside its
        // mandate (scope, cap, window) from a goal the principal did not grant. Anything
        // else is the planner's own mistake.
        let from_mandate = |code| {
            matches!(
                code,
                ViolationCode::MandateExceeded
                    | ViolationCode::MandateExpired
                    | ViolationCode::MandateScope
            )
        };
        let from_goal = violations
            .iter()
            .all(|v| v.code == ViolationCode::ArgsInvalid || from_mandate(v.code));
        let list = describe_violations(&violations);
        Err(if from_goal {
            let mandate = format!("mandate {:?}", plan.mandate.mandate_id);
            let what = match (
                violations.iter().any(|v| from_mandate(v.code)),
                violations
                    .iter()
                    .any(|v| v.code == ViolationCode::ArgsInvalid),
            ) {
                (true, false) => mandate,
                (false, _) => "the executor's catalog".to_owned(),
                (true, true) => format!("the executor's catalog or {mandate}"),
            };
            Error::Unsatisfiable(format!("the goal's parameters do not fit {what}:\n{list}"))
        } else {
            Error::Defect(format!(
                "the planner composed a plan that does not validate (a planner bug; it was not submitted):\n{list}"
            ))
        })
    }
}
