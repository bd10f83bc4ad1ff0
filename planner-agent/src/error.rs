//! The planner library's one error type. Variants exist where the planner branches: a
//! goal it cannot satisfy, or none of whose model drafts passed, ends its task REJECTED;
//! everything else ends it FAILED.

/// What can go wrong between a goal and a submitted plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The goal cannot be planned from the catalog (no template, a required input nobody
    /// provides, no skill for the outcome, a mandate too small): the sentence says what
    /// is missing. The planner's task ends REJECTED.
    #[error("{0}")]
    Unsatisfiable(String),
    /// Every draft a model wrote for the goal was refused (not JSON, not a draft, an
    /// unknown skill, an authored compensation, violations), its repairs included:
    /// nothing is repaired silently. The planner's task ends REJECTED, `drafts` (each
    /// `{"draft", "refusals"}`) in its status's data part.
    #[error("{summary}")]
    DraftsRefused {
        summary: String,
        drafts: Vec<serde_json::Value>,
    },
    /// The model endpoint failed (unreachable, an HTTP error, no answer in time).
    #[error("{0}")]
    Backend(String),
    /// The executor refused the planner's call, or answered it with what the planner
    /// cannot use.
    #[error("{0}")]
    Executor(String),
    /// The executor could not be reached, answered with a server error, or its answer
    /// was lost: whether it acted is unknown, and the same call may be made again.
    #[error("{0}")]
    ExecutorUnavailable(String),
    /// The planner composed a plan that does not validate: a planner bug, reported and
    /// never submitted.
    #[error("{0}")]
    Defect(String),
    /// Configuration that cannot work (a key, the task store, a URL).
    #[error("{0}")]
    Config(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
