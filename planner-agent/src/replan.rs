//! Planning again after an unwinding or an avoidable refusal (`--max-replans`). When the
//! executor's task for a goal ends FAILED with every completed step compensated, or
//! REJECTED with refusals a new plan may avoid (`AVOIDABLE_REFUSALS`: the catalog the
//! plan was checked against changed before the executor checked it), the planner plans
//! again under the same mandate, with the failure (or the refusals) and the plan it ended
//! as input, and submits the new plan under a new saga id that names the one it
//! supersedes (`supersedes` in the signed plan). The goal's task stays WORKING across
//! attempts and ends with the last attempt's outcome.
//!
//! What stops it: the bound (`--max-replans`, 0 turns replanning off); an ending a new
//! plan cannot change (completed, canceled, waiting for a person, which is where a
//! failure past the pivot goes, or a refusal with any code outside
//! `AVOIDABLE_REFUSALS`: the mandate's, the signature's, a conflict, the plan's own
//! shape); a plan equal to one already tried, compared without what changes from one
//! attempt to the next (`shape_sha256`); any refusal while planning (a mandate refusal
//! among them).
//!
//! The planner's record of attempts is durable: each ended attempt joins the task's
//! `attempts` metadata in the same write that records the next plan (the `plan` artifact)
//! and its saga id, so a restart goes on from the attempt it had recorded and never plans
//! a second plan for it.

use agent_host::TaskHandle;
use agent_host::sdk::{PartContent, Role, Task, TaskState};
use agent_host::tasks::put_artifact;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use shared_types::{MAX_SUPERSEDES_REASON_CHARS, Supersedes, Violation, ViolationCode};

use crate::agent::{
    META_EXECUTOR_STATE, META_EXECUTOR_TASK_ID, META_OUTCOME, META_SAGA_ID, Phase, PhaseLock,
    Planner, agent_message, logged, plan_artifact,
};
use crate::follow::{finish, finish_with, text_of};

/// Task metadata: every attempt that ended, in order (`Attempt`).
pub const META_ATTEMPTS: &str = "attempts";
/// How many times a goal is planned again by default.
pub const DEFAULT_MAX_REPLANS: u32 = 2;
/// The most `--max-replans` allows.
pub const MAX_REPLANS_LIMIT: u32 = 10;

/// The executor's ledger artifact, where the step that failed is named.
const LEDGER_ARTIFACT: &str = "saga-ledger";

/// The executor's refusal codes a new plan may avoid. The planner checked its plan
/// against the catalog it read, so the executor refuses it with these only when its
/// registry changed since (a skill withdrawn, a declaration, a schema or an undo
/// deadline changed) or it holds to a bound the planner's check did not (its parallel
/// bound, which times undo deadlines): a plan drafted from the catalog as it is now may
/// pass. Every other code is one a new plan would meet again: the mandate's (replanning
/// stops on a mandate refusal), the signature's or the planner's identity, a saga id in
/// conflict, and the plan's own shape, which the planner checked with the same rules.
pub const AVOIDABLE_REFUSALS: [ViolationCode; 8] = [
    ViolationCode::UnknownSkill,
    ViolationCode::ClassMismatch,
    ViolationCode::CompensationNotDeclared,
    ViolationCode::IrreversibleWithCompensation,
    ViolationCode::PivotOrdering,
    ViolationCode::UndoTtlTooShort,
    ViolationCode::BadReference,
    ViolationCode::ArgsInvalid,
];

/// What a backend plans again from: the failure, and the plan that ended with it.
#[derive(Debug, Clone)]
pub struct Replan {
    /// The attempt being planned (2 for the first replan).
    pub attempt: u32,
    /// The saga that unwound, or whose plan was refused, and why: goes into the new plan
    /// as `supersedes`.
    pub supersedes: Supersedes,
    /// The signed plan of that saga.
    pub previous: Value,
    /// The executor's refusals of that plan, when it refused it before anything ran
    /// (each one a new plan may avoid); empty when the saga ran and unwound.
    pub refusals: Vec<Violation>,
}

/// One attempt at a goal, as the planner's task records it once it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// 1 for the first plan.
    pub attempt: u32,
    pub saga_id: String,
    pub executor_task_id: String,
    /// How the executor's task ended (its wire name, `TASK_STATE_FAILED`).
    pub state: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<String>,
    /// The executor's last status text.
    pub reason: String,
    /// `shape_sha256` of the plan: a plan with the same is not tried again.
    pub plan_sha256: String,
}

impl Attempt {
    /// Attempt number `attempt`, of `plan`, whose executor task ended as `ended`.
    pub fn of(attempt: u32, plan: &Value, ended: &Task) -> Self {
        let (failed_step, reason) = failure_of(ended);
        Self {
            attempt,
            saga_id: plan["sagaId"].as_str().unwrap_or_default().to_owned(),
            executor_task_id: ended.id.clone(),
            state: serde_json::to_value(&ended.status.state).unwrap_or(Value::Null),
            outcome: outcome_of(ended),
            failed_step,
            reason,
            plan_sha256: shape_sha256(plan),
        }
    }

    /// What a new plan answers when this attempt unwound, or its plan was refused for
    /// reasons a new plan may avoid (`avoidable_refusals`): `None` when a new plan cannot
    /// change how it ended.
    pub fn superseded(&self, ended: &Task) -> Option<Supersedes> {
        let unwound = ended.status.state == TaskState::Failed
            && self.outcome.as_deref() == Some("compensated");
        (unwound || avoidable_refusals(ended).is_some()).then(|| Supersedes {
            saga_id: self.saga_id.clone(),
            executor_task_id: self.executor_task_id.clone(),
            failed_step: self.failed_step.clone(),
            reason: self.reason.clone(),
        })
    }
}

/// The attempts `task` recorded (none for a goal planned once so far). An entry that does
/// not read as an attempt is skipped: the record is the planner's own.
pub fn attempts_of(task: &Task) -> Vec<Attempt> {
    task.metadata
        .as_ref()
        .and_then(|m| m.get(META_ATTEMPTS))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| {
            // A task read over A2A carries its numbers as doubles.
            let mut a = a.clone();
            shared_types::json::normalize_integers(&mut a);
            serde_json::from_value(a).ok()
        })
        .collect()
}

/// The goal's message: the first the client sent on the task.
pub fn goal_message(task: &Task) -> Option<&agent_host::sdk::Message> {
    task.history.iter().flatten().find(|m| m.role == Role::User)
}

/// The executor's refusals of a plan it REJECTED (its status's data part,
/// `violations`), when there are some and a new plan may avoid every one
/// (`AVOIDABLE_REFUSALS`). `None` for any other ending, a refusal without violations (a
/// plan pointed at another task), one with a code outside the list, or one whose code
/// this planner does not know.
pub fn avoidable_refusals(ended: &Task) -> Option<Vec<Violation>> {
    let refusals = refusals_of(ended)?;
    let avoidable = !refusals.is_empty()
        && refusals
            .iter()
            .all(|v| AVOIDABLE_REFUSALS.contains(&v.code));
    avoidable.then_some(refusals)
}

/// Every violation a REJECTED task's status lists; `None` when it lists none, or one
/// does not read as a violation.
fn refusals_of(ended: &Task) -> Option<Vec<Violation>> {
    if ended.status.state != TaskState::Rejected {
        return None;
    }
    let message = ended.status.message.as_ref()?;
    let data = message.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(v) => Some(v),
        _ => None,
    })?;
    let listed = data.get("violations")?.as_array()?;
    listed
        .iter()
        .map(|v| serde_json::from_value(v.clone()).ok())
        .collect()
}

fn outcome_of(ended: &Task) -> Option<String> {
    ended
        .metadata
        .as_ref()?
        .get(META_OUTCOME)?
        .as_str()
        .map(str::to_owned)
}

/// The step that failed and why, from the executor's ledger (the first step whose
/// forward call failed or whose outcome stayed unknown), else the status text alone,
/// which for a refused plan lists every refusal (the step then the first one refused).
/// The reason is bounded to what a plan may carry.
fn failure_of(ended: &Task) -> (Option<String>, String) {
    let status_text = text_of(ended.status.message.as_ref());
    let refused_step = || {
        refusals_of(ended)?
            .into_iter()
            .find_map(|v| v.step)
            .map(|step| (Some(step), None))
    };
    let failed = ledger_of(ended).and_then(|ledger| {
        ledger["steps"].as_array()?.iter().find_map(|step| {
            let forward = &step["forward"];
            matches!(forward["state"].as_str(), Some("failed" | "unknown")).then(|| {
                (
                    step["step"].as_str().map(str::to_owned),
                    forward["reason"].as_str().map(str::to_owned),
                )
            })
        })
    });
    let failed = failed.or_else(refused_step);
    let (step, reason) = match failed {
        Some((step, Some(reason))) => (step, format!("{status_text}: {reason}")),
        Some((step, None)) => (step, status_text),
        None => (None, status_text),
    };
    (
        step,
        reason.chars().take(MAX_SUPERSEDES_REASON_CHARS).collect(),
    )
}

fn ledger_of(task: &Task) -> Option<&Value> {
    let artifact = task
        .artifacts
        .iter()
        .flatten()
        .find(|a| a.artifact_id == LEDGER_ARTIFACT)?;
    artifact.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(v) => Some(v),
        _ => None,
    })
}

/// SHA-256 (hex) of a plan without what differs between two attempts at the same plan:
/// its saga id, creation time, authorship, signatures, `supersedes`, and each step's
/// idempotency key (derived from the saga id). Two plans with the same make the same
/// calls in the same order.
pub fn shape_sha256(plan: &Value) -> String {
    let mut shape = Map::new();
    if let Some(members) = plan.as_object() {
        for (key, value) in members {
            match key.as_str() {
                "sagaId" | "createdAt" | "authoredBy" | "signatures" | "supersedes" => {}
                "steps" => {
                    let steps: Vec<Value> = value
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|step| {
                            let mut step = step.clone();
                            if let Some(step) = step.as_object_mut() {
                                step.remove("idempotencyKey");
                            }
                            step
                        })
                        .collect();
                    shape.insert(key.clone(), Value::Array(steps));
                }
                _ => {
                    shape.insert(key.clone(), value.clone());
                }
            }
        }
    }
    let bytes = shared_types::json::canonicalize(&Value::Object(shape)).unwrap_or_default();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Planner {
    /// After attempt `plan` ended as `ended`: ends the goal's task as it ended, or plans
    /// again and returns the next plan, recorded on the task with the attempt that ended
    /// (in one write) and ready to submit. `None`: the task ended, or a cancel came
    /// while planning (it ended the task).
    pub(crate) async fn after_attempt(
        &self,
        task: &TaskHandle,
        plan: &Value,
        ended: &Task,
        phase: &PhaseLock,
    ) -> Option<Value> {
        let snapshot = match task.snapshot().await {
            Ok(snapshot) => snapshot,
            Err(e) => {
                tracing::warn!(task = task.id(), error = %e, "cannot read the task's attempts");
                finish(self, task, ended).await;
                return None;
            }
        };
        let mut attempts = attempts_of(&snapshot);
        let number = u32::try_from(attempts.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        let this = Attempt::of(number, plan, ended);
        let max = self.max_replans();
        // The end lists every attempt once there was more than one.
        let end = |attempts: &[Attempt], this: &Attempt, note: Option<String>| {
            let listed = if attempts.is_empty() {
                Vec::new()
            } else {
                let mut all = attempts.to_vec();
                all.push(this.clone());
                vec![(META_ATTEMPTS.to_owned(), json!(all))]
            };
            finish_with(self, task, ended, listed, note)
        };
        let Some(supersedes) = this.superseded(ended).filter(|_| max > 0) else {
            end(&attempts, &this, None).await;
            return None;
        };
        if number > max {
            let note = format!("attempt {number}: no replan left (--max-replans {max})");
            end(&attempts, &this, Some(note)).await;
            return None;
        }
        {
            let mut guard = phase.lock().await;
            if *guard == Phase::Canceled {
                return None;
            }
            // Until the next plan is submitted, a cancel ends the task here.
            *guard = Phase::Planning;
        }
        let next_number = number + 1;
        let refusals = avoidable_refusals(ended).unwrap_or_default();
        let step = supersedes
            .failed_step
            .as_deref()
            .map(|s| format!(" at {s}"))
            .unwrap_or_default();
        let how = if refusals.is_empty() {
            format!("unwound{step}")
        } else {
            let mut codes: Vec<&str> = refusals.iter().map(|v| v.code.as_str()).collect();
            codes.sort_unstable();
            codes.dedup();
            format!(
                "was refused before anything ran ({}{step}), a refusal a new plan may avoid",
                codes.join(", ")
            )
        };
        let planning = format!(
            "attempt {number} (plan {}) {how}; planning attempt {next_number} of at most {} under the same mandate",
            supersedes.saga_id,
            max + 1
        );
        logged(
            task,
            task.set_status(TaskState::Working, Some(agent_message(planning, None)))
                .await,
        );
        let replan = Replan {
            attempt: next_number,
            supersedes,
            previous: plan.clone(),
            refusals,
        };
        let composed = match self.goal_and_grant(&snapshot) {
            Ok((goal, grant)) => self.compose(task, &goal, &grant, Some(&replan)).await,
            Err(e) => Err(e),
        };
        let next = match composed {
            Ok(next) => next,
            Err(e) => {
                let note = format!("planning attempt {next_number} failed: {e}");
                end(&attempts, &this, Some(note)).await;
                return None;
            }
        };
        let shape = shape_sha256(&next);
        if shape == this.plan_sha256 || attempts.iter().any(|a| a.plan_sha256 == shape) {
            let note = format!(
                "attempt {number}: the planner found no plan it had not tried ({} planned the same again)",
                self.backend_name()
            );
            end(&attempts, &this, Some(note)).await;
            return None;
        }
        let (old, new) = (
            replan.supersedes.saga_id.clone(),
            next["sagaId"].as_str().unwrap_or_default().to_owned(),
        );
        attempts.push(this);
        if *phase.lock().await == Phase::Canceled {
            return None;
        }
        let artifact = plan_artifact(&next);
        let saga_id = json!(new);
        let record = |t: &mut Task| {
            let members = t.metadata.get_or_insert_with(Default::default);
            members.insert(META_ATTEMPTS.to_owned(), json!(attempts));
            members.insert(META_SAGA_ID.to_owned(), saga_id);
            // The next attempt's executor task is recorded once it exists.
            for key in [META_EXECUTOR_TASK_ID, META_EXECUTOR_STATE, META_OUTCOME] {
                members.remove(key);
            }
            Ok(Some(put_artifact(t, artifact)))
        };
        let said = format!("attempt {next_number}: plan {new} supersedes {old}");
        let status = vec![(TaskState::Working, Some(agent_message(said, None)))];
        if let Err(e) = task.change_with_statuses(record, status, 0, None).await {
            tracing::warn!(task = task.id(), error = %e, "cannot record the next attempt");
            let last = attempts.pop()?;
            let note = format!("the planner could not record attempt {next_number}: {e}");
            end(&attempts, &last, Some(note)).await;
            return None;
        }
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_host::sdk::{Artifact, Part, TaskStatus};
    use serde_json::json;

    fn ended(state: TaskState, outcome: Option<&str>, ledger: Option<Value>) -> Task {
        let mut metadata = std::collections::HashMap::new();
        if let Some(outcome) = outcome {
            metadata.insert("outcome".into(), json!(outcome));
        }
        Task {
            id: "t-1".into(),
            context_id: "c-1".into(),
            status: TaskStatus {
                state,
                message: Some(crate::agent::agent_message(
                    "the saga failed; every completed step was compensated",
                    None,
                )),
                timestamp: None,
            },
            artifacts: ledger.map(|ledger| {
                vec![Artifact {
                    artifact_id: LEDGER_ARTIFACT.into(),
                    name: None,
                    description: None,
                    parts: vec![Part::data(ledger)],
                    metadata: None,
                    extensions: None,
                }]
            }),
            history: None,
            metadata: Some(metadata),
        }
    }

    fn plan(saga_id: &str) -> Value {
        json!({"sagaId": saga_id, "planVersion": 1, "goal": "g", "createdAt": "2026-12-07T10:00:00Z",
            "authoredBy": {"agent": "p", "model": "m"}, "pivotIndex": null,
            "steps": [{"id": "s0", "agent": "a", "skill": "a.do", "args": {"n": 1},
                "class": "retriable", "idempotencyKey": format!("{saga_id}:s0")}],
            "signatures": [{"protected": "x", "signature": saga_id}]})
    }

    #[test]
    fn an_unwound_attempt_is_superseded_with_the_step_and_reason_from_the_ledger() {
        let ledger = json!({"steps": [
            {"step": "s0", "forward": {"state": "succeeded"}},
            {"step": "s3", "forward": {"state": "failed", "reason": "registry down"}}]});
        let task = ended(TaskState::Failed, Some("compensated"), Some(ledger));
        let attempt = Attempt::of(1, &plan("sg_a"), &task);
        assert_eq!(attempt.failed_step.as_deref(), Some("s3"));
        let superseded = attempt.superseded(&task).unwrap();
        assert_eq!(superseded.saga_id, "sg_a");
        assert_eq!(superseded.executor_task_id, "t-1");
        assert!(
            superseded.reason.ends_with(": registry down"),
            "{}",
            superseded.reason
        );
    }

    #[test]
    fn no_other_ending_is_planned_again() {
        for (state, outcome) in [
            (TaskState::Failed, None),
            (TaskState::Completed, None),
            (TaskState::Canceled, Some("compensated")),
            (TaskState::Rejected, None),
            (TaskState::InputRequired, None),
        ] {
            let task = ended(state.clone(), outcome, None);
            assert_eq!(
                Attempt::of(1, &plan("sg_a"), &task).superseded(&task),
                None,
                "{state:?}"
            );
        }
    }

    /// The executor's answer to a plan it refused with `violations`.
    fn refused(violations: Value) -> Task {
        let mut task = ended(TaskState::Rejected, None, None);
        task.status.message = Some(crate::agent::agent_message(
            "the plan was refused with 2 violation(s):\nUNKNOWN_SKILL s3: …",
            Some(json!({ "violations": violations })),
        ));
        task
    }

    #[test]
    fn a_refusal_a_new_plan_may_avoid_is_planned_again_from_the_step_refused() {
        let task = refused(json!([
            {"code": "UNKNOWN_SKILL", "step": "s3", "message": "no skill compliance.check"},
            {"code": "BAD_REFERENCE", "step": "s4", "message": "s3 declares no output"}]));
        let attempt = Attempt::of(1, &plan("sg_a"), &task);
        assert_eq!(attempt.failed_step.as_deref(), Some("s3"));
        assert!(
            attempt.reason.contains("UNKNOWN_SKILL s3"),
            "{}",
            attempt.reason
        );
        let superseded = attempt.superseded(&task).unwrap();
        assert_eq!(superseded.failed_step.as_deref(), Some("s3"));
        let refusals = avoidable_refusals(&task).unwrap();
        assert_eq!(refusals.len(), 2);
        assert_eq!(refusals[0].code, ViolationCode::UnknownSkill);
    }

    #[test]
    fn a_refusal_with_any_code_a_new_plan_would_meet_again_is_not() {
        let unknown_skill = json!({"code": "UNKNOWN_SKILL", "step": "s3", "message": "m"});
        for other in [
            "MANDATE_REVOKED",
            "MANDATE_EXHAUSTED",
            "MANDATE_EXCEEDED",
            "MANDATE_EXPIRED",
            "MANDATE_SCOPE",
            "MANDATE_UNTRUSTED",
            "SIGNATURE_INVALID",
            "SIGNER_UNTRUSTED",
            "PLAN_CONFLICT",
            "SCHEMA_INVALID",
            "DEPENDENCY_CYCLE",
            "IDEMPOTENCY_KEY_MISMATCH",
            "A_CODE_FROM_A_NEWER_EXECUTOR",
        ] {
            let violation = json!({"code": other, "step": null, "message": "m"});
            for violations in [json!([violation]), json!([unknown_skill, violation])] {
                let task = refused(violations);
                assert_eq!(avoidable_refusals(&task), None, "{other}");
                let attempt = Attempt::of(1, &plan("sg_a"), &task);
                assert_eq!(attempt.superseded(&task), None, "{other}");
            }
        }
        // A refusal that lists nothing (a plan pointed at the task it runs on).
        let pointed = refused(json!([]));
        assert_eq!(
            Attempt::of(1, &plan("sg_a"), &pointed).superseded(&pointed),
            None
        );
    }

    #[test]
    fn a_reason_is_bounded_to_what_a_plan_may_carry() {
        let ledger = json!({"steps": [{"step": "s0", "forward": {"state": "unknown",
            "reason": "x".repeat(5000)}}]});
        let task = ended(TaskState::Failed, Some("compensated"), Some(ledger));
        let attempt = Attempt::of(1, &plan("sg_a"), &task);
        assert_eq!(attempt.reason.chars().count(), MAX_SUPERSEDES_REASON_CHARS);
    }

    #[test]
    fn plans_differing_only_in_ids_and_times_have_one_shape() {
        let (a, mut b) = (plan("sg_a"), plan("sg_b"));
        b["createdAt"] = json!("2026-12-07T11:00:00Z");
        b["supersedes"] = json!({"sagaId": "sg_a", "executorTaskId": "t", "reason": "r"});
        assert_eq!(shape_sha256(&a), shape_sha256(&b));
        b["steps"][0]["args"]["n"] = json!(2);
        assert_ne!(shape_sha256(&a), shape_sha256(&b));
        let mut c = plan("sg_c");
        c["steps"][0]["after"] = json!([]);
        assert_ne!(shape_sha256(&a), shape_sha256(&c));
    }

    #[test]
    fn attempts_are_read_back_and_a_foreign_entry_is_skipped() {
        let task = ended(TaskState::Failed, Some("compensated"), None);
        let attempt = Attempt::of(1, &plan("sg_a"), &task);
        let mut recorded = task.clone();
        recorded.metadata.as_mut().unwrap().insert(
            META_ATTEMPTS.into(),
            json!([serde_json::to_value(&attempt).unwrap(), {"attempt": "x"}]),
        );
        assert_eq!(attempts_of(&recorded), vec![attempt.clone()]);
        // As read over A2A: its numbers as doubles.
        let mut doubled = serde_json::to_value(&attempt).unwrap();
        doubled["attempt"] = json!(1.0);
        recorded
            .metadata
            .as_mut()
            .unwrap()
            .insert(META_ATTEMPTS.into(), json!([doubled]));
        assert_eq!(attempts_of(&recorded), vec![attempt]);
    }
}
