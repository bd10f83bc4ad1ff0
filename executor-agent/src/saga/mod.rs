//! The saga: its spec (plan joined with curated declarations), its vocabulary, and the
//! pure engine.

mod approval;
mod authority;
mod branches;
pub mod deadline;
mod decisions;
pub mod engine;
pub mod model;
pub mod spec;
mod verification;
mod views;

#[cfg(test)]
mod approval_args_tests;
#[cfg(test)]
mod approval_tests;
#[cfg(test)]
mod authority_tests;
#[cfg(test)]
mod branches_tests;
#[cfg(test)]
mod deadline_tests;
#[cfg(test)]
mod event_tests;
#[cfg(test)]
mod failure_tests;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod undo_verification_tests;
#[cfg(test)]
mod verification_tests;
#[cfg(test)]
mod views_tests;

pub use authority::MandateEndEffect;
pub use engine::Saga;
pub use model::{
    Approval, CallOutcome, Command, Decider, Decision, Ending, Event, FailureClass, Invocation,
    Resolution, Target, Timer, Withdrawal,
};
pub use spec::{SagaSpec, SpecError};
pub use verification::{UNDO_NOT_APPLIED, verification_key};
