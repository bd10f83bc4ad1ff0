//! The A2A 1.0 hosting layer every Sagaplane agent stands on: the SDK's bindings behind
//! our own request handler, a durable task store, authentication, the agent card, and
//! protocol checks the SDK leaves open.

pub mod agent;
pub mod auth;
pub mod body_check;
pub mod card;
#[cfg(feature = "cli")]
pub mod cli;
pub mod client;
pub mod cpu;
pub mod error;
pub mod handler;
pub mod health;
pub mod modes;
pub mod process;
pub mod protocol;
mod replay;
pub mod sdk;
pub mod server;
pub mod store;
pub mod tasks;
pub mod telemetry;

pub use agent::{
    Accepted, Agent, OWNER_METADATA, Reply, RequestContext, Viewed, agent_message, user_request,
};
pub use auth::{Caller, InboundAuth, JwtPolicy, mint_jwt};
pub use body_check::BodyLimits;
pub use card::{ServedCard, describe_auth, prepare_card};
pub use client::{
    AgentClient, MAX_FETCHED_DOCUMENT_BYTES, OutboundCall, SagaContext, ToolAnswer, baggage_header,
    failure_message, read_capped, tool_answer, tool_call,
};
pub use error::{Error, Result};
pub use server::{ConnectionLimits, HostConfig, Serving, app, app_with, serve, serve_with};
pub use store::{MemoryTaskStore, SqliteTaskStore, TaskStore};
pub use tasks::{Prepared, Subscription, TaskHandle, TaskManager, Watch};
