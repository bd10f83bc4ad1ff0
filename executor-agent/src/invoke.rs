//! Calling tools. `Invoker` is what the driver needs; `A2aInvoker` calls A2A tool agents
//! with the executor's credential for each agent and the saga context of spec/reversibility-v1.md
//! (`Idempotency-Key`, `traceparent`, `baggage`, and the same context in message
//! metadata under the extension URI), and classifies each answer as success, definite
//! failure, or unknown outcome. `ToolInvoker` sends each call to the A2A or the MCP
//! invoker, by how its agent is registered.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agent_host::{AgentClient, OutboundCall, ToolAnswer};
use async_trait::async_trait;
use shared_types::{REVERSIBILITY_EXTENSION_URI, ReversibilityClass};

use crate::mcp::McpCallContext;
use crate::mcp::invoker::McpInvoker;
use crate::registry::{AgentKind, Registry};
use crate::saga::{CallOutcome, FailureClass, Invocation, Target};

/// The saga context that travels with every call.
#[derive(Debug, Clone)]
pub struct CallContext {
    pub saga_id: String,
    pub step_id: String,
    /// Why this call happens: the step whose failure caused a compensation.
    pub caused_by: Option<String>,
    /// The saga's W3C trace id (`trace_id(saga_id)`), worked out once per saga.
    pub trace_id: String,
    /// The id of this call's span (16 hex digits) when traces are sent: the parent id
    /// of the call's `traceparent`. `None`: a new one per call, reported nowhere.
    pub span_id: Option<String>,
    /// The step's reversibility class, for its span.
    pub class: Option<shared_types::ReversibilityClass>,
}

impl CallContext {
    /// The W3C baggage members of this call.
    pub fn baggage(&self) -> Vec<(String, String)> {
        let mut baggage = vec![
            ("sagaplane.saga".to_owned(), self.saga_id.clone()),
            ("sagaplane.step".to_owned(), self.step_id.clone()),
        ];
        if let Some(cause) = &self.caused_by {
            baggage.push(("sagaplane.caused-by".to_owned(), cause.clone()));
        }
        baggage
    }
}

/// Performs invocations.
#[async_trait]
pub trait Invoker: Send + Sync + 'static {
    async fn invoke(&self, invocation: &Invocation, context: &CallContext) -> CallOutcome;
}

/// Where an agent is and how the executor authenticates to it.
#[derive(Debug)]
pub struct Endpoint {
    pub client: AgentClient,
    pub bearer: Option<String>,
}

/// Calls A2A tool agents.
#[derive(Debug, Default)]
pub struct A2aInvoker {
    /// Each agent's client, carrying its credential; or why no call can be sent to it.
    endpoints: HashMap<String, std::result::Result<AgentClient, String>>,
}

impl A2aInvoker {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, agent: impl Into<String>, endpoint: Endpoint) {
        let client = match endpoint.bearer {
            Some(token) => endpoint
                .client
                .with_bearer(&token)
                .map_err(|e| e.to_string()),
            None => Ok(endpoint.client),
        };
        self.endpoints.insert(agent.into(), client);
    }
}

/// The W3C trace id of a saga: every call of one saga belongs to one trace.
pub fn trace_id(saga_id: &str) -> String {
    agent_host::telemetry::saga_trace_id(saga_id)
}

/// A W3C trace context: the saga's trace, and the call's span (a new one unless traced).
fn traceparent(context: &CallContext) -> String {
    let trace_id = &context.trace_id;
    match &context.span_id {
        Some(span) => format!("00-{trace_id}-{span}-01"),
        None => {
            let span = uuid::Uuid::new_v4().as_u64_pair().0;
            format!("00-{trace_id}-{span:016x}-01")
        }
    }
}

/// The class of a definite failure the tool did not mark: transient for a forward call
/// of a retriable skill (safe to repeat, as its class says); otherwise unstated, which
/// the engine treats as permanent for a forward call and retries for a compensation.
fn unmarked_failure(invocation: &Invocation, context: &CallContext) -> Option<FailureClass> {
    let forward = matches!(invocation.target, Target::Forward(_));
    (forward && context.class == Some(ReversibilityClass::Retriable))
        .then_some(FailureClass::Transient)
}

/// A definite failure that no retry can change (a refusal, a call that could not be made).
fn refused(reason: String) -> CallOutcome {
    CallOutcome::Failed {
        reason,
        failure: Some(FailureClass::Permanent),
    }
}

/// How a tool's answer counts for the saga; `unmarked` is the class of a FAILED task
/// that carries none.
pub fn outcome_of(answer: ToolAnswer, unmarked: Option<FailureClass>) -> CallOutcome {
    match answer {
        ToolAnswer::Completed(response) => CallOutcome::Succeeded { response },
        ToolAnswer::Failed { reason, marked } => CallOutcome::Failed {
            reason,
            failure: marked.or(unmarked),
        },
        // Refused or withdrawn: the same call is refused again, whatever it carries.
        ToolAnswer::Refused(reason) => refused(reason),
        ToolAnswer::Unknown(reason) => CallOutcome::Unknown { reason },
    }
}

#[async_trait]
impl Invoker for A2aInvoker {
    async fn invoke(&self, invocation: &Invocation, context: &CallContext) -> CallOutcome {
        // Nothing is sent without a client: a definite failure.
        let client = match self.endpoints.get(&invocation.call.agent) {
            Some(Ok(client)) => client,
            Some(Err(reason)) => return refused(reason.clone()),
            None => {
                return refused(format!("no endpoint for agent {}", invocation.call.agent));
            }
        };
        let request = agent_host::tool_call(
            &invocation.call.skill,
            &invocation.args,
            &agent_host::SagaContext {
                saga_id: context.saga_id.clone(),
                step_id: context.step_id.clone(),
                idempotency_key: invocation.idempotency_key.clone(),
                caused_by: context.caused_by.clone(),
                compensation: matches!(invocation.target, Target::Compensation(_)),
            },
        );
        let call = OutboundCall {
            // The client carries the agent's credential.
            bearer: None,
            idempotency_key: Some(invocation.idempotency_key.clone()),
            traceparent: Some(traceparent(context)),
            baggage: context.baggage(),
            extensions: vec![REVERSIBILITY_EXTENSION_URI.to_owned()],
            timeout: Duration::from_millis(invocation.call.timeout_ms),
        };
        let answer = agent_host::tool_answer(client.send(&call, &request).await);
        outcome_of(answer, unmarked_failure(invocation, context))
    }
}

/// Sends each call to the invoker for its agent's kind.
#[derive(Debug)]
pub struct ToolInvoker {
    pub a2a: A2aInvoker,
    pub mcp: Arc<McpInvoker>,
    pub registry: Registry,
}

#[async_trait]
impl Invoker for ToolInvoker {
    async fn invoke(&self, invocation: &Invocation, context: &CallContext) -> CallOutcome {
        match self.registry.agent(&invocation.call.agent) {
            Some(agent) if matches!(agent.kind, AgentKind::Mcp { .. }) => {
                let context = McpCallContext {
                    idempotency_key: invocation.idempotency_key.clone(),
                    saga_id: context.saga_id.clone(),
                    step_id: context.step_id.clone(),
                    caused_by: context.caused_by.clone(),
                    compensation: matches!(invocation.target, Target::Compensation(_)),
                    traceparent: traceparent(context),
                    baggage: agent_host::baggage_header(&context.baggage()),
                    unmarked: unmarked_failure(invocation, context),
                };
                self.mcp.invoke(&agent, invocation, context).await
            }
            _ => self.a2a.invoke(invocation, context).await,
        }
    }
}
