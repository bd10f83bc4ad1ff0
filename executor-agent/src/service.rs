//! Assembles a running executor from its settings: its stores (the state file in the data
//! directory, registry, journal and tasks in one SQLite database; or a PostgreSQL
//! database that replicas share), the executor's own agent card, its A2A endpoint
//! (planner and approver JWTs), the admin API (admin token) and the catalog (planner
//! JWTs).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_host::store::postgres::{PostgresFeed, PostgresTaskStore};
use agent_host::{
    HostConfig, InboundAuth, JwtPolicy, ServedCard, SqliteTaskStore, TaskManager, describe_auth,
    prepare_card,
};
use axum::Router;
use sagaplane_storage::postgres::Postgres;
use serde_json::{Value, json};
use shared_types::signing::Jwk;
use shared_types::{REVERSIBILITY_EXTENSION_URI, TrustStore};
use tokio_util::sync::CancellationToken;

use crate::agent::{Executor, ExecutorAgent, ExecutorConfig};
use crate::error::{Error, Result};
use crate::forwarding::Forwarding;
use crate::journal::{Journal, PauseAfter, PostgresJournal, SqliteJournal};
use crate::mandates::MandateBook;
use crate::mcp::invoker::McpInvoker;
use crate::registry::Registry;

/// Everything an executor is configured with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the registry, the journal and the A2A tasks are kept.
    pub store: Store,
    /// The executor's name: its card's name and the audience of planner JWTs.
    pub executor_id: String,
    /// The base URL clients reach the executor at (written into its card).
    pub public_url: String,
    /// Keys whose signature makes an agent card curated.
    pub platform_keys: TrustStore,
    /// Planners: issuer id and public key. The same keys are trusted to sign plans.
    pub planners: Vec<(String, Jwk)>,
    /// Principals whose signed mandates plans may run under; never a planner's key.
    pub principals: Vec<Jwk>,
    /// Approvers (people): issuer id and public key. Their JWTs (same audience and
    /// rules as planners') answer sagas that wait for a person and see every saga; their
    /// keys sign no plan. No name or key may be both a planner's and an approver's.
    pub approvers: Vec<(String, Jwk)>,
    /// The bearer token of the admin API (it also opens the console, as an operator's).
    pub admin_token: String,
    /// The operator token: it opens the console (read only), and nothing else.
    pub operator_token: Option<String>,
    /// The OTLP/HTTP collector saga spans are sent to (its base URL); `None` sends none.
    pub otlp_endpoint: Option<String>,
    /// The executor's credential for each tool agent, by agent name.
    pub credentials: HashMap<String, String>,
    /// Fault injection for crash tests: stop (without returning) after this many durable
    /// journal writes, so the process can be killed at exactly that point.
    pub pause_after_journal_writes: Option<u64>,
    /// How many sagas may act at once (`agent::DEFAULT_MAX_RUNNING_SAGAS` by default).
    pub max_running_sagas: usize,
    /// How many steps of one saga may be under way at once
    /// (`saga::spec::DEFAULT_MAX_PARALLEL_STEPS` by default); a plan may ask for fewer.
    pub max_parallel_steps: u32,
    /// The hosts a registration may make the executor fetch a card or a tool list from.
    pub registration_hosts: crate::http::RegistrationHosts,
    /// How near its deadline an open undo handle counts as expiring on `/metrics`.
    pub undo_expiring_within: Duration,
}

/// Where an executor keeps what it must not lose.
#[derive(Debug, Clone)]
pub enum Store {
    /// `executor.db` in this directory (created if missing), held by this process alone.
    DataDir(PathBuf),
    /// A PostgreSQL database that executor replicas share.
    Postgres(Replica),
}

/// An executor replica's hold on a shared PostgreSQL database.
#[derive(Clone)]
pub struct Replica {
    /// `postgres://user[:password]@host:port/database`; never logged.
    pub url: String,
    /// How long a claim on a saga holds without renewal: once it lapses, another replica
    /// takes the saga over.
    pub lease: Duration,
    /// How many connections the replica opens at most.
    pub connections: usize,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password.
        f.debug_struct("Replica")
            .field("lease", &self.lease)
            .field("connections", &self.connections)
            .finish_non_exhaustive()
    }
}

/// The stores an executor runs on.
struct Stores {
    registry: Registry,
    journal: Arc<dyn Journal>,
    tasks: Arc<TaskManager>,
    mandates: MandateBook,
    forwarding: Option<Arc<Forwarding>>,
}

/// `journal`, pausing after `pause_after` durable writes when that is set (crash tests).
fn paused<J: Journal>(journal: J, pause_after: Option<u64>) -> Arc<dyn Journal> {
    match pause_after {
        Some(n) => Arc::new(PauseAfter::writes(journal, n)),
        None => Arc::new(journal),
    }
}

async fn open_stores(
    settings: &Settings,
    platform_keys: TrustStore,
    principal_keys: TrustStore,
) -> Result<Stores> {
    match &settings.store {
        Store::DataDir(dir) => {
            std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                what: format!("cannot create the data directory {}", dir.display()),
                source,
            })?;
            let db = crate::state::open(dir)?;
            Ok(Stores {
                registry: Registry::on(&db, platform_keys)?,
                journal: paused(SqliteJournal::on(&db)?, settings.pause_after_journal_writes),
                tasks: TaskManager::new(Arc::new(SqliteTaskStore::on(&db)?)),
                mandates: MandateBook::on(&db, principal_keys)?,
                forwarding: None,
            })
        }
        Store::Postgres(replica) => {
            let db = Postgres::connect(&replica.url, replica.connections)?;
            let journal = PostgresJournal::on(&db).await?.with_lease(replica.lease);
            let store = PostgresTaskStore::on(&db).await?;
            let feed = PostgresFeed::start(&db).await?;
            tracing::info!(
                database = db.place(),
                "keeping the executor's state in PostgreSQL, shared with its replicas"
            );
            Ok(Stores {
                registry: Registry::on_postgres(&db, platform_keys).await?,
                journal: paused(journal, settings.pause_after_journal_writes),
                tasks: TaskManager::with_feed(Arc::new(store), Arc::new(feed)),
                mandates: MandateBook::on_postgres(&db, principal_keys).await?,
                forwarding: Some(Forwarding::start(&db).await?),
            })
        }
    }
}

/// A built executor, ready to serve.
pub struct Service {
    pub router: Router,
    pub executor: Arc<Executor>,
    /// Where saga spans go, to send what is buffered at shutdown (`Traces::shut_down`).
    pub traces: Option<Arc<crate::telemetry::Traces>>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service").finish_non_exhaustive()
    }
}

/// The executor's A2A card: one skill, `execute-plan`.
pub fn executor_card(executor_id: &str) -> Value {
    json!({
        "name": executor_id,
        "description": "Sagaplane execution plane: checks a signed plan against the curated registry before any side effect, then runs it as a durable saga (retries, compensation in reverse order, escalation to a person).",
        "version": env!("CARGO_PKG_VERSION"),
        "provider": {"organization": "Sagaplane", "url": "https://sagaplane.invalid"},
        "supportedInterfaces": [
            {"url": "", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ],
        "capabilities": {
            "streaming": true,
            "pushNotifications": false,
            "extensions": [{"uri": REVERSIBILITY_EXTENSION_URI, "required": false,
                "description": "Saga context on every tool call"}]
        },
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json", "text/plain"],
        "skills": [{
            "id": "execute-plan",
            "name": "Execute a signed plan",
            "description": "Send the signed plan as a data part. The task is REJECTED with every violation, or runs: a status update per step transition, the saga-ledger artifact, and INPUT_REQUIRED when a person must approve or resolve: an approver (never a planner) answers with {\"resolution\": \"retry\" | \"resolved-manually\" | \"compensate\"}, or {\"resolution\": \"approve\", \"approval\": {sagaId, stepId, argsSha256, expiresAt}} naming the step and arguments the status shows. Each planner sees only its own sagas; approvers see all.",
            "tags": ["saga", "execution"],
            "inputModes": ["application/json"],
            "outputModes": ["application/json", "text/plain"]
        }]
    })
}

/// Refuses a name or a key that is both a planner's and an approver's: a planner holding
/// an approver's identity would decide its own sagas.
fn distinct_roles(planners: &[(String, Jwk)], approvers: &[(String, Jwk)]) -> Result<()> {
    for (approver, key) in approvers {
        if let Some((planner, _)) = planners
            .iter()
            .find(|(name, planner_key)| name == approver || planner_key.x == key.x)
        {
            return Err(Error::Refused(format!(
                "approver {approver:?} has the name or the key of planner {planner:?}: a planner must not decide its own sagas"
            )));
        }
    }
    Ok(())
}

/// Opens the stores, builds the executor and its routes. Call `Executor::recover` on the
/// result before serving, so unfinished sagas resume.
pub async fn build(settings: Settings, shutdown: CancellationToken) -> Result<Service> {
    build_with(
        settings,
        shutdown,
        agent_host::server::DEFAULT_MAX_CONCURRENT_REQUESTS,
    )
    .await
}

/// `build`, handling at most `max_concurrent_requests` requests at once (A2A, admin,
/// catalog and metrics together).
pub async fn build_with(
    settings: Settings,
    shutdown: CancellationToken,
    max_concurrent_requests: usize,
) -> Result<Service> {
    let mut planner_keys = TrustStore::new();
    for (issuer, jwk) in &settings.planners {
        planner_keys
            .add_jwk(jwk)
            .map_err(|e| Error::Refused(format!("key of planner {issuer}: {e}")))?;
    }
    let mut principal_keys = TrustStore::new();
    for jwk in &settings.principals {
        // A planner that is also a principal would grant itself its budget.
        if let Some((issuer, _)) = settings
            .planners
            .iter()
            .chain(&settings.approvers)
            .find(|(_, p)| p.x == jwk.x)
        {
            return Err(Error::Refused(format!(
                "principal key {} is also the key of planner or approver {issuer}: a principal's key grants, and does nothing else",
                jwk.key_id()
            )));
        }
        principal_keys
            .add_jwk(jwk)
            .map_err(|e| Error::Refused(format!("principal key {}: {e}", jwk.key_id())))?;
    }
    distinct_roles(&settings.planners, &settings.approvers)?;
    // Every refusal of the settings above comes before a store is opened or created.
    let Stores {
        registry,
        journal,
        tasks,
        mandates,
        forwarding,
    } = open_stores(&settings, settings.platform_keys.clone(), principal_keys).await?;
    let callers: Vec<(String, Jwk)> = settings
        .planners
        .iter()
        .chain(&settings.approvers)
        .cloned()
        .collect();
    let policy = Arc::new(
        JwtPolicy::new(settings.executor_id.clone(), &callers)
            .map_err(|e| Error::Refused(e.to_string()))?,
    );
    let planner_auth = InboundAuth::Jwt(policy.clone());
    let admin_auth = InboundAuth::StaticBearer {
        name: "admin".into(),
        token: settings.admin_token.clone(),
    };

    let card = describe_auth(executor_card(&settings.executor_id), &planner_auth);
    let card = prepare_card(card, &settings.public_url, None)
        .and_then(|card| ServedCard::new(&card))
        .map_err(|e| Error::Refused(format!("the executor's card: {e}")))?;
    let mut host = HostConfig::new(card, planner_auth.clone());
    host.shutdown = shutdown.clone();
    host.max_concurrent_requests = max_concurrent_requests;

    let traces = match &settings.otlp_endpoint {
        Some(endpoint) => Some(Arc::new(
            crate::telemetry::Traces::otlp(endpoint, &settings.executor_id)
                .map_err(|e| Error::Refused(e.to_string()))?,
        )),
        None => None,
    };
    let mcp = Arc::new(McpInvoker::new(settings.credentials.clone()));
    let executor = Executor::new(
        ExecutorConfig {
            registry: registry.clone(),
            planner_keys,
            planner_key_ids: settings
                .planners
                .iter()
                .map(|(issuer, jwk)| (issuer.clone(), jwk.key_id()))
                .collect(),
            mandates,
            approvers: settings
                .approvers
                .iter()
                .map(|(issuer, _)| issuer.clone())
                .collect(),
            journal,
            // Both stores' tables are in one state file, or one database.
            tasks_beside_journal: true,
            credentials: settings.credentials,
            mcp: mcp.clone(),
            max_running_sagas: settings.max_running_sagas,
            max_parallel_steps: settings.max_parallel_steps,
            undo_expiring_within: settings.undo_expiring_within,
            forwarding,
            traces: traces.clone(),
            shutdown,
        },
        tasks.clone(),
    );
    if settings.registration_hosts.is_any() {
        tracing::info!(
            "registrations may fetch cards and MCP tool lists from any host; restrict them with --allow-registration-host"
        );
    }
    let admin = crate::http::Admin {
        registry,
        mcp,
        hosts: settings.registration_hosts,
    };
    // The admin API, the catalog and the metrics come under the same body limit as A2A.
    let mut console_tokens = vec![("admin".to_owned(), settings.admin_token.clone())];
    if let Some(token) = settings.operator_token.clone() {
        console_tokens.push(("operator".to_owned(), token));
    }
    let gate = crate::console::session::Gate::new(
        console_tokens,
        policy,
        settings
            .approvers
            .iter()
            .map(|(issuer, _)| issuer.clone())
            .collect(),
    );
    let console = Arc::new(crate::console::Console::new(executor.clone(), gate));
    let routes = crate::http::routes(admin, admin_auth.clone(), planner_auth)
        .merge(crate::http::metrics_routes(executor.clone()))
        .merge(crate::mandate_routes::routes(executor.clone(), admin_auth))
        .merge(crate::console::routes(console))
        .merge(crate::spec_routes::routes());
    let router = agent_host::app_with(
        &host,
        Arc::new(ExecutorAgent(executor.clone())),
        tasks,
        routes,
    );
    Ok(Service {
        router,
        executor,
        traces,
    })
}
