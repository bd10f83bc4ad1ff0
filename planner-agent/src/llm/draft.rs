//! A model's answer read as a plan draft, strictly, and judged: every reason a draft is
//! refused becomes a `Refusal` (a stable code, the step, a sentence), which goes back to
//! the model for a repair and into the plan's audit record. Nothing in a draft is
//! repaired silently.
//!
//! The answer's content must be one JSON object and nothing else, or one Markdown code
//! fence (```` ```json ````, or a bare ```` ``` ````) holding exactly that; whatever the
//! server's JSON mode, the same rule applies, so a draft reads the same on every server.
//! The object then types as a draft (unknown members refused):
//! `{"steps": [{"id", "agent", "skill", "args", "class"?, "compensation"?, "after"?}],
//!   "rejectedAlternatives"?: ["…"]}`. A step may repeat the catalog's class and
//! compensation, never differ from them: the plan copies both from the catalog. `after`
//! (the ids of the steps it waits for) goes into the plan as written; the validator
//! refuses an order that names no step, forms a cycle or lists a step before what it
//! waits for (`UNKNOWN_DEPENDENCY`, `DEPENDENCY_CYCLE`, `DEPENDENCY_ORDER`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use shared_types::{AuthoredBy, Compensation, Plan, ReversibilityClass, ViolationCode};

use crate::backend::PlanRequest;
use crate::compose::{Chosen, assemble};
use crate::error::{Error, Result};

/// The answer is not one JSON object (optionally in one code fence) and nothing else.
pub const DRAFT_NOT_JSON: &str = "DRAFT_NOT_JSON";
/// The JSON does not type as a draft.
pub const DRAFT_SHAPE: &str = "DRAFT_SHAPE";
/// The draft spends more than the goal's `maxSpend`, in another currency, or an amount
/// not known before it runs.
pub const MAX_SPEND: &str = "MAX_SPEND";

/// Most steps a draft may have: a plan is a handful; more is a runaway answer, refused
/// before each step is judged (and each refusal recorded).
pub const MAX_DRAFT_STEPS: usize = 64;

/// A draft kept in the audit record as its JSON when it is at most this large once
/// serialised, this deep and has at most this many values; otherwise as its text, cut to
/// `RECORDED_TEXT_BYTES`. The record travels inside the signed plan, whose request the
/// executor reads within fixed limits (1 MiB, 20 000 values, 64 levels), and up to
/// 1 + `MAX_REPAIRS_LIMIT` drafts ride along.
const RECORDED_JSON_BYTES: usize = 16 * 1024;
const RECORDED_JSON_DEPTH: usize = 16;
const RECORDED_JSON_VALUES: usize = 1000;
const RECORDED_TEXT_BYTES: usize = 16 * 1024;

/// One reason a draft was refused: a validator's violation code (`UNKNOWN_SKILL`,
/// `ARGS_INVALID`, …) or one of this module's (`DRAFT_NOT_JSON`, `DRAFT_SHAPE`,
/// `MAX_SPEND`), the step it concerns, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub code: String,
    pub step: Option<String>,
    pub message: String,
}

impl Refusal {
    fn new(code: &str, step: Option<&str>, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            step: step.map(str::to_owned),
            message: message.into(),
        }
    }

    /// `CODE step: message`, as the validator's violations are listed.
    pub fn line(&self) -> String {
        format!(
            "{} {}: {}",
            self.code,
            self.step.as_deref().unwrap_or("-"),
            self.message
        )
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Draft {
    steps: Vec<DraftStep>,
    /// Strings only: the planner's own records of refused drafts are objects, and a
    /// model must not be able to write one that passes for them.
    #[serde(default)]
    rejected_alternatives: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DraftStep {
    id: String,
    agent: String,
    skill: String,
    args: Map<String, Value>,
    #[serde(default)]
    class: Option<ReversibilityClass>,
    #[serde(default)]
    compensation: Option<Compensation>,
    /// The steps it waits for, checked like every other member of a draft.
    #[serde(default)]
    after: Option<Vec<String>>,
}

/// What a draft came to.
#[derive(Debug)]
pub enum Verdict {
    /// A plan that passed every static check but the signature.
    Plan(Box<Plan>),
    /// Refused: the answer's JSON when it had one, and every reason.
    Refused {
        json: Option<Value>,
        refusals: Vec<Refusal>,
    },
}

/// The JSON object an answer's content holds (see the module documentation), or why it
/// holds none.
pub fn answer_json(content: &str) -> Result<Value, String> {
    let trimmed = content.trim();
    let inner = unfenced(trimmed).unwrap_or(trimmed);
    if inner.is_empty() {
        return Err("the answer is empty; answer with the draft as one JSON object".into());
    }
    let value = shared_types::json::parse_strict(inner).map_err(|e| {
        format!(
            "the answer is not one JSON object and nothing else ({e}); answer with the JSON object alone, \
             optionally inside one ```json code fence, with no text before or after it"
        )
    })?;
    if !value.is_object() {
        return Err("the answer is JSON but not an object; the draft is one JSON object".into());
    }
    Ok(value)
}

/// The body of one code fence that is the whole of `text` (info string empty or
/// `json`), or `None`.
fn unfenced(text: &str) -> Option<&str> {
    let (info, body) = text.strip_prefix("```")?.split_once('\n')?;
    let info = info.trim();
    if !(info.is_empty() || info.eq_ignore_ascii_case("json")) {
        return None;
    }
    let body = body.strip_suffix("```")?;
    // A second fence inside means more than one block, or text between them.
    (!body.contains("```")).then_some(body)
}

/// Judges one answer: read, typed, checked against the catalog the model was shown,
/// assembled with `authored_by`, validated. `Err` only for the planner's own failures.
pub fn judge(content: &str, request: &PlanRequest<'_>, authored_by: AuthoredBy) -> Result<Verdict> {
    let value = match answer_json(content) {
        Ok(value) => value,
        Err(why) => {
            return Ok(Verdict::Refused {
                json: None,
                refusals: vec![Refusal::new(DRAFT_NOT_JSON, None, why)],
            });
        }
    };
    let refused = |refusals: Vec<Refusal>| -> Result<Verdict> {
        Ok(Verdict::Refused {
            json: Some(value.clone()),
            refusals,
        })
    };
    let draft = match Draft::deserialize(&value) {
        Ok(draft) => draft,
        Err(e) => {
            return refused(vec![Refusal::new(
                DRAFT_SHAPE,
                None,
                format!(
                    "the JSON is not a draft ({{\"steps\": [{{\"id\", \"agent\", \"skill\", \"args\"}}], \"rejectedAlternatives\": [\"…\"]}}): {e}"
                ),
            )]);
        }
    };
    if draft.steps.is_empty() {
        return refused(vec![Refusal::new(
            DRAFT_SHAPE,
            None,
            "the draft has no steps",
        )]);
    }
    if draft.steps.len() > MAX_DRAFT_STEPS {
        return refused(vec![Refusal::new(
            DRAFT_SHAPE,
            None,
            format!(
                "the draft has {} steps; a plan has at most {MAX_DRAFT_STEPS}",
                draft.steps.len()
            ),
        )]);
    }
    let refusals = catalog_refusals(&draft.steps, request);
    if !refusals.is_empty() {
        return refused(refusals);
    }
    let mut authored_by = authored_by;
    authored_by
        .rejected_alternatives
        .extend(draft.rejected_alternatives.into_iter().map(Value::String));
    let chosen = draft
        .steps
        .into_iter()
        .map(|s| Chosen {
            id: s.id,
            agent: s.agent,
            skill: s.skill,
            args: Value::Object(s.args),
            after: s.after,
        })
        .collect();
    let plan = match assemble(
        request.ctx,
        request.goal,
        chosen,
        request.catalog,
        authored_by,
    ) {
        Ok(plan) => plan,
        // What assembly refuses after the catalog check is the goal's spending cap.
        Err(Error::Unsatisfiable(why)) => {
            return refused(vec![Refusal::new(MAX_SPEND, None, why)]);
        }
        Err(e) => return Err(e),
    };
    let violations = request.validator.check(&plan, request.ctx.now);
    if violations.is_empty() {
        return Ok(Verdict::Plan(Box::new(plan)));
    }
    refused(
        violations
            .into_iter()
            .map(|v| Refusal {
                code: v.code.as_str().to_owned(),
                step: v.step,
                message: v.message,
            })
            .collect(),
    )
}

/// Steps naming a skill the model was not shown, or writing a class or compensation
/// other than the catalog's. An unknown skill's message names only what the model was
/// shown (the mandate's scope); a skill the catalog has but the mandate does not grant
/// is the validator's `MANDATE_SCOPE`.
fn catalog_refusals(steps: &[DraftStep], request: &PlanRequest<'_>) -> Vec<Refusal> {
    let mut refusals = Vec::new();
    for step in steps {
        let id = Some(step.id.as_str());
        let Some(declared) = request.catalog.declaration(&step.agent, &step.skill) else {
            let offered: Vec<&str> = request
                .catalog
                .agents
                .get(&step.agent)
                .map(|a| {
                    a.skills
                        .keys()
                        .filter(|s| request.ctx.mandate.allows(&step.agent, s))
                        .map(String::as_str)
                        .collect()
                })
                .unwrap_or_default();
            let hint = if offered.is_empty() {
                format!("the catalog you were given has no agent {:?}", step.agent)
            } else {
                format!("agent {:?} offers {}", step.agent, offered.join(", "))
            };
            refusals.push(Refusal::new(
                ViolationCode::UnknownSkill.as_str(),
                id,
                format!(
                    "skill {:?} of agent {:?} is not in the catalog: {hint}",
                    step.skill, step.agent
                ),
            ));
            continue;
        };
        if let Some(class) = step.class
            && class != declared.class
        {
            refusals.push(Refusal::new(
                ViolationCode::ClassMismatch.as_str(),
                id,
                format!(
                    "the step calls {} {}, but the catalog declares it {}; leave class out",
                    step.skill,
                    class.as_str(),
                    declared.class.as_str()
                ),
            ));
        }
        if let Some(compensation) = &step.compensation
            && Some(compensation) != declared.compensation.as_ref()
        {
            refusals.push(Refusal::new(
                ViolationCode::CompensationNotDeclared.as_str(),
                id,
                format!(
                    "the step authors its own compensation for {} ({} with {}); compensations come only from the catalog: leave compensation out",
                    step.skill, compensation.skill, compensation.args
                ),
            ));
        }
    }
    refusals
}

/// A refused draft as the audit record keeps it: `{"draft", "refusals"}`, the draft as
/// its JSON when it had one that fits, else as its text (cut if long).
pub fn record(content: &str, json: Option<&Value>, refusals: &[Refusal]) -> Value {
    let draft = match json {
        Some(value) if fits(value) => value.clone(),
        _ => Value::String(cut(content, RECORDED_TEXT_BYTES)),
    };
    json!({"draft": draft, "refusals": refusals})
}

fn fits(value: &Value) -> bool {
    fn walk(value: &Value, depth: usize, count: &mut usize) -> bool {
        *count += 1;
        if depth > RECORDED_JSON_DEPTH || *count > RECORDED_JSON_VALUES {
            return false;
        }
        match value {
            Value::Array(items) => items.iter().all(|v| walk(v, depth + 1, count)),
            Value::Object(map) => map.values().all(|v| walk(v, depth + 1, count)),
            _ => true,
        }
    }
    walk(value, 0, &mut 0) && value.to_string().len() <= RECORDED_JSON_BYTES
}

/// `text` cut to at most `max` bytes at a character boundary, saying so.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [cut: {} bytes in all]", &text[..end], text.len())
}

/// The message that sends a refused draft back to the model.
pub fn repair_request(refusals: &[Refusal]) -> String {
    let lines: Vec<String> = refusals.iter().map(|r| format!("- {}", r.line())).collect();
    format!(
        "The platform refused your draft:\n{}\nWrite the whole draft again, corrected: one JSON object of the same shape, and nothing else.",
        lines.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_one_object_or_one_fence_around_one() {
        let object = json!({"steps": []});
        for answer in [
            "{\"steps\": []}",
            "  \n{\"steps\": []}\n",
            "```json\n{\"steps\": []}\n```",
            "```JSON\n{\"steps\": []}```",
            "```\n{\"steps\": []}\n```\n",
        ] {
            assert_eq!(answer_json(answer), Ok(object.clone()), "{answer:?}");
        }
        for answer in [
            "Here is the plan:\n{\"steps\": []}",
            "{\"steps\": []}\nI hope this helps.",
            "Sure!\n```json\n{\"steps\": []}\n```",
            "```json\n{\"steps\": []}\n```\nThat is all.",
            "```json\n{\"steps\": []}\n```\n```json\n{}\n```",
            "```python\n{\"steps\": []}\n```",
            "```json\n{\"steps\": []}",
            "[{\"steps\": []}]",
            "{\"steps\": [], \"steps\": []}",
            "",
        ] {
            let why = answer_json(answer).unwrap_err();
            assert!(
                why.contains("not one JSON object")
                    || why.contains("not an object")
                    || why.contains("empty"),
                "{answer:?}: {why}"
            );
        }
    }

    #[test]
    fn a_record_keeps_small_json_and_cuts_long_text() {
        let refusals = [Refusal::new(DRAFT_NOT_JSON, None, "no")];
        let small = json!({"steps": [1]});
        assert_eq!(
            record("{\"steps\": [1]}", Some(&small), &refusals),
            json!({"draft": {"steps": [1]},
                   "refusals": [{"code": "DRAFT_NOT_JSON", "step": null, "message": "no"}]})
        );
        let deep = (0..40).fold(json!(0), |inner, _| json!([inner]));
        let recorded = record(&deep.to_string(), Some(&deep), &refusals);
        assert!(recorded["draft"].is_string());
        let long = "é".repeat(RECORDED_TEXT_BYTES);
        let recorded = record(&long, None, &refusals);
        let text = recorded["draft"].as_str().unwrap();
        assert!(text.len() < RECORDED_TEXT_BYTES + 64);
        assert!(text.ends_with(&format!("[cut: {} bytes in all]", long.len())));
    }
}
