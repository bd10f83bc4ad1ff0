//! Assembles a running planner from its settings: the task store (SQLite under the data
//! directory, or in memory), the planner's signed agent card, its inbound
//! authentication, the backend (deterministic rules, or a model), and the link to the
//! executor. The settings hold the planner's own key and nothing that reaches a tool.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_host::{
    HostConfig, InboundAuth, MemoryTaskStore, ServedCard, SqliteTaskStore, TaskManager, TaskStore,
    describe_auth, prepare_card,
};
use axum::Router;
use serde_json::{Value, json};
use shared_types::SigningIdentity;
use tokio_util::sync::CancellationToken;

use crate::agent::{Planner, PlannerAgent, PlannerConfig};
use crate::backend::{PlanBackend, RulesBackend};
use crate::error::{Error, Result};
use crate::executor::ExecutorLink;
use crate::llm::{LlmBackend, LlmConfig};
use crate::mandate::Grant;
use crate::templates::Templates;

/// Everything a planner is configured with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Holds `tasks.db`; `None` keeps tasks in memory (tests).
    pub data_dir: Option<PathBuf>,
    /// Signs plans, JWTs and the card; its kid is the planner's id.
    pub identity: SigningIdentity,
    /// The executor's base URL; more than one for replicas on one database (tried in
    /// order: the next once one cannot be reached).
    pub executor_urls: Vec<String>,
    /// The executor's id: the audience of the planner's JWTs.
    pub executor_id: String,
    /// The base URL clients reach the planner at (written into its card).
    pub public_url: String,
    /// Who may send goals; each task is then its sender's.
    pub auth: InboundAuth,
    /// A principal's signed mandate, as read: what goals without their own are planned
    /// under (see `PlannerConfig::mandate`). It must be granted to `identity`'s key id.
    pub mandate: Option<Value>,
    /// A model to ask for drafts; `None` plans with the deterministic rules.
    pub llm: Option<LlmConfig>,
    pub templates: Templates,
    /// How long a catalog read or a submission is tried again while the executor cannot
    /// be reached (`DEFAULT_EXECUTOR_RETRY` unless configured).
    pub executor_retry: Duration,
    /// How long the executor's progress gathers before it is written to the planner's
    /// task (`follow::GATHER_PROGRESS` by default; zero writes each status at once).
    pub gather_progress: Duration,
    /// How many times a goal whose saga unwound, or whose plan was refused for a reason a
    /// new plan may avoid, is planned again (`replan::DEFAULT_MAX_REPLANS` unless
    /// configured; 0 never).
    pub max_replans: u32,
    /// The OTLP/HTTP collector the planning spans go to (its base URL); `None` sends none.
    pub otlp_endpoint: Option<String>,
}

/// A built planner, ready to serve.
pub struct Service {
    pub router: Router,
    pub planner: Arc<Planner>,
    /// Where planning spans go, to send what is buffered at shutdown.
    pub traces: Option<Arc<agent_host::telemetry::Exporter>>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("planner", &self.planner)
            .finish_non_exhaustive()
    }
}

/// The planner's A2A card: one skill, `plan-and-execute`.
pub fn planner_card(planner_id: &str, backend: &str) -> Value {
    json!({
        "name": planner_id,
        "description": format!("Sagaplane intent plane: turns a goal into a typed plan signed by this planner, submits it to the executor and follows it. Plans with {backend}."),
        "version": env!("CARGO_PKG_VERSION"),
        "provider": {"organization": "Sagaplane", "url": "https://sagaplane.invalid"},
        "supportedInterfaces": [
            {"url": "", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["application/json", "text/plain"],
        "skills": [{
            "id": "plan-and-execute",
            "name": "Plan and execute a goal",
            "description": "Send the goal as a text part, optionally with a data part of parameters (the data part wins). The task carries the signed plan as artifact `plan` and the executor's task id in metadata `executorTaskId`, relays the executor's progress, and ends as the executor's task ends (AUTH_REQUIRED while it waits for an approver, who answers on the executor's task named in the status; this task takes no answer). `dryRun: true` returns the signed plan without submitting it. A plan runs under a principal's signed mandate (this planner's, or one given in the data part as `mandate`), embedded unchanged; a goal outside it (a skill out of its scope, more than its per-saga cap, past its window) or that cannot be planned is REJECTED with the reason.",
            "tags": ["planning", "saga"],
            "examples": [
                "Onboard supplier ACME GmbH, contact ops@acme.example, setup fee 120 EUR",
                "Onboard supplier ACME GmbH, contact ops@acme.example, setup fee 120 EUR, max spend 250 EUR, dry run"
            ],
            "inputModes": ["text/plain", "application/json"],
            "outputModes": ["application/json", "text/plain"]
        }]
    })
}

/// Opens the task store, builds the planner and its routes. Call `Planner::recover` on
/// the result before serving, so interrupted tasks resume.
pub fn build(settings: Settings, shutdown: CancellationToken) -> Result<Service> {
    build_with(
        settings,
        shutdown,
        agent_host::server::DEFAULT_MAX_CONCURRENT_REQUESTS,
    )
}

/// `build`, handling at most `max_concurrent_requests` requests at once.
pub fn build_with(
    settings: Settings,
    shutdown: CancellationToken,
    max_concurrent_requests: usize,
) -> Result<Service> {
    let mandate = settings
        .mandate
        .as_ref()
        .map(|signed| Grant::read(signed, &settings.identity))
        .transpose()
        .map_err(|why| Error::Config(format!("the planner's mandate: {why}")))?;
    let store: Arc<dyn TaskStore> = match &settings.data_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::Config(format!(
                    "cannot create the data directory {}: {e}",
                    dir.display()
                ))
            })?;
            Arc::new(
                SqliteTaskStore::open(&dir.join("tasks.db"))
                    .map_err(|e| Error::Config(format!("cannot open the task store: {e}")))?,
            )
        }
        None => Arc::new(MemoryTaskStore::new()),
    };
    let tasks = TaskManager::new(store);
    let identity = Arc::new(settings.identity);
    let backend: Arc<dyn PlanBackend> = match settings.llm {
        Some(config) => Arc::new(LlmBackend::new(config)?),
        None => Arc::new(RulesBackend::new(settings.templates.clone())),
    };
    let executor = ExecutorLink::replicas(
        &settings.executor_urls,
        &settings.executor_id,
        identity.clone(),
    )?;

    let card = describe_auth(
        planner_card(identity.kid(), &backend.name()),
        &settings.auth,
    );
    let card = prepare_card(card, &settings.public_url, Some(&identity))
        .and_then(|card| ServedCard::new(&card))
        .map_err(|e| Error::Config(format!("the planner's card: {e}")))?;
    let mut host = HostConfig::new(card, settings.auth);
    host.shutdown = shutdown.clone();
    host.max_concurrent_requests = max_concurrent_requests;

    let traces = match &settings.otlp_endpoint {
        Some(endpoint) => Some(Arc::new(
            agent_host::telemetry::Exporter::otlp(endpoint, identity.kid())
                .map_err(|e| Error::Config(e.to_string()))?,
        )),
        None => None,
    };
    let planner = Planner::new(
        PlannerConfig {
            identity,
            executor,
            backend,
            templates: settings.templates,
            shutdown,
            mandate,
            executor_retry: settings.executor_retry,
            gather_progress: settings.gather_progress,
            max_replans: settings.max_replans,
            traces: traces.clone(),
        },
        tasks.clone(),
    );
    let router = agent_host::app(&host, Arc::new(PlannerAgent(planner.clone())), tasks);
    Ok(Service {
        router,
        planner,
        traces,
    })
}
