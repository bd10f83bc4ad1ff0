//! The six supplier-onboarding tool agents of the demo (docs/getting-started.md): real A2A servers on
//! the hosting layer that require a bearer token, honour `Idempotency-Key`, keep a durable
//! SQLite ledger of their effects, accept compensations of calls that never happened, and
//! take injected faults (by flag, or at runtime through `PUT /faults`).
//!
//! Start them in-process with [`start`] (one agent on a listener you bound) or
//! [`start_all`] (all six); talk to them with [`ToolClient`]; check a ledger with
//! [`check_ledger`].

mod agent;
mod check;
mod client;
mod faults;
mod ledger;
mod service;
mod skills;

pub use check::check_ledger;
pub use client::{ToolClient, task_data, task_text};
pub use faults::{FaultMode, Faults, parse_fault, scenario_faults};
pub use ledger::{CallRecord, Effect, EffectKind, LedgerReport, Tombstone};
pub use service::{RunningTool, SuiteSettings, ToolSettings, start, start_all};
pub use skills::{AGENTS, Behaviour, SKILLS, SkillSpec, agent_of, skills_of};

/// What can go wrong starting, running or calling a supplier tool agent.
#[derive(Debug, thiserror::Error)]
pub enum SupplierError {
    /// No such demo agent.
    #[error("unknown agent {0:?}; the demo agents are {agents}", agents = AGENTS.join(", "))]
    UnknownAgent(String),
    /// A fault, a scenario or a skill name that does not fit.
    #[error("{0}")]
    Config(String),
    /// The agent's card cannot be read, prepared or signed.
    #[error("agent card: {0}")]
    Card(String),
    /// The ledger's SQLite file failed.
    #[error("ledger: {0}")]
    Ledger(String),
    /// Binding, serving or calling failed.
    #[error("{0}")]
    Io(String),
    /// The hosting layer refused (store, configuration, an A2A error from a call).
    #[error(transparent)]
    Host(#[from] agent_host::Error),
}

/// Results of this module.
pub type Result<T, E = SupplierError> = std::result::Result<T, E>;
