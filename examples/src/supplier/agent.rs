//! One demo tool agent's behaviour on the hosting layer: read the call (`{"skill",
//! "args"}` in a data part), check it (skill, arguments against the card's input schema,
//! `Idempotency-Key`), apply the injected fault, decide it on the ledger, and answer
//! (COMPLETED with the result as the artifact's data part, FAILED, or REJECTED).

use std::collections::HashMap;

use agent_host::sdk::{Artifact, Message, Part, PartContent, TaskState};
use agent_host::{Agent, RequestContext, TaskHandle};
use serde_json::Value;
use shared_types::FailureClass;

use super::faults::{FaultMode, Faults};
use super::ledger::{Call, Ledger, Outcome};
use super::skills::{Behaviour, HOLD, SkillSpec, skills_of};
use super::{Result, SupplierError};

/// A skill ready to serve: what it does and its compiled input schema.
struct Skill {
    spec: SkillSpec,
    input: Option<jsonschema::Validator>,
}

/// The A2A behaviour of one tool agent.
pub(crate) struct ToolAgent {
    name: &'static str,
    skills: HashMap<&'static str, Skill>,
    pub(crate) ledger: Ledger,
    pub(crate) faults: Faults,
    /// Keys whose first call failed under `transient-once` (in memory: a restarted
    /// agent fails each key once more).
    failed_once: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// Each skill's reversibility declaration in the card.
fn declarations(card: &Value) -> Option<&serde_json::Map<String, Value>> {
    card.pointer("/capabilities/extensions")?
        .as_array()?
        .iter()
        .find(|e| {
            e.get("uri").and_then(Value::as_str) == Some(shared_types::REVERSIBILITY_EXTENSION_URI)
        })?
        .pointer("/params/skills")?
        .as_object()
}

impl ToolAgent {
    /// The agent `name` serving the skills its `card` declares, which must be the ones
    /// this module implements for it.
    pub fn new(name: &'static str, card: &Value, ledger: Ledger, faults: Faults) -> Result<Self> {
        let declared = declarations(card).ok_or_else(|| {
            SupplierError::Card(format!(
                "the card of {name} has no reversibility declarations"
            ))
        })?;
        let mut skills = HashMap::new();
        for spec in skills_of(name) {
            let declaration = declared.get(spec.skill).ok_or_else(|| {
                SupplierError::Card(format!(
                    "the card of {name} does not declare {}",
                    spec.skill
                ))
            })?;
            let input = match declaration.get("inputSchema") {
                Some(schema) => Some(
                    jsonschema::options()
                        .should_validate_formats(true)
                        .build(schema)
                        .map_err(|e| {
                            SupplierError::Card(format!("{}: inputSchema: {e}", spec.skill))
                        })?,
                ),
                None => None,
            };
            skills.insert(spec.skill, Skill { spec, input });
        }
        if let Some(extra) = declared.keys().find(|s| !skills.contains_key(s.as_str())) {
            return Err(SupplierError::Card(format!(
                "the card of {name} declares {extra}, which this agent does not implement"
            )));
        }
        Ok(Self {
            name,
            skills,
            ledger,
            faults,
            failed_once: Default::default(),
        })
    }

    /// Whether this is the first call under `key` to meet `transient-once` (which then
    /// fails it); a call without a key always is.
    fn first_failure(&self, key: Option<&str>) -> bool {
        let Some(key) = key else {
            return true;
        };
        self.failed_once
            .lock()
            .map_or(true, |mut seen| seen.insert(key.to_owned()))
    }

    /// Checks a call; returns the skill and its normalised arguments, or why it is refused.
    fn check(
        &self,
        ctx: &RequestContext,
        message: &Message,
    ) -> std::result::Result<(&Skill, Value), (String, String)> {
        let call = message.parts.iter().find_map(|p| match &p.content {
            PartContent::Data(v) => Some(v),
            _ => None,
        });
        let Some(call) = call else {
            return Err((
                "?".into(),
                "expected a data part {\"skill\": …, \"args\": {…}}".into(),
            ));
        };
        let Some(name) = call.get("skill").and_then(Value::as_str) else {
            return Err(("?".into(), "the data part names no \"skill\"".into()));
        };
        let Some(skill) = self.skills.get(name) else {
            let mut offered: Vec<&str> = self.skills.keys().copied().collect();
            offered.sort_unstable();
            return Err((
                name.to_owned(),
                format!(
                    "{} has no skill {name:?} (it offers {})",
                    self.name,
                    offered.join(", ")
                ),
            ));
        };
        let mut args = call
            .get("args")
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default()));
        shared_types::json::normalize_integers(&mut args);
        if let Some(schema) = &skill.input {
            let errors: Vec<String> = schema
                .iter_errors(&args)
                .take(5)
                .map(|e| {
                    let at = e.instance_path().as_str().to_owned();
                    let at = if at.is_empty() { "args".into() } else { at };
                    format!("{at}: {e}")
                })
                .collect();
            if !errors.is_empty() {
                return Err((
                    name.to_owned(),
                    format!(
                        "the arguments do not match {name}'s inputSchema: {}",
                        errors.join("; ")
                    ),
                ));
            }
        }
        if skill.spec.behaviour.needs_key() && ctx.idempotency_key.is_none() {
            return Err((
                name.to_owned(),
                format!("{name} changes state: the call must carry an Idempotency-Key header"),
            ));
        }
        Ok((skill, args))
    }

    async fn handle(&self, ctx: RequestContext, task: &TaskHandle, message: Message) -> Result<()> {
        let key = ctx.idempotency_key.as_deref();
        let (skill, args) = match self.check(&ctx, &message) {
            Ok(checked) => checked,
            Err((skill, why)) => {
                self.ledger.note(key, &skill, "refused", Some(&why)).await?;
                return finish(task, TaskState::Rejected, &why, None).await;
            }
        };
        let name = skill.spec.skill;
        let fault = self.faults.get(name);
        match fault {
            Some(FaultMode::Hang) => {
                self.ledger.note(key, name, "hung", None).await?;
                std::future::pending::<()>().await;
            }
            // A decline will be the same next time; a compensation that keeps failing
            // says nothing, and is tried again by the executor's policy.
            Some(mode @ (FaultMode::Decline | FaultMode::FailAlways)) => {
                self.ledger.note(key, name, "declined", None).await?;
                let why = format!("{name} declined (fault {mode} injected); nothing was applied");
                let class = (mode == FaultMode::Decline).then_some(FailureClass::Permanent);
                return failed(task, &why, class).await;
            }
            Some(FaultMode::TransientOnce) if self.first_failure(key) => {
                self.ledger
                    .note(key, name, "failed-transient", None)
                    .await?;
                let why = format!(
                    "{name} is busy (fault transient-once injected); nothing was applied, try again"
                );
                return failed(task, &why, Some(FailureClass::Transient)).await;
            }
            // `Unavailable` is answered by the transport layer before the call gets here.
            _ => {}
        }
        let hold = match fault {
            Some(FaultMode::ExpireEarly) => chrono::TimeDelta::zero(),
            _ => HOLD,
        };
        let forward = matches!(skill.spec.behaviour, Behaviour::Forward { .. });
        let call = Call {
            // A tool that ignores the key applies every call anew.
            key: key.filter(|_| !(forward && fault == Some(FaultMode::NotIdempotent))),
            skill: name,
            behaviour: skill.spec.behaviour,
            args: &args,
            hold,
            honour_tombstones: fault != Some(FaultMode::AcceptLate),
        };
        let mut result = match self.ledger.perform(call).await? {
            Outcome::Refused(why) => return finish(task, TaskState::Rejected, &why, None).await,
            Outcome::Applied(result) | Outcome::Replayed(result) => result,
        };
        if fault == Some(FaultMode::StrictUndo) && result.get("nothingToUndo").is_some() {
            let why = format!("{name} found nothing to undo (fault strict-undo injected)");
            return failed(task, &why, Some(FailureClass::Permanent)).await;
        }
        if fault == Some(FaultMode::BadOutput)
            && let Some(members) = result.as_object_mut()
            && let Some(first) = members.keys().next().cloned()
        {
            members.remove(&first);
        }
        if fault == Some(FaultMode::ApplyThenHang) {
            std::future::pending::<()>().await;
        }
        let summary = match skill.spec.behaviour {
            Behaviour::Undo { .. } => format!("{name} done"),
            Behaviour::Status { .. } => format!("{name} answered"),
            _ => format!("{name} applied"),
        };
        finish(task, TaskState::Completed, &summary, Some(result)).await
    }
}

/// Ends the task FAILED with a text reason and, when stated, its failure class (the
/// extension's `failure` in the status message's metadata).
async fn failed(task: &TaskHandle, text: &str, class: Option<FailureClass>) -> Result<()> {
    let message = agent_host::failure_message(text, class);
    task.set_status(TaskState::Failed, Some(message)).await?;
    Ok(())
}

/// Ends the task in `state` with a text reason and, on success, the result artifact.
async fn finish(
    task: &TaskHandle,
    state: TaskState,
    text: &str,
    result: Option<Value>,
) -> Result<()> {
    if let Some(result) = result {
        let artifact = Artifact {
            artifact_id: "result".into(),
            name: Some("result".into()),
            description: None,
            parts: vec![Part::data(result)],
            metadata: None,
            extensions: None,
        };
        task.add_artifact(artifact, false, true).await?;
    }
    task.set_status(state, Some(agent_host::agent_message(text, None)))
        .await?;
    Ok(())
}

#[async_trait::async_trait]
impl Agent for ToolAgent {
    async fn run(&self, ctx: RequestContext, task: TaskHandle, message: Message) {
        match self.handle(ctx, &task, message).await {
            Ok(()) => {}
            // The ledger's transaction did not commit: nothing was applied, and the
            // answer may say so.
            Err(e @ SupplierError::Ledger(_)) => {
                tracing::error!(agent = self.name, error = %e, "the ledger failed");
                let why = format!("internal error, nothing was applied: {e}");
                if let Err(e) = failed(&task, &why, Some(FailureClass::Transient)).await {
                    tracing::error!(agent = self.name, error = %e, "cannot end the task");
                }
            }
            // The task store failed, perhaps after the effect was applied: claim nothing
            // and leave the task open; the caller's timeout makes the outcome unknown,
            // and its retry with the same key replays the result.
            Err(e) => tracing::error!(agent = self.name, error = %e, "cannot answer the call"),
        }
    }
}
