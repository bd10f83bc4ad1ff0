//! The saga's vocabulary: the events the engine takes, the commands it gives, and the
//! per-step ledger records it keeps. Plain data, serialisable for the journal.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::deadline::UndoDeadline;
use super::spec::CallSpec;

pub use shared_types::reversibility::FailureClass;

/// Which call an invocation or result belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "step", rename_all = "camelCase")]
pub enum Target {
    Forward(usize),
    Compensation(usize),
    /// The call asking whether step `i`'s call in doubt took effect: its compensation's
    /// while that is being verified (`Undo::Verifying`), else its forward call's.
    /// Read-only, made under a key of its own.
    Verification(usize),
}

impl Target {
    /// The step it is a call of.
    pub fn step(self) -> usize {
        match self {
            Self::Forward(i) | Self::Compensation(i) | Self::Verification(i) => i,
        }
    }
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum CallOutcome {
    /// The tool completed; its result.
    Succeeded { response: Value },
    /// The tool said no (FAILED, REJECTED, a protocol refusal): nothing took effect.
    Failed {
        reason: String,
        /// Whether the same call may succeed later, as the tool said or its skill's class
        /// implies (`None`: unmarked, and not retriable; journals before classes).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<FailureClass>,
    },
    /// No answer we can trust (timeout, 5xx, dropped connection): it may have taken effect.
    Unknown { reason: String },
}

impl CallOutcome {
    /// A definite failure whose class nobody stated.
    pub fn failed(reason: impl Into<String>) -> Self {
        Self::Failed {
            reason: reason.into(),
            failure: None,
        }
    }
}

/// What a person answers to a paused saga.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Resolution {
    Approve,
    Retry,
    ResolvedManually,
    Compensate,
    /// An approval given earlier is withdrawn before its step's next call (a retry).
    Withdraw,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Who answered a paused saga and, for an approval, what they approved: the input a
/// resolution comes with, checked by the executor before it reaches the engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decider {
    /// The approver: the issuer of the JWT the answer came with.
    pub by: String,
    /// For `approve`: the step and arguments approved, and until when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// For `withdraw`: the approval withdrawn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdrawal: Option<Withdrawal>,
    /// The id of the A2A message the answer came in (absent in journals written before
    /// it was kept): the saga's task shows the answer under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

/// What an approval approves: one step of one saga, with exactly these arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    pub saga_id: String,
    pub step_id: String,
    /// Lowercase hex SHA-256 of the RFC 8785 form of the step's bound arguments.
    pub args_sha256: String,
    /// The approval is void after this instant (milliseconds since the Unix epoch).
    pub expires_at_ms: i64,
}

/// What a withdrawal withdraws: the approval of one step of one saga.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Withdrawal {
    pub saga_id: String,
    pub step_id: String,
}

/// A person's decision as the ledger keeps it (on the step the saga waited at).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub by: String,
    pub resolution: Resolution,
    pub at_ms: i64,
    /// For an approval: the arguments approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_sha256: Option<String>,
    /// For an approval: when it lapses (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
}

/// Timers the engine asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "timer", rename_all = "camelCase")]
pub enum Timer {
    Retry {
        target: Target,
        attempt: u32,
    },
    /// The wait for step `step`'s approval ends. `round` counts the approvals the step had
    /// before this wait (0 the first time it is asked): a timer of an earlier wait, whose
    /// approval was given and then withdrawn or lapsed, does not end this one.
    ApprovalTimeout {
        step: usize,
        #[serde(default, skip_serializing_if = "is_zero")]
        round: u32,
    },
    MandateExpiry,
}

/// Everything that can happen to a saga. The driver journals each before `step`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "camelCase")]
pub enum Event {
    Start {
        now_ms: i64,
    },
    Result {
        target: Target,
        attempt: u32,
        outcome: CallOutcome,
        now_ms: i64,
    },
    TimerFired {
        timer: Timer,
        now_ms: i64,
    },
    Resolve {
        resolution: Resolution,
        now_ms: i64,
        /// Who decided (absent in journals written before approvers existed).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decider: Option<Decider>,
    },
    Cancel {
        now_ms: i64,
    },
    /// The driver holds a saga slot for the approved step (`Forward::Approved`): its call
    /// is made now, if its approval still stands.
    Proceed {
        now_ms: i64,
    },
    /// The principal revoked the saga's mandate: as its expiry, before the pivot.
    MandateRevoked {
        now_ms: i64,
    },
    /// After a restart: the journaled invocation had no journaled result.
    InFlightLost {
        target: Target,
        attempt: u32,
        now_ms: i64,
    },
    /// After a restart: replay derived this call otherwise than its journaled intent (an
    /// upgrade that binds arguments differently). The journaled call is what stands for
    /// it from now on, and the saga stops for a person, who sees both.
    ReplayDiverged {
        target: Target,
        attempt: u32,
        /// The intent as journaled (what was, or may have been, sent).
        journaled: Box<Invocation>,
        /// The arguments and key replay derived instead.
        derived_args: Value,
        derived_key: String,
        now_ms: i64,
    },
}

impl Event {
    /// When it happened (ms since the Unix epoch), as it was given to the engine.
    pub fn now_ms(&self) -> i64 {
        match self {
            Self::Start { now_ms }
            | Self::Result { now_ms, .. }
            | Self::TimerFired { now_ms, .. }
            | Self::Resolve { now_ms, .. }
            | Self::Cancel { now_ms }
            | Self::Proceed { now_ms }
            | Self::MandateRevoked { now_ms }
            | Self::InFlightLost { now_ms, .. }
            | Self::ReplayDiverged { now_ms, .. } => *now_ms,
        }
    }

    /// Whether stepping it may call a tool at once, so that the driver must hold a saga
    /// slot first. An answer that approves or withdraws never calls: an approved step
    /// waits for `Proceed`, which is what lets an approval be withdrawn before its call.
    pub fn may_call(&self) -> bool {
        !matches!(
            self,
            Self::Resolve {
                resolution: Resolution::Approve | Resolution::Withdraw,
                ..
            }
        )
    }

    /// The event's name, as journaled.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Start { .. } => "start",
            Self::Result { .. } => "result",
            Self::TimerFired { .. } => "timerFired",
            Self::Resolve { .. } => "resolve",
            Self::Cancel { .. } => "cancel",
            Self::Proceed { .. } => "proceed",
            Self::MandateRevoked { .. } => "mandateRevoked",
            Self::InFlightLost { .. } => "inFlightLost",
            Self::ReplayDiverged { .. } => "replayDiverged",
        }
    }
}

/// One call to make. The driver journals it before calling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Invocation {
    pub target: Target,
    pub attempt: u32,
    pub call: CallSpec,
    pub args: Value,
    pub idempotency_key: String,
}

/// How the saga ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Ending {
    Completed,
    /// Failed, and every completed effect was undone.
    Compensated,
    /// Canceled, and every completed effect was undone.
    Canceled,
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "camelCase")]
pub enum Command {
    Invoke(Invocation),
    StartTimer {
        timer: Timer,
        after_ms: u64,
    },
    /// A step transition to show (status update; the ledger artifact is refreshed too).
    Report {
        step: String,
        what: String,
    },
    /// Wait for a person (INPUT_REQUIRED).
    Pause {
        reason: String,
    },
    Finish {
        ending: Ending,
        reason: String,
    },
    RefuseCancel {
        reason: String,
    },
    /// The event did not apply to the saga as it stands (a late answer, a timer of a
    /// wait that ended, a cancel while it unwinds already): nothing changed.
    Ignored {
        event: String,
        why: String,
    },
}

impl Command {
    /// Whether people see it (on the saga's task): a report, a pause or the end.
    pub fn is_shown(&self) -> bool {
        matches!(
            self,
            Self::Report { .. } | Self::Pause { .. } | Self::Finish { .. }
        )
    }
}

/// A step's forward record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum Forward {
    Pending,
    AwaitingApproval,
    /// Approved, and not called yet: called on `Event::Proceed`, once the driver holds a
    /// saga slot. Until then no effect of the step exists, and the approval may still be
    /// withdrawn.
    Approved,
    Running {
        attempt: u32,
    },
    /// Attempt `attempt` failed and the same key is tried again once its backoff ends.
    /// `in_doubt`: its outcome is unknown (it may have taken effect); otherwise it failed
    /// definitely, and nothing of the step took effect yet.
    WaitingRetry {
        attempt: u32,
        #[serde(
            default,
            rename = "inDoubt",
            skip_serializing_if = "std::ops::Not::not"
        )]
        in_doubt: bool,
    },
    /// The response is shared (`Arc`): records are cloned and compared at every report,
    /// and an unchanged response then costs a pointer, not a walk of its tree.
    Succeeded {
        response: Arc<Value>,
        at_ms: i64,
    },
    Failed {
        reason: String,
    },
    /// Attempt `attempt`'s outcome is unknown, and the tool is being asked whether it
    /// took effect (the step's verification call is out).
    Verifying {
        attempt: u32,
        reason: String,
    },
    Unknown {
        reason: String,
    },
    ResolvedManually,
}

/// A step's compensation record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum Undo {
    NotNeeded,
    Pending,
    Running {
        attempt: u32,
    },
    WaitingRetry {
        attempt: u32,
    },
    Done,
    /// Attempt `attempt`'s outcome is unknown, and the tool is being asked whether it
    /// took effect (the compensation's verification call is out).
    Verifying {
        attempt: u32,
        reason: String,
    },
    /// Nothing to undo: the forward call failed definitely, or never ran.
    NothingToUndo,
    Unavailable {
        reason: String,
    },
    DeadLettered {
        reason: String,
    },
    ResolvedManually,
}

/// The per-step ledger entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepRecord {
    pub forward: Forward,
    pub attempts: u32,
    /// The arguments actually sent (bound), once known (shared, as a response is).
    pub request: Option<Arc<Value>>,
    pub undo: Undo,
    pub undo_attempts: u32,
    /// The compensation's arguments as sent (bound), once it was called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_request: Option<Arc<Value>>,
    /// What the compensation answered, once it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_response: Option<Arc<Value>>,
    /// What people decided while the saga waited at this step, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<Decision>,
    /// When the forward call was first made (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<i64>,
    /// A compensable step's undo deadline, from its success on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_deadline: Option<UndoDeadline>,
}

/// Where the saga stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "camelCase")]
pub enum Phase {
    NotStarted,
    Forward { step: usize },
    Unwinding { cause: Cause },
    Paused { on: PauseOn, reason: String },
    Done { ending: Ending },
}

/// Why the saga unwinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Cause {
    Failure,
    Canceled,
    MandateExpired,
    MandateRevoked,
}

/// What a pause waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "on", rename_all = "camelCase")]
pub enum PauseOn {
    Approval { step: usize },
    Forward { step: usize },
    Compensation { step: usize, cause: Cause },
}
