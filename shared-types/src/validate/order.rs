//! The checks over the plan's partial order: its `after` members (`UNKNOWN_DEPENDENCY`,
//! `DEPENDENCY_CYCLE`, `DEPENDENCY_ORDER`), the steps around the point of no return
//! (`PIVOT_ORDERING`), and how long each undo may have to wait (`UNDO_TTL_TOO_SHORT`).

use crate::catalog::Catalog;
use crate::dependencies::{Dependencies, DependencyProblem};
use crate::plan::{Plan, Step};
use crate::reversibility::{ReversibilityClass, SkillDeclaration};

use super::timing::*;
use super::{ViolationCode, human_ms};

/// The violation for one problem of the plan's `after` members, saying what to do.
pub(super) fn dependency_violation(
    plan: &Plan,
    problem: &DependencyProblem,
) -> (ViolationCode, String) {
    let id = |i: usize| plan.steps.get(i).map_or("?", |s| s.id.as_str());
    match problem {
        DependencyProblem::Unknown { id: name, .. } => (
            ViolationCode::UnknownDependency,
            format!(
                "after names {name:?}, which is no step of this plan; name only ids of the plan's steps"
            ),
        ),
        DependencyProblem::Itself { step } => (
            ViolationCode::UnknownDependency,
            format!(
                "after names the step itself ({:?}); a step cannot wait for itself, so remove it",
                id(*step)
            ),
        ),
        DependencyProblem::Repeated { id: name, .. } => (
            ViolationCode::UnknownDependency,
            format!("after names {name:?} more than once; name each step once"),
        ),
        DependencyProblem::Later { step, waits_for } => (
            ViolationCode::DependencyOrder,
            format!(
                "{} waits for {}, which is listed after it; list every step after the steps it waits for",
                id(*step),
                id(*waits_for)
            ),
        ),
        DependencyProblem::Cycle { steps } => {
            let mut circle: Vec<&str> = steps.iter().map(|&i| id(i)).collect();
            circle.extend(steps.first().map(|&i| id(i)));
            (
                ViolationCode::DependencyCycle,
                format!(
                    "the steps {} wait for each other in a circle (each must run before the next), so none of them \
                     can start; remove one of these waits from the steps' after",
                    circle.join(" → ")
                ),
            )
        }
    }
}

/// Before the pivot only compensable or read-only steps; the pivot is the first
/// irreversible step; after it only retriable steps. Without an irreversible step, the
/// first retriable step that changes something is the point of no return all the same.
/// Over the partial order, "before" and "after" are the steps the point of no return
/// waits for and the steps that wait for it. Any other step would run alongside it,
/// and is refused: it could fail once the point of no return is passed, or have changed
/// something for good when the point of no return fails.
pub(super) fn check_pivot(
    plan: &Plan,
    dependencies: &Dependencies,
    declarations: &[Option<&SkillDeclaration>],
    push: &mut impl FnMut(ViolationCode, Option<&Step>, String),
) {
    let first_irreversible = declarations
        .iter()
        .position(|d| d.is_some_and(|d| d.class == ReversibilityClass::Irreversible));
    if plan.pivot_index != first_irreversible {
        let expected = first_irreversible
            .map_or("null (no step is irreversible)".to_owned(), |i| {
                format!("{i} (step {})", plan.steps[i].id)
            });
        let found = plan
            .pivot_index
            .map_or("null".to_owned(), |i| i.to_string());
        push(
            ViolationCode::PivotOrdering,
            None,
            format!("pivotIndex is {found}; the first irreversible step makes it {expected}"),
        );
    }
    let Some(no_return) = declarations
        .iter()
        .position(|d| d.is_some_and(|d| !d.may_precede_pivot()))
    else {
        return;
    };
    let turning = &plan.steps[no_return];
    let before = dependencies.ancestors(no_return);
    let after = dependencies.descendants(no_return);
    for (i, (step, declaration)) in plan.steps.iter().zip(declarations).enumerate() {
        let Some(declaration) = declaration else {
            continue;
        };
        if i == no_return {
            continue;
        }
        if before[i] {
            if !declaration.may_precede_pivot() {
                push(
                    ViolationCode::PivotOrdering,
                    Some(step),
                    format!(
                        "{} is {} but {} ({}), which cannot be undone, waits for it; only compensable or \
                         read-only steps may run before it, so make this step wait for {} instead",
                        step.skill,
                        declaration.class.as_str(),
                        turning.id,
                        turning.skill,
                        turning.id
                    ),
                );
            }
        } else if after[i] {
            if declaration.class != ReversibilityClass::Retriable {
                push(
                    ViolationCode::PivotOrdering,
                    Some(step),
                    format!(
                        "{} is {} but comes after {} ({}), which cannot be undone; only retriable steps may follow it, \
                         so move this step earlier",
                        step.skill,
                        declaration.class.as_str(),
                        turning.id,
                        turning.skill
                    ),
                );
            }
        } else {
            push(
                ViolationCode::PivotOrdering,
                Some(step),
                format!(
                    "{} runs alongside {} ({}), which cannot be undone: neither waits for the other; \
                     make it wait for {}, or make {} wait for it",
                    step.skill, turning.id, turning.skill, turning.id, turning.id
                ),
            );
        }
    }
}

pub(super) fn check_undo_ttls(
    plan: &Plan,
    dependencies: &Dependencies,
    max_parallel: u32,
    declarations: &[Option<&SkillDeclaration>],
    catalog: &Catalog,
    push: &mut impl FnMut(ViolationCode, Option<&Step>, String),
) {
    if plan.steps.is_empty() {
        return;
    }
    let forward: Vec<u64> = declarations
        .iter()
        .map(|d| d.map_or(0, call_worst_ms))
        .collect();
    let undo: Vec<u64> = plan
        .steps
        .iter()
        .zip(declarations)
        .map(|(step, d)| {
            d.and_then(|d| d.compensation.as_ref())
                .and_then(|c| catalog.declaration(&step.agent, &c.skill))
                .map_or(0, call_worst_ms)
        })
        .collect();
    let last_unwinding = plan
        .pivot_index
        .unwrap_or(plan.steps.len() - 1)
        .min(plan.steps.len() - 1);
    // A sequence at once, in one pass; a partial order step by step (only the steps
    // whose undo expires).
    let sequence = dependencies
        .is_sequence()
        .then(|| undo_deadlines_ms(&forward, &undo, last_unwinding));
    for (i, (step, declaration)) in plan.steps.iter().zip(declarations).enumerate() {
        let Some(ttl) = declaration.and_then(|d| d.undo_ttl_seconds) else {
            continue;
        };
        let worst_ms = match &sequence {
            Some(deadlines) => deadlines[i],
            None => undo_deadline_ms(
                dependencies,
                &forward,
                &undo,
                last_unwinding,
                max_parallel,
                i,
            ),
        };
        if worst_ms > ttl.saturating_mul(1000) {
            push(
                ViolationCode::UndoTtlTooShort,
                Some(step),
                format!(
                    "{}'s undo expires {ttl} s after it succeeds, but its compensation may be needed up to {} \
                     later (worst case of the steps that may still run after it, and of their undos); move it \
                     later (make it wait for more of the other steps), or shorten the steps in between",
                    step.skill,
                    human_ms(worst_ms)
                ),
            );
        }
    }
}
