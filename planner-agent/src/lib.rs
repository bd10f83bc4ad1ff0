//! The intent plane: an A2A agent (skill `plan-and-execute`) that turns a goal into a
//! typed plan signed with the planner's key, checks it against the executor's curated
//! catalog, submits it to the executor and follows the saga. It holds no tool
//! credentials and contains no tool-invocation code: its only way out is the executor.
//!
//! # Behaviour on A2A
//!
//! A message carries the goal as a text part and, optionally, a data part of parameters
//! (grammar and names in [`goal`]). The planner's task then:
//!
//! 1. reads `GET {executor}/catalog` (planner JWT), composes a plan with its backend
//!    (the deterministic rules of [`compose`], or a model, [`llm`]), signs it, validates
//!    it against the same catalog, and adds it as artifact `plan` (metadata `sagaId`);
//! 2. with `dryRun`, ends COMPLETED there (metadata `dryRun: true`);
//! 3. otherwise submits it with `SendStreamingMessage` (a data part, a fresh EdDSA JWT:
//!    `iss` = the key's kid, `aud` = the executor's id, 120 s, new `jti`), records
//!    `executorTaskId` and `executorUrl`, says so in a WORKING status message, relays every
//!    executor status update as a WORKING update with the same text, and ends as the
//!    executor's task ends: COMPLETED; FAILED or CANCELED with `outcome` copied; REJECTED
//!    with the executor's violations (text and data part); or, while the executor's task
//!    waits for a person, AUTH_REQUIRED, naming the executor's task and URL on which an
//!    approver must answer. The planner's task refuses every further message, changing
//!    nothing (a planner never decides), and moves on when the executor's task does.
//!    Metadata `executorState` holds the executor task's last state.
//!
//! Every caller is authenticated (`Settings::auth`), and a task is its sender's: another
//! caller's GetTask, SubscribeToTask and CancelTask find no such task, and ListTasks
//! lists only the caller's own.
//!
//! # Mandates
//!
//! The planner holds no principal key and grants itself nothing. Every plan runs under a
//! principal's signed mandate (docs/security.md): the goal's own (data part `mandate`) or
//! else the planner's (`Settings::mandate`, `--mandate FILE`), embedded in the plan
//! exactly as received, the principal's signature intact ([`mandate`]). Before it signs,
//! the planner refuses (REJECTED, nothing submitted) a goal without a mandate, one whose
//! mandate is not granted to its key id or is signed by its own key, a plan with a skill
//! outside the mandate's scope, one that spends more than its per-saga cap (or budget)
//! or in another currency, and one outside its window (the worst-case path must end
//! before `notAfter`). A goal's `maxSpend` narrows what its plan may spend (more, or
//! another currency, is refused); it cannot widen the mandate. A goal cannot set an
//! expiry (`expiresAt`, `expiresInSeconds`: refused; the mandate's window governs).
//! The principal's signature, whether the principal is trusted, revocation and the
//! budget left across sagas are the executor's to check.
//!
//! A goal that cannot be planned (no template, a required input nobody provides, no skill
//! for the outcome, parameters that fail a schema, or a plan outside its mandate) ends
//! REJECTED with a sentence saying what is missing, and nothing is submitted. With a
//! model ([`llm`]), a refused draft goes back to the model with its refusals (at most
//! `LlmConfig::max_repairs` times) and is kept in the plan's
//! `authoredBy.rejectedAlternatives`; when no draft passes, the task ends REJECTED with
//! every draft in its status's data part. A model server that fails, an unreachable
//! executor, or a plan that fails validation (a planner bug) ends FAILED. `CancelTask` before submission cancels at once; after, it cancels the
//! executor's task and mirrors its end (past the pivot the executor refuses, and so does
//! the planner). After a restart, [`Planner::recover`] follows submitted tasks again,
//! resubmits composed plans (the executor answers an identical plan with the task it
//! has) and fails tasks that had no plan yet.
//!
//! # In-process use (tests)
//!
//! [`service::build`] with [`Settings`] (`data_dir: None` keeps tasks in memory; `llm:
//! None` uses the rules) returns the axum router and the [`Planner`]; call
//! `planner.recover()`, then serve the router with `agent_host::serve` on a listener.
//!
//! # Modules
//!
//! `goal` reads goals, `mandate` the grant a plan runs under, `templates` names outcomes, `compose` is the deterministic planner
//! (and the assembly every backend shares), `backend` the trait behind which `llm` is
//! the optional model, `executor` the link to the executor, `agent` and `follow` the A2A
//! agent, `service` its assembly from `Settings`.

pub mod agent;
pub mod backend;
pub mod compose;
pub mod error;
pub mod executor;
mod follow;
pub mod goal;
pub mod llm;
pub mod mandate;
pub mod replan;
mod retry;
pub mod service;
pub mod templates;

pub use agent::{Planner, PlannerAgent, PlannerConfig};
pub use backend::{PlanBackend, PlanRequest, RulesBackend};
pub use error::{Error, Result};
pub use follow::GATHER_PROGRESS;
pub use goal::Goal;
pub use llm::{LlmBackend, LlmConfig};
pub use mandate::Grant;
pub use retry::DEFAULT_EXECUTOR_RETRY;
pub use service::{Service, Settings, build};
pub use templates::{GoalTemplate, Templates};
