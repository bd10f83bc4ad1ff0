//! How the sweep judges each saga: the tools' own ledger (what was applied under each key,
//! and how many times) against the saga's task as the executor shows it (its state; for a
//! saga waiting for a person, what it asks and its `saga-ledger` record).

use std::collections::BTreeMap;

use agent_host::sdk::{PartContent, Task, TaskState};
use serde_json::Value;

use crate::Outcome;
use crate::chaos_tool::Ledger;

/// The forward steps of the plan that change something, and those with an undo.
const CHANGING: [&str; 5] = ["s0", "s1", "s2", "s4", "s5"];
const UNDONE: [&str; 3] = ["s0", "s1", "s2"];

/// Every saga's ending, judged against the tools' ledger.
pub(crate) fn judge(tasks: &[(String, Option<Task>)], ledger: &Ledger) -> Outcome {
    let mut outcome = Outcome::default();
    for (key, applied) in &ledger.applications {
        if *applied > 1 {
            outcome.applied_twice += 1;
            outcome
                .violations
                .push(format!("{key} applied {applied} times"));
        }
    }
    let mut by_saga: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for key in ledger.effects.keys() {
        let Some((saga, rest)) = key.split_once(':') else {
            outcome
                .violations
                .push(format!("an effect under a key of no saga: {key}"));
            continue;
        };
        let step = rest.strip_suffix(":undo").unwrap_or(rest);
        let expected = if rest.ends_with(":undo") {
            UNDONE.contains(&step)
        } else {
            // The read-only check is kept too: its answer is replayed under its key.
            CHANGING.contains(&step) || step == "s3"
        };
        if !expected {
            outcome.violations.push(format!(
                "an effect under a key the plan does not give: {key}"
            ));
        }
        by_saga.entry(saga).or_default().push(rest);
    }
    for (saga, task) in tasks {
        let effects = by_saga.get(saga.as_str()).cloned().unwrap_or_default();
        let has = |k: &str| effects.contains(&k);
        let state = task.as_ref().map(|t| t.status.state.clone());
        let violations = &mut outcome.violations;
        let ending = match (state, task) {
            (Some(TaskState::Completed), _) => {
                for step in CHANGING {
                    if !has(step) {
                        violations.push(format!("{saga} completed without {step}"));
                    }
                }
                if effects.iter().any(|k| k.ends_with(":undo")) {
                    violations.push(format!("{saga} completed with an undo"));
                }
                "completed"
            }
            (Some(TaskState::Failed | TaskState::Canceled | TaskState::Rejected), _) => {
                if has("s4") {
                    violations.push(format!("{saga} unwound, and was charged"));
                }
                if has("s5") {
                    violations.push(format!("{saga} unwound, and mailed"));
                }
                for step in UNDONE {
                    if has(step) && !has(&format!("{step}:undo")) {
                        violations.push(format!("{saga} unwound, and {step} was left in place"));
                    }
                }
                "compensated"
            }
            (Some(TaskState::InputRequired), Some(task)) => {
                if let Some(step) = held(saga, task, &has, violations) {
                    outcome.person_in_doubt += 1;
                    *outcome.in_doubt_at.entry(step).or_default() += 1;
                }
                "person"
            }
            (state, _) => {
                violations.push(format!("{saga} did not end: {state:?}"));
                "not ended"
            }
        };
        *outcome.ended.entry(ending).or_default() += 1;
    }
    outcome
}

/// The data part of a task's status: what a waiting saga asks.
fn asked(task: &Task) -> Option<&Value> {
    let message = task.status.message.as_ref()?;
    message.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(v) => Some(v),
        _ => None,
    })
}

/// Each step of the task's `saga-ledger` artifact.
fn record(task: &Task) -> Option<&Vec<Value>> {
    let artifact = task
        .artifacts
        .iter()
        .flatten()
        .find(|a| a.artifact_id == "saga-ledger")?;
    artifact.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(v) => v["steps"].as_array(),
        _ => None,
    })
}

/// A saga waiting for a person holds a complete record: what it asks names a step of its
/// own, that step is the one in doubt (or failed definitely, nothing of it applied), and
/// every other effect the tools applied under its keys is in place as its record says,
/// or undone as it says. The step, when the person is asked about an unknown outcome
/// (`s<n>`, or `s<n>:undo` for a compensation).
fn held(
    saga: &str,
    task: &Task,
    has: &dyn Fn(&str) -> bool,
    violations: &mut Vec<String>,
) -> Option<String> {
    let about = asked(task)
        .and_then(Value::as_object)
        .and_then(|a| a.iter().next());
    let (Some((kind, about)), Some(steps)) = (about, record(task)) else {
        violations.push(format!(
            "{saga} waits for a person who is not told what, or shown no record"
        ));
        return None;
    };
    let at = about["stepId"].as_str().unwrap_or_default();
    if about["sagaId"] != saga || !steps.iter().any(|s| s["step"] == at) {
        violations.push(format!("{saga} asks about {about}, not one of its steps"));
        return None;
    }
    let mut in_doubt = None;
    for entry in steps {
        let id = entry["step"].as_str().unwrap_or_default();
        let (applied, undone) = (has(id), has(&format!("{id}:undo")));
        let forward = entry["forward"]["state"].as_str().unwrap_or_default();
        let undo = entry["undo"]["state"].as_str().unwrap_or_default();
        let mut wrong = |what: &str| {
            violations.push(format!(
                "{saga} waits for a person about {at} ({kind}), and {id} {what} (record: {forward}, undo {undo}; tool: applied {applied}, undone {undone})"
            ));
        };
        if id == at {
            match (kind.as_str(), forward) {
                // Applied or not: that is what the person is asked.
                ("escalation", "unknown") => in_doubt = Some(id.to_owned()),
                ("escalation", "failed") if !applied => {}
                ("compensation", _) if undo == "deadLettered" => {
                    let reason = entry["undo"]["reason"].as_str().unwrap_or_default();
                    let doubt = reason.contains("no answer") || reason.contains("unknown");
                    if doubt {
                        in_doubt = Some(format!("{id}:undo"));
                    }
                    if !doubt && undone {
                        wrong("was undone, though its undo failed definitely");
                    }
                    if forward == "succeeded" && !applied {
                        wrong("is said done, and no tool applied it");
                    }
                    continue;
                }
                _ => wrong("is asked about, and its record does not say it is in doubt"),
            }
            if undone {
                wrong("was undone");
            }
            continue;
        }
        match forward {
            "succeeded" if !applied => wrong("is said done, and no tool applied it"),
            "pending" | "failed" | "awaitingApproval" | "approved" if applied => {
                wrong("was applied, and its record says it was not")
            }
            "running" | "waitingRetry" | "verifying" => wrong("is still under way"),
            // An effect that may be in place: its undo done, or still to come (the
            // read-only check changes nothing, in doubt or not).
            "unknown" if CHANGING.contains(&id) && undo != "done" && undo != "pending" => {
                wrong("may be in place, and no undo is done or to come")
            }
            _ => {}
        }
        if (undo == "done") != undone {
            wrong("is undone in one ledger and not the other");
        }
    }
    in_doubt
}
