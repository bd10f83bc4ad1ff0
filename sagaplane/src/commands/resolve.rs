//! `sagaplane task resolve`: a person's answer on a saga that waits for one, signed with
//! the approver's key (only an approver answers; docs/security.md). An approval is bound to
//! what it approves: the step and the arguments the executor shows on the task, whose
//! hash is computed again here, so what is printed is what is approved.

use std::path::PathBuf;

use agent_host::OutboundCall;
use agent_host::sdk::{PartContent, Task, TaskState};
use clap::Args;
use serde_json::{Value, json};
use shared_types::SigningIdentity;

use crate::a2a::{client, failure, state_name};
use crate::failure::Failure;
use crate::input::read_jwk;
use crate::output::pretty;

/// Who answers: an approver's key, and the name the executor knows it by.
#[derive(Debug, Args)]
pub struct Approver {
    /// The approver's private key (JWK): the answer goes with a short-lived JWT signed
    /// with it. The executor must trust its public key (`--approver`).
    #[arg(long, value_name = "KEY.jwk")]
    pub approver_key: PathBuf,
    /// The JWT's issuer: the approver's name at the executor (default: the key's kid).
    #[arg(long, value_name = "NAME")]
    pub issuer: Option<String>,
    /// The JWT's audience: the executor's name.
    #[arg(long, default_value = "executor")]
    pub audience: String,
    /// How long an approval holds, in seconds from now: the executor refuses it after,
    /// and refuses one that holds for more than an hour.
    #[arg(long, default_value_t = 300, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub approval_ttl_secs: u64,
}

impl Approver {
    /// A call with a fresh JWT (each is good for one request).
    fn call(&self, identity: &SigningIdentity) -> Result<OutboundCall, Failure> {
        let issuer = self
            .issuer
            .clone()
            .unwrap_or_else(|| identity.kid().to_owned());
        let jwt = agent_host::mint_jwt(identity, &issuer, &self.audience, 120)
            .map_err(|e| Failure::unusable(e.to_string()))?;
        Ok(OutboundCall {
            bearer: Some(jwt),
            ..OutboundCall::default()
        })
    }
}

/// What a person answers: a resolution, and for `withdraw` the step whose approval is
/// withdrawn.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    pub resolution: &'a str,
    pub step: Option<&'a str>,
}

/// The data part of a person's answer: for `approve`, bound to what `task` waits for
/// approval of (printed first), valid for `ttl_secs`; for `withdraw`, naming the saga
/// `task` runs and the step.
pub fn answer_for(task: &Task, answer: Answer<'_>, ttl_secs: u64) -> Result<Value, Failure> {
    let resolution = answer.resolution;
    if resolution == "withdraw" {
        let Some(step) = answer.step else {
            return Err(Failure::unusable(
                "withdraw needs --step: the step whose approval is withdrawn",
            ));
        };
        let saga_id = task
            .metadata
            .as_ref()
            .and_then(|m| m.get("sagaId"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Failure::rejected(format!(
                    "task {} runs no saga: nothing to withdraw",
                    task.id
                ))
            })?;
        println!("withdrawing the approval of step {step:?} of saga {saga_id:?}");
        return Ok(json!({
            "resolution": "withdraw",
            "withdrawal": {"sagaId": saga_id, "stepId": step},
        }));
    }
    if resolution != "approve" {
        return Ok(json!({ "resolution": resolution }));
    }
    let Some(shown) = awaiting_approval(task) else {
        return Err(Failure::rejected(format!(
            "task {} is {} and does not wait for an approval",
            task.id,
            state_name(&task.status.state)
        )));
    };
    let text = |key: &str| shown.get(key).and_then(Value::as_str).unwrap_or_default();
    let mut args = shown.get("args").cloned().unwrap_or(Value::Null);
    // A2A data parts carry numbers as doubles; the hash is of the integers they are.
    shared_types::json::normalize_integers(&mut args);
    let hash = shared_types::json::canonical_sha256(&args)
        .map_err(|e| Failure::rejected(format!("the arguments shown cannot be hashed: {e}")))?;
    if hash != text("argsSha256") {
        return Err(Failure::rejected(
            "the argsSha256 the task shows is not the hash of the arguments it shows: nothing was approved",
        ));
    }
    let ttl = chrono::Duration::seconds(i64::try_from(ttl_secs).unwrap_or(300));
    let expires_at = (chrono::Utc::now() + ttl).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    println!(
        "approving step {:?} of saga {:?}: {:?} on agent {:?}, until {expires_at}, with the arguments\n{}\nargsSha256 {hash}",
        text("stepId"),
        text("sagaId"),
        text("skill"),
        text("agent"),
        pretty(&args)
    );
    Ok(json!({
        "resolution": "approve",
        "approval": {
            "sagaId": text("sagaId"),
            "stepId": text("stepId"),
            "argsSha256": hash,
            "expiresAt": expires_at,
        }
    }))
}

/// What an executor's task waits for approval of: the `approval` member of its
/// INPUT_REQUIRED status's data part.
fn awaiting_approval(task: &Task) -> Option<&Value> {
    if task.status.state != TaskState::InputRequired {
        return None;
    }
    task.status
        .message
        .as_ref()?
        .parts
        .iter()
        .find_map(|p| match &p.content {
            PartContent::Data(v) => v.get("approval"),
            _ => None,
        })
}

/// Reads `task` on `agent` as the approver, then sends the answer on it; the task as the
/// agent answers.
pub async fn resolve(
    agent: &str,
    task: &str,
    answer: Answer<'_>,
    approver: &Approver,
) -> Result<Task, Failure> {
    let identity = SigningIdentity::from_jwk(&read_jwk(&approver.approver_key)?)
        .map_err(|e| Failure::unusable(format!("{}: {e}", approver.approver_key.display())))?;
    let client = client(agent)?;
    let current = client
        .get_task(&approver.call(&identity)?, task)
        .await
        .map_err(|e| failure("cannot get the task", e))?;
    let data = answer_for(&current, answer, approver.approval_ttl_secs)?;
    let request = super::task::data_message_on(task, data);
    match client
        .send(&approver.call(&identity)?, &request)
        .await
        .map_err(|e| failure("the agent refused the answer", e))?
    {
        agent_host::sdk::SendMessageResponse::Task(task) => Ok(task),
        agent_host::sdk::SendMessageResponse::Message(m) => Err(Failure::rejected(format!(
            "the agent answered without a task: {}",
            crate::a2a::message_text(&m)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use agent_host::agent_message;
    use agent_host::sdk::TaskStatus;

    use super::*;

    fn waiting_with(approval: Value) -> Task {
        Task {
            id: "t1".into(),
            context_id: "c1".into(),
            status: TaskStatus {
                state: TaskState::InputRequired,
                message: Some(agent_message(
                    "step s0r needs approval",
                    Some(json!({ "approval": approval })),
                )),
                timestamp: None,
            },
            artifacts: None,
            history: None,
            metadata: None,
        }
    }

    fn plain(resolution: &str) -> Answer<'_> {
        Answer {
            resolution,
            step: None,
        }
    }

    fn approve() -> Answer<'static> {
        plain("approve")
    }

    #[test]
    fn a_withdrawal_names_the_tasks_saga_and_the_step() {
        let mut task = waiting_with(json!({}));
        task.status.state = TaskState::Working;
        let withdraw = Answer {
            resolution: "withdraw",
            step: Some("s0r"),
        };
        assert!(answer_for(&task, withdraw, 300).is_err(), "no saga id");
        task.metadata = Some([("sagaId".to_owned(), json!("sg_1"))].into());
        assert_eq!(
            answer_for(&task, withdraw, 300).unwrap(),
            json!({"resolution": "withdraw", "withdrawal": {"sagaId": "sg_1", "stepId": "s0r"}})
        );
        assert!(
            answer_for(&task, plain("withdraw"), 300).is_err(),
            "no step"
        );
    }

    #[test]
    fn an_approval_names_the_step_and_the_hash_of_the_arguments_shown() {
        // As the arguments arrive in an A2A data part: numbers as doubles.
        let args = json!({"vendorId": "v_1", "amount": 12000.0});
        let hash =
            shared_types::json::canonical_sha256(&json!({"vendorId": "v_1", "amount": 12000}))
                .unwrap();
        let task = waiting_with(json!({
            "sagaId": "sg_1", "stepId": "s0r", "agent": "compliance-registry",
            "skill": "compliance.review", "args": args, "argsSha256": hash,
        }));
        let before = chrono::Utc::now();
        let answer = answer_for(&task, approve(), 300).unwrap();
        assert_eq!(answer["resolution"], "approve");
        assert_eq!(answer["approval"]["sagaId"], "sg_1");
        assert_eq!(answer["approval"]["stepId"], "s0r");
        assert_eq!(answer["approval"]["argsSha256"], json!(hash));
        let expires = answer["approval"]["expiresAt"].as_str().unwrap();
        let expires = chrono::DateTime::parse_from_rfc3339(expires).unwrap();
        let ttl = expires.signed_duration_since(before).num_seconds();
        assert!((298..=301).contains(&ttl), "{ttl}");
    }

    #[test]
    fn nothing_is_approved_when_the_hash_shown_is_not_that_of_the_arguments_shown() {
        let task = waiting_with(json!({
            "sagaId": "sg_1", "stepId": "s0r", "args": {"vendorId": "v_1"},
            "argsSha256": shared_types::json::canonical_sha256(&json!({"vendorId": "v_2"})).unwrap(),
        }));
        assert!(answer_for(&task, approve(), 300).is_err());
        let mut not_waiting = task.clone();
        not_waiting.status.state = TaskState::Working;
        assert!(answer_for(&not_waiting, approve(), 300).is_err());
        // An escalation's answer names nothing more.
        assert_eq!(
            answer_for(&not_waiting, plain("resolved-manually"), 300).unwrap(),
            json!({"resolution": "resolved-manually"})
        );
    }
}
