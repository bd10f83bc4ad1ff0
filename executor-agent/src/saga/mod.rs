//! The saga: its spec (plan joined with curated declarations) and the pure engine.

pub mod engine;
pub mod model;
pub mod spec;

#[cfg(test)]
mod tests;

pub use engine::{
    CallOutcome, Command, Ending, Event, Invocation, Resolution, Saga, Target, Timer,
};
pub use spec::{SagaSpec, SpecError};
