//! The execution plane: registry of curated cards, plan intake, and the saga engine.
//! The engine (`saga::engine`) is pure: events in, commands out. The journal makes every
//! event and every call's intent durable first; recovery replays it after a crash.

pub mod agent;
pub mod answers;
pub mod authority;
pub mod console;
pub mod driver;
pub mod error;
pub mod forwarding;
pub mod http;
pub mod invoke;
pub mod journal;
pub mod mandate_routes;
pub mod mandates;
pub mod mcp;
pub mod metrics;
pub mod progress;
pub mod recovery;
pub mod registry;
pub mod registry_history;
pub mod saga;
pub mod service;
pub mod slots;
pub mod spec_routes;
pub mod state;
mod sync;
pub mod taking_in;
pub mod task_view;
pub mod telemetry;

pub use error::{Error, Result};
