//! The deterministic planner (offline, no model): from a goal template and the executor's
//! catalog alone, it binds each skill's inputs, orders the steps and fills in everything
//! the catalog declares. Also the assembly every backend shares: classes and
//! compensations copied from the catalog, idempotency keys, the pivot and the mandate.
//!
//! Binding: a skill's required input `n` (under the template's alias, if any) is bound
//! from the goal parameter of that name when there is one, otherwise from the one other
//! step whose `outputSchema` has a property of that name (as
//! `$steps.<id>.response.body#/<name>`); optional inputs are bound from parameters only.
//! Ordering: among the steps whose inputs are available, read-only checks go first, then
//! compensable steps, then irreversible ones, then retriable steps that change something;
//! ties keep the template's order. So irreversible steps land as late as their
//! dependencies allow, and read-only checks as early as theirs allow.
//! Branches: a step waits for the steps whose outputs it binds, and a step that changes
//! something also for the read-only checks listed before it; the point of no return
//! (the first step that may not precede a pivot) also waits for every step listed
//! before it, and every step listed after it waits for it. Steps that need nothing of
//! each other run side by side. Each step's `after` names what it waits for, waits
//! implied by others left out; a plan whose steps each wait for the one before carries
//! no `after` at all (see `partial_order`).
//! Mandate: the principal's signed mandate the plan runs under (`PlanContext::mandate`),
//! copied unchanged; a goal's `maxSpend` only narrows what the plan may spend (a plan
//! that would spend more, or in another currency, is refused). Whether the plan fits the
//! mandate (scope, per-saga cap, window) is the validator's check.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, SubsecRound, Utc};
use serde_json::{Map, Value, json};
use shared_types::expr::{self, EvalContext, escape_token};
use shared_types::plan::idempotency_key;
use shared_types::{
    AuthoredBy, Catalog, Mandate, Plan, ReversibilityClass, SkillDeclaration, Step, Supersedes,
};

use crate::error::{Error, Result};
use crate::goal::Goal;
use crate::templates::{GoalTemplate, Templates};

/// The model id the deterministic planner records in `authoredBy`.
pub const RULES_MODEL: &str = "rules-v1";

/// Identity and time of one plan.
#[derive(Debug, Clone)]
pub struct PlanContext {
    pub saga_id: String,
    /// The planner's id (its key's kid), recorded as `authoredBy.agent`.
    pub planner_id: String,
    pub now: DateTime<Utc>,
    /// The principal's mandate the plan runs under (the agent embeds the signed
    /// document itself, exactly as received).
    pub mandate: Mandate,
    /// The saga this plan replaces, when the goal is planned again (`supersedes`).
    pub supersedes: Option<Supersedes>,
}

/// A fresh saga id: `sg_` and a UUIDv7 in hex (time-ordered, 35 characters).
pub fn new_saga_id() -> String {
    format!("sg_{}", uuid::Uuid::now_v7().simple())
}

/// A step as a backend chose it, before the catalog's declarations are copied in.
#[derive(Debug, Clone, PartialEq)]
pub struct Chosen {
    pub id: String,
    pub agent: String,
    pub skill: String,
    pub args: Value,
    /// The steps it waits for (`after`); `None`: the one before it.
    pub after: Option<Vec<String>>,
}

/// Turns chosen steps into a plan: class and compensation copied exactly from the
/// catalog, `idempotencyKey` = `sagaId:stepId`, `pivotIndex` at the first irreversible
/// step, and the mandate (see the module documentation).
pub fn assemble(
    ctx: &PlanContext,
    goal: &Goal,
    chosen: Vec<Chosen>,
    catalog: &Catalog,
    authored_by: AuthoredBy,
) -> Result<Plan> {
    let mut steps = Vec::with_capacity(chosen.len());
    let mut declarations = Vec::with_capacity(chosen.len());
    for c in chosen {
        let declaration = catalog.declaration(&c.agent, &c.skill).ok_or_else(|| {
            Error::Unsatisfiable(format!(
                "the executor's catalog has no skill {} of agent {}",
                c.skill, c.agent
            ))
        })?;
        steps.push(Step {
            idempotency_key: idempotency_key(&ctx.saga_id, &c.id),
            id: c.id,
            agent: c.agent,
            skill: c.skill,
            args: c.args,
            class: declaration.class,
            compensation: declaration.compensation.clone(),
            after: c.after,
        });
        declarations.push(declaration);
    }
    let pivot_index = declarations
        .iter()
        .position(|d| d.class == ReversibilityClass::Irreversible);
    check_max_spend(goal, &steps, &declarations)?;
    Ok(Plan {
        saga_id: ctx.saga_id.clone(),
        plan_version: 1,
        goal: goal.description(),
        created_at: ctx.now.trunc_subsecs(0),
        authored_by,
        mandate: ctx.mandate.clone(),
        pivot_index,
        max_parallel_steps: None,
        supersedes: ctx.supersedes.clone(),
        steps,
        signatures: Vec::new(),
    })
}

/// What each step spends, summed per currency.
fn spends(steps: &[Step], declarations: &[&SkillDeclaration]) -> Result<BTreeMap<String, u64>> {
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for (step, declaration) in steps.iter().zip(declarations) {
        let Some(spend) = &declaration.spend else {
            continue;
        };
        let ctx = EvalContext {
            request_body: Some(&step.args),
            ..EvalContext::default()
        };
        let unknown = || {
            Error::Unsatisfiable(format!(
                "what {} spends is not known before it runs (its amount and currency must be given, not taken from another step), so no mandate can bound it",
                step.skill
            ))
        };
        let amount = expr::bind(&spend.amount_minor, &ctx).map_err(|_| unknown())?;
        let currency = expr::bind(&spend.currency, &ctx).map_err(|_| unknown())?;
        let (Some(amount), Some(currency)) = (amount.as_u64(), currency.as_str()) else {
            return Err(unknown());
        };
        let total = totals.entry(currency.to_owned()).or_default();
        *total = total.saturating_add(amount);
    }
    Ok(totals)
}

/// Refuses a plan that spends more than the goal's `maxSpend`, or in another currency.
fn check_max_spend(goal: &Goal, steps: &[Step], declarations: &[&SkillDeclaration]) -> Result<()> {
    let Some(max) = &goal.max_spend else {
        return Ok(());
    };
    for (currency, amount) in spends(steps, declarations)? {
        if max.currency.as_str() != currency {
            return Err(Error::Unsatisfiable(format!(
                "the plan spends in {currency}, but maxSpend is in {}",
                max.currency
            )));
        }
        if amount > max.amount_minor.get() {
            return Err(Error::Unsatisfiable(format!(
                "the plan spends {amount} {currency} minor units, over maxSpend {}; raise maxSpend or lower the fee",
                max.amount_minor.get()
            )));
        }
    }
    Ok(())
}

/// A literal parameter must not read as a runtime expression: the executor would bind it.
pub fn check_literal(name: &str, value: &Value) -> Result<()> {
    let mut problem = None;
    let walked = expr::for_each_expr(value, &mut |at, e| {
        problem.get_or_insert_with(|| format!("{e} at '{at}'"));
    });
    let problem = match walked {
        Err((at, _)) => Some(format!("a '$' at '{at}'")),
        Ok(()) => problem,
    };
    match problem {
        None => Ok(()),
        Some(what) => Err(Error::Unsatisfiable(format!(
            "parameter {name} holds {what}; a parameter is a literal value and may not start with '$' or contain '{{$'"
        ))),
    }
}

/// Where one input's value comes from.
#[derive(Debug, Clone)]
enum Source {
    Literal(Value),
    /// An output property of another step (node index).
    Output {
        node: usize,
        property: String,
    },
}

/// The names of an object schema's properties, and which of them are required (in the
/// schema's order).
fn schema_fields(schema: Option<&Value>) -> (Vec<String>, Vec<String>) {
    let properties = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    let required = schema
        .and_then(|s| s.get("required"))
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    (properties, required)
}

/// A parameter given as a string where the schema wants a number or a boolean.
fn coerce(value: &Value, property: Option<&Value>) -> Value {
    let wanted = property.and_then(|p| p.get("type")).and_then(Value::as_str);
    match (value, wanted) {
        (Value::String(s), Some("integer")) => {
            s.trim().parse::<i64>().map_or(value.clone(), |n| json!(n))
        }
        (Value::String(s), Some("boolean")) if s.eq_ignore_ascii_case("true") => json!(true),
        (Value::String(s), Some("boolean")) if s.eq_ignore_ascii_case("false") => json!(false),
        _ => value.clone(),
    }
}

/// Ordering rank: read-only checks, compensable, irreversible, then retriable effects.
fn rank(declaration: &SkillDeclaration) -> u8 {
    match declaration.class {
        ReversibilityClass::Retriable if declaration.read_only => 0,
        ReversibilityClass::Compensable => 1,
        ReversibilityClass::Irreversible => 2,
        ReversibilityClass::Retriable => 3,
    }
}

/// What a goal no template matches is told: the deterministic planner knows its
/// templates only, and a model plans any goal.
pub const MODEL_HINT: &str = "or start the planner with --llm-url URL --llm-model NAME (an OpenAI-compatible server: Ollama, vLLM, llama.cpp, a hosted API) to plan any goal; see docs/planner-and-models.md";

/// The template a goal names, or a sentence saying why there is none.
pub fn template_for<'a>(goal: &Goal, templates: &'a Templates) -> Result<&'a GoalTemplate> {
    match &goal.intent {
        Some(intent) => templates.get(intent).ok_or_else(|| {
            Error::Unsatisfiable(format!(
                "there is no goal template {intent:?}; the planner knows {}; {MODEL_HINT}",
                templates.describe()
            ))
        }),
        None => Err(Error::Unsatisfiable(format!(
            "no goal template matches {:?}; the planner knows {} (or name one in a data part as \"intent\"), {MODEL_HINT}",
            goal.description(),
            templates.describe()
        ))),
    }
}

/// The deterministic planner: the goal's template, bound and ordered from the catalog.
pub fn rules_plan(
    goal: &Goal,
    templates: &Templates,
    catalog: &Catalog,
    ctx: &PlanContext,
) -> Result<Plan> {
    let template = template_for(goal, templates)?;
    if !goal.not_understood.is_empty() {
        return Err(Error::Unsatisfiable(format!(
            "the planner did not understand {}; it reads an intent phrase with its subject, \
             \"contact <email>\", \"fee <amount> <currency>\", \"max spend <amount> <currency>\" \
             and \"dry run\", each between commas (other parameters go in a data part)",
            goal.not_understood
                .iter()
                .map(|c| format!("{c:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    for (name, value) in &goal.params {
        check_literal(name, value)?;
    }

    // The skills of the outcome, each on the one agent that offers it.
    let mut nodes: Vec<(String, String, &SkillDeclaration)> = Vec::new();
    let mut problems = Vec::new();
    for skill in &template.skills {
        let offers: Vec<(&String, &SkillDeclaration)> = catalog
            .agents
            .iter()
            .filter_map(|(agent, a)| a.skills.get(skill).map(|d| (agent, d)))
            .collect();
        match offers.as_slice() {
            [(agent, declaration)] => nodes.push(((*agent).clone(), skill.clone(), declaration)),
            [] => problems.push(format!("no agent in the executor's catalog offers {skill}")),
            many => problems.push(format!(
                "{skill} is offered by {}; the template cannot choose",
                many.iter()
                    .map(|(a, _)| a.as_str())
                    .collect::<Vec<_>>()
                    .join(" and ")
            )),
        }
    }
    if !problems.is_empty() {
        return Err(Error::Unsatisfiable(format!(
            "cannot {}: {}",
            template.summary,
            problems.join("; ")
        )));
    }

    // Bind every input.
    let outputs: Vec<(Vec<String>, Vec<String>)> = nodes
        .iter()
        .map(|(_, _, d)| schema_fields(d.output_schema.as_ref()))
        .collect();
    let mut bindings: Vec<Vec<(String, Source)>> = Vec::new();
    // Missing sources, each with the (skill, input) pairs that needed it.
    let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (i, (_, skill, declaration)) in nodes.iter().enumerate() {
        let schema = declaration.input_schema.as_ref();
        let (properties, required) = schema_fields(schema);
        let property_schema = |name: &str| {
            schema
                .and_then(|s| s.get("properties"))
                .and_then(|p| p.get(name))
        };
        let mut bound = Vec::new();
        let names: Vec<&String> = required
            .iter()
            .chain(properties.iter().filter(|p| !required.contains(*p)))
            .collect();
        for input in names {
            let source = template.source_of(skill, input);
            if let Some(value) = goal.params.get(source) {
                bound.push((
                    input.clone(),
                    Source::Literal(coerce(value, property_schema(input))),
                ));
                continue;
            }
            if !required.contains(input) {
                continue;
            }
            let producers: Vec<usize> = (0..nodes.len())
                .filter(|&j| j != i && outputs[j].0.iter().any(|p| p == source))
                .collect();
            let producers = if producers.len() > 1 {
                let requiring: Vec<usize> = producers
                    .iter()
                    .copied()
                    .filter(|&j| outputs[j].1.iter().any(|r| r == source))
                    .collect();
                if requiring.is_empty() {
                    producers
                } else {
                    requiring
                }
            } else {
                producers
            };
            match producers.as_slice() {
                [node] => bound.push((
                    input.clone(),
                    Source::Output {
                        node: *node,
                        property: source.to_owned(),
                    },
                )),
                [] => missing
                    .entry(source.to_owned())
                    .or_default()
                    .push(if source == input {
                        skill.clone()
                    } else {
                        format!("{skill} (as {input})")
                    }),
                many => {
                    return Err(Error::Unsatisfiable(format!(
                        "{skill} needs {source}, which {} all produce; give {source} as a parameter",
                        many.iter()
                            .map(|&j| nodes[j].1.as_str())
                            .collect::<Vec<_>>()
                            .join(" and ")
                    )));
                }
            }
        }
        bindings.push(bound);
    }
    if !missing.is_empty() {
        let what: Vec<String> = missing
            .iter()
            .map(|(name, needers)| format!("{name} (needed by {})", needers.join(", ")))
            .collect();
        return Err(Error::Unsatisfiable(format!(
            "cannot {}: nothing provides {}; give {} in the goal or as data part parameters",
            template.summary,
            what.join(", "),
            missing.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    }

    // Order by dependencies, then by rank, then by the template's order.
    let deps: Vec<BTreeSet<usize>> = bindings
        .iter()
        .map(|b| {
            b.iter()
                .filter_map(|(_, s)| match s {
                    Source::Output { node, .. } => Some(*node),
                    Source::Literal(_) => None,
                })
                .collect()
        })
        .collect();
    let mut order: Vec<usize> = Vec::with_capacity(nodes.len());
    while order.len() < nodes.len() {
        let next = (0..nodes.len())
            .filter(|i| !order.contains(i) && deps[*i].iter().all(|d| order.contains(d)))
            .min_by_key(|&i| (rank(nodes[i].2), i));
        let Some(next) = next else {
            let stuck: Vec<&str> = (0..nodes.len())
                .filter(|i| !order.contains(i))
                .map(|i| nodes[i].1.as_str())
                .collect();
            return Err(Error::Unsatisfiable(format!(
                "cannot {}: {} need each other's outputs",
                template.summary,
                stuck.join(", ")
            )));
        };
        order.push(next);
    }
    let step_id = |node: usize| {
        order
            .iter()
            .position(|&n| n == node)
            .map_or_else(String::new, |k| format!("s{k}"))
    };
    // What each step waits for, by position in the list: the steps whose outputs it
    // binds and, for a step that changes something, the read-only checks listed before
    // it (they go first so that a failing check leaves nothing to undo, and a slow one,
    // waiting for an approval, does not run while an undo's deadline runs).
    let check = |node: usize| rank(nodes[node].2) == 0;
    let listed_deps: Vec<BTreeSet<usize>> = order
        .iter()
        .enumerate()
        .map(|(k, &node)| {
            let mut waits: BTreeSet<usize> = deps[node]
                .iter()
                .filter_map(|d| order.iter().position(|n| n == d))
                .collect();
            if !check(node) {
                waits.extend((0..k).filter(|&j| check(order[j])));
            }
            waits
        })
        .collect();
    let no_return = order
        .iter()
        .position(|&node| !nodes[node].2.may_precede_pivot());
    let waits = partial_order(&listed_deps, no_return);
    let chosen = order
        .iter()
        .enumerate()
        .map(|(k, &node)| {
            let mut args = Map::new();
            for (input, source) in &bindings[node] {
                let value = match source {
                    Source::Literal(v) => v.clone(),
                    Source::Output { node, property } => json!(format!(
                        "$steps.{}.response.body#/{}",
                        step_id(*node),
                        escape_token(property)
                    )),
                };
                args.insert(input.clone(), value);
            }
            Chosen {
                id: step_id(node),
                agent: nodes[node].0.clone(),
                skill: nodes[node].1.clone(),
                args: Value::Object(args),
                after: waits.as_ref().map(|waits| {
                    waits
                        .get(k)
                        .into_iter()
                        .flatten()
                        .map(|&j| format!("s{j}"))
                        .collect()
                }),
            }
        })
        .collect();
    let authored_by = AuthoredBy {
        agent: ctx.planner_id.clone(),
        model: RULES_MODEL.into(),
        prompt_sha256: None,
        rejected_alternatives: Vec::new(),
    };
    assemble(ctx, goal, chosen, catalog, authored_by)
}

/// The steps each listed step waits for (`after`, by position), from the steps whose
/// outputs it binds (`deps`, each listed before it) and the point of no return
/// (`no_return`, a position): that step also waits for every step listed before it, and
/// every step listed after it waits for it, so that it is comparable with every step.
/// Waits implied by others are left out (a step that waits for `b`, which waits for `a`,
/// does not name `a`); each list is in list order. `None` when the result is the plan's
/// sequence (each step waits exactly for the one before): the plan then carries no
/// `after`, and reads as it did before plans had branches.
pub(crate) fn partial_order(
    deps: &[BTreeSet<usize>],
    no_return: Option<usize>,
) -> Option<Vec<Vec<usize>>> {
    let n = deps.len();
    let mut waits: Vec<BTreeSet<usize>> = deps
        .iter()
        .enumerate()
        .map(|(k, d)| d.iter().copied().filter(|&j| j < k).collect())
        .collect();
    if let Some(p) = no_return.filter(|&p| p < n) {
        waits[p].extend(0..p);
        for w in waits.iter_mut().skip(p + 1) {
            w.insert(p);
        }
    }
    // Every step each waits for, directly or not (each waits only for earlier ones).
    let mut ancestors: Vec<BTreeSet<usize>> = Vec::with_capacity(n);
    for w in &waits {
        let mut all = w.clone();
        for &j in w {
            all.extend(ancestors[j].iter().copied());
        }
        ancestors.push(all);
    }
    let reduced: Vec<Vec<usize>> = waits
        .iter()
        .map(|w| {
            w.iter()
                .copied()
                .filter(|&j| !w.iter().any(|&other| ancestors[other].contains(&j)))
                .collect()
        })
        .collect();
    let sequence = reduced
        .iter()
        .enumerate()
        .all(|(k, w)| w.as_slice() == k.checked_sub(1).as_slice());
    (!sequence).then_some(reduced)
}

#[cfg(test)]
mod tests;
