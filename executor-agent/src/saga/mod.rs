//! The saga: its spec (plan joined with curated declarations), its vocabulary, and the
//! pure engine.

mod approval;
pub mod deadline;
pub mod engine;
pub mod model;
pub mod spec;
mod views;

#[cfg(test)]
mod deadline_tests;
#[cfg(test)]
mod event_tests;
#[cfg(test)]
pub(crate) mod tests;

pub use engine::Saga;
pub use model::{
    Approval, CallOutcome, Command, Decider, Decision, Ending, Event, Invocation, Resolution,
    Target, Timer,
};
pub use spec::{SagaSpec, SpecError};
