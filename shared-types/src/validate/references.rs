//! `BAD_REFERENCE`: what a step's expressions read must exist before the first effect.
//! A plan argument may read the result of a step it waits for, directly or through
//! others (listed earlier is not enough: a step it does not wait for may not have
//! succeeded yet when it is called), and only a member that step's
//! skill declares in its `outputSchema` (see `expr::check_pointer` for the rules); the
//! compensation that will run for a step (the registry's) may read only what the step's
//! own schemas declare. A misspelt pointer would otherwise be found unresolved at run
//! time, possibly after the pivot, where only a person can finish the saga.

use std::collections::BTreeMap;

use crate::dependencies::Dependencies;
use crate::expr::{self, Source};
use crate::plan::Step;
use crate::reversibility::SkillDeclaration;

use super::ViolationCode;

/// Checks every expression of the step at `index` of `steps`. `positions` maps step ids
/// to their index, `dependencies` is the plan's order; `declarations` are the
/// registry's, by plan position.
pub(super) fn check_step(
    steps: &[Step],
    index: usize,
    positions: &BTreeMap<&str, usize>,
    dependencies: &Dependencies,
    declarations: &[Option<&SkillDeclaration>],
    push: &mut impl FnMut(ViolationCode, Option<&Step>, String),
) {
    let step = &steps[index];
    let mut problems = Vec::new();
    // The steps this one waits for, found once, when an argument reads one.
    let mut waited_for: Option<Vec<bool>> = None;
    let walked = expr::for_each_expr(&step.args, &mut |at, e| {
        match &e.source {
        Source::StepResponseBody {
            step: target,
            pointer,
        } => match positions.get(target.as_str()) {
            None => problems.push(format!(
                "argument '{at}' uses {e}, but there is no step {target:?}"
            )),
            Some(&j) if j >= index => problems.push(format!(
                "argument '{at}' uses {e}, but step {target:?} does not run before this one"
            )),
            Some(&j)
                if !(dependencies.is_sequence()
                    || waited_for
                        .get_or_insert_with(|| dependencies.ancestors(index))
                        .get(j)
                        .copied()
                        .unwrap_or(false)) =>
            {
                problems.push(format!(
                    "argument '{at}' uses {e}, but step {target:?} is not among the steps this one waits for \
                     (directly or through others), so it may not have run yet; add {target:?} to this step's after"
                ));
            }
            Some(&j) => {
                let Some(producer) = declarations.get(j).copied().flatten() else {
                    return; // UNKNOWN_SKILL says why.
                };
                let Some(schema) = &producer.output_schema else {
                    return;
                };
                if let Err(divergence) = expr::check_pointer(schema, pointer) {
                    problems.push(format!(
                        "argument '{at}' uses {:?}, but the outputSchema of {} (step {target}) does not declare it: {divergence}",
                        e.to_string(),
                        steps[j].skill
                    ));
                }
            }
        },
        Source::RequestBody(_) | Source::ResponseBody(_) => problems.push(format!(
            "argument '{at}' uses {e}; plan arguments may read earlier steps ($steps.<id>.response.body), \
             $saga.id and $step.*, not the step's own request or response"
        )),
        Source::SagaId | Source::StepId | Source::StepIdempotencyKey => {}
    }
    });
    if let Err((at, e)) = walked {
        problems.push(format!("argument '{at}': {e}"));
    }
    // The undo that runs is the registry's (the plan's copy must equal it): a curated
    // card with such a binding is refused at registration, so this holds for catalogs
    // assembled any other way.
    if let Some(declaration) = declarations.get(index).copied().flatten() {
        for problem in declaration.reference_problems(&step.skill) {
            problems.push(format!(
                "the registry's declaration cannot be bound: {problem}"
            ));
        }
    }
    for problem in problems {
        push(ViolationCode::BadReference, Some(step), problem);
    }
}
