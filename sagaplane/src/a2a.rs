//! Talking to any A2A agent from the command line: credentials (a static bearer token or
//! an EdDSA JWT minted from a key), a small runtime per command, and how tasks and their
//! updates are printed.

use std::path::PathBuf;

use agent_host::sdk::{Artifact, Message, PartContent, StreamResponse, Task, TaskState};
use agent_host::{AgentClient, OutboundCall};
use clap::Args;
use serde_json::Value;
use shared_types::SigningIdentity;

use crate::failure::Failure;
use crate::input::read_jwk;

/// How to authenticate to the agent.
#[derive(Debug, Clone, Args)]
pub struct Credentials {
    /// Static bearer token (also from SAGAPLANE_TOKEN).
    #[arg(long, env = "SAGAPLANE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Read the static bearer token from this file instead (it stays out of the
    /// process list and the shell's history).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["token", "jwt_key"])]
    pub token_file: Option<PathBuf>,
    /// Sign a short-lived JWT with this private key (its kid is the issuer) instead.
    #[arg(long, value_name = "KEY.jwk", conflicts_with = "token")]
    pub jwt_key: Option<PathBuf>,
    /// The audience of that JWT: the agent's name.
    #[arg(long, default_value = "executor")]
    pub audience: String,
}

impl Credentials {
    /// A call context with a fresh credential (a JWT is good for one request only).
    pub fn call(&self) -> Result<OutboundCall, Failure> {
        if let Some(path) = &self.token_file {
            let token = crate::input::read_text(path)?.trim().to_owned();
            if token.is_empty() {
                return Err(Failure::unusable(format!("{} is empty", path.display())));
            }
            return Ok(OutboundCall {
                bearer: Some(token),
                ..OutboundCall::default()
            });
        }
        let bearer = match (&self.token, &self.jwt_key) {
            (Some(token), _) => Some(token.clone()),
            (None, Some(path)) => {
                let identity = SigningIdentity::from_jwk(&read_jwk(path)?)
                    .map_err(|e| Failure::unusable(format!("{}: {e}", path.display())))?;
                let issuer = identity.kid().to_owned();
                Some(
                    agent_host::mint_jwt(&identity, &issuer, &self.audience, 120)
                        .map_err(|e| Failure::unusable(e.to_string()))?,
                )
            }
            (None, None) => None,
        };
        Ok(OutboundCall {
            bearer,
            ..OutboundCall::default()
        })
    }
}

/// Runs `work` on a runtime of its own: the rest of the command line is synchronous.
pub fn block_on<T>(work: impl Future<Output = Result<T, Failure>>) -> Result<T, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::unusable(format!("cannot start the runtime: {e}")))?
        .block_on(work)
}

pub fn client(url: &str) -> Result<AgentClient, Failure> {
    AgentClient::new(url).map_err(|e| Failure::unusable(e.to_string()))
}

/// An A2A error as one line: the agent's own message where it gave one.
pub fn failure(what: &str, error: agent_host::Error) -> Failure {
    match error {
        // The SDK's client reports an unreachable agent as an internal error.
        agent_host::Error::Protocol(e) if e.code == -32603 => {
            Failure::unusable(format!("{what}: {}", e.message))
        }
        agent_host::Error::Protocol(e) => {
            Failure::rejected(format!("{what}: {} ({})", e.message, e.code))
        }
        other => Failure::unusable(format!("{what}: {other}")),
    }
}

/// `TASK_STATE_WORKING` → `WORKING`.
pub fn state_name(state: &TaskState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .map_or_else(
            || format!("{state:?}"),
            |s| s.trim_start_matches("TASK_STATE_").to_owned(),
        )
}

/// The text of a message, its parts joined; data parts as compact JSON.
pub fn message_text(message: &Message) -> String {
    message
        .parts
        .iter()
        .filter_map(|p| match &p.content {
            PartContent::Text(t) => Some(t.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The first data part of an artifact.
pub fn artifact_data(artifact: &Artifact) -> Option<&Value> {
    artifact.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(v) => Some(v),
        _ => None,
    })
}

/// One line per stream event: time, state, and what happened.
pub fn event_line(event: &StreamResponse) -> Option<String> {
    let now = chrono::Utc::now().format("%H:%M:%S%.3f");
    match event {
        StreamResponse::Task(task) => Some(format!(
            "{now}  {:<15} task {}",
            state_name(&task.status.state),
            task.id
        )),
        StreamResponse::StatusUpdate(update) => {
            let text = update
                .status
                .message
                .as_ref()
                .map(message_text)
                .unwrap_or_default();
            // A status that says nothing while the task goes on is no line of its own.
            if text.trim().is_empty() && !stopped(&update.status.state) {
                return None;
            }
            Some(format!(
                "{now}  {:<15} {}",
                state_name(&update.status.state),
                text.replace('\n', "\n                               ")
            ))
        }
        StreamResponse::ArtifactUpdate(_) | StreamResponse::Message(_) => None,
    }
}

/// Whether a task has stopped: ended, or waiting for someone.
pub fn stopped(state: &TaskState) -> bool {
    agent_host::sdk::is_terminal(state) || agent_host::sdk::is_interrupted(state)
}

/// What a task that stopped means for the exit status: 0 completed, 1 failed, rejected
/// or canceled, 3 waiting for a person.
pub fn outcome(task: &Task) -> Result<(), Failure> {
    let reason = task
        .status
        .message
        .as_ref()
        .map(message_text)
        .unwrap_or_default();
    match task.status.state {
        TaskState::Completed => Ok(()),
        TaskState::InputRequired | TaskState::AuthRequired => Err(Failure {
            status: 3,
            message: format!(
                "task {} is waiting for a person ({}): {reason}",
                task.id,
                state_name(&task.status.state)
            ),
        }),
        ref state => Err(Failure::rejected(format!(
            "task {} ended {}: {reason}",
            task.id,
            state_name(state)
        ))),
    }
}
