//! Assembling and starting the tool agents: the card with the real URL (signed when a
//! platform key is given), the A2A service on `agent-host` with a static bearer token,
//! the ledger and task store under the data directory, and the extra routes
//! (`GET /ledger`, `GET|PUT /faults`) and the transport layer that answers 503 for
//! `unavailable` skills.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_host::auth::authenticate;
use agent_host::{
    HostConfig, InboundAuth, ServedCard, Serving, SqliteTaskStore, TaskManager, describe_auth,
    prepare_card,
};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::Value;
use shared_types::SigningIdentity;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::agent::ToolAgent;
use super::faults::{FaultMode, Faults};
use super::ledger::{Ledger, LedgerReport};
use super::skills::{AGENTS, agent_of};
use super::{Result, SupplierError};
use crate::admin::{error, ledger_answer};

/// How to run one tool agent.
#[derive(Clone)]
pub struct ToolSettings {
    /// One of [`AGENTS`].
    pub agent: String,
    /// Where `<agent>.ledger.db` and `<agent>.tasks.db` live (created if missing).
    pub data_dir: PathBuf,
    /// Where `<agent>.json`, the curated card, is read from.
    pub cards_dir: PathBuf,
    /// The bearer token callers must present.
    pub token: String,
    /// Signs the served card (the platform key the executor trusts).
    pub signer: Option<SigningIdentity>,
    /// Faults set at start, each on one of this agent's skills.
    pub faults: Vec<(String, FaultMode)>,
    /// Its listener's connection limits and requests in flight.
    pub serving: Serving,
}

impl std::fmt::Debug for ToolSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSettings")
            .field("agent", &self.agent)
            .field("data_dir", &self.data_dir)
            .field("cards_dir", &self.cards_dir)
            .field("signer", &self.signer)
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}

impl ToolSettings {
    /// Settings with the committed cards, no signature and no faults.
    pub fn new(agent: &str, data_dir: &Path, token: &str) -> Self {
        Self {
            agent: agent.to_owned(),
            data_dir: data_dir.to_owned(),
            cards_dir: crate::agent_cards_dir(),
            token: token.to_owned(),
            signer: None,
            faults: Vec::new(),
            serving: Serving::default(),
        }
    }
}

/// How to run all six agents: as [`ToolSettings`], with faults on any demo skill (each
/// goes to the agent that has the skill).
#[derive(Clone)]
pub struct SuiteSettings {
    pub data_dir: PathBuf,
    pub cards_dir: PathBuf,
    pub token: String,
    pub signer: Option<SigningIdentity>,
    pub faults: Vec<(String, FaultMode)>,
    /// Each agent's listener's connection limits and requests in flight.
    pub serving: Serving,
}

impl std::fmt::Debug for SuiteSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SuiteSettings")
            .field("data_dir", &self.data_dir)
            .field("cards_dir", &self.cards_dir)
            .field("signer", &self.signer)
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}

/// A tool agent being served.
#[derive(Debug)]
pub struct RunningTool {
    pub agent: &'static str,
    /// Its base URL (`http://127.0.0.1:PORT`), as written in its card.
    pub url: String,
    /// The card it serves (with its real URL; signed when a signer was given).
    pub card: Value,
    /// Its fault switches, to change in-process (the same ones `PUT /faults` sets).
    pub faults: Faults,
    ledger: Ledger,
    server: JoinHandle<agent_host::Result<()>>,
}

impl RunningTool {
    /// Its ledger as `GET /ledger` serves it.
    pub async fn ledger(&self) -> Result<LedgerReport> {
        self.ledger.report().await
    }

    /// Waits until the server has stopped (cancel the shutdown token first).
    pub async fn stopped(self) -> Result<()> {
        self.server
            .await
            .map_err(|e| SupplierError::Io(format!("the {} server panicked: {e}", self.agent)))?
            .map_err(SupplierError::from)
    }
}

fn agent_name(agent: &str) -> Result<&'static str> {
    AGENTS
        .iter()
        .find(|a| **a == agent)
        .copied()
        .ok_or_else(|| SupplierError::UnknownAgent(agent.to_owned()))
}

/// Starts `settings.agent` on `listener` until `shutdown` is cancelled.
pub async fn start(
    settings: ToolSettings,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<RunningTool> {
    let agent = agent_name(&settings.agent)?;
    std::fs::create_dir_all(&settings.data_dir).map_err(|e| {
        SupplierError::Io(format!(
            "cannot create {}: {e}",
            settings.data_dir.display()
        ))
    })?;
    let card_path = settings.cards_dir.join(format!("{agent}.json"));
    let text = std::fs::read_to_string(&card_path)
        .map_err(|e| SupplierError::Card(format!("cannot read {}: {e}", card_path.display())))?;
    let card = shared_types::json::parse_strict(&text)
        .map_err(|e| SupplierError::Card(format!("{}: {e}", card_path.display())))?;
    let address = listener
        .local_addr()
        .map_err(|e| SupplierError::Io(format!("listener of {agent}: {e}")))?;
    let url = format!("http://{address}");
    if settings.token.trim().is_empty() {
        return Err(SupplierError::Config(format!(
            "{agent}: the bearer token is empty"
        )));
    }
    let auth = InboundAuth::StaticBearer {
        name: "executor".into(),
        token: settings.token.clone(),
    };
    let card = prepare_card(describe_auth(card, &auth), &url, settings.signer.as_ref())?;

    let ledger = Ledger::open(&settings.data_dir.join(format!("{agent}.ledger.db")), agent)?;
    let faults = Faults::new(agent, &settings.faults)?;
    let tool = Arc::new(ToolAgent::new(
        agent,
        &card,
        ledger.clone(),
        faults.clone(),
    )?);
    let store = SqliteTaskStore::open(&settings.data_dir.join(format!("{agent}.tasks.db")))?;
    let tasks = TaskManager::new(Arc::new(store));
    let mut config = HostConfig::new(ServedCard::new(&card)?, auth.clone());
    config.shutdown = shutdown.clone();
    config.max_concurrent_requests = settings.serving.max_concurrent_requests;

    let admin = Admin {
        ledger: tool.ledger.clone(),
        faults: tool.faults.clone(),
    };
    let transport = Transport {
        admin: admin.clone(),
        token: settings.token.clone().into(),
        max_body_bytes: config.max_body_bytes,
    };
    let extra = Router::new()
        .route("/ledger", get(get_ledger))
        .route("/faults", get(get_faults).put(put_faults))
        .route_layer(from_fn_with_state(auth, authenticate))
        .with_state(admin);
    // The ledger and fault switches come under the same body limit as A2A.
    let router = agent_host::app_with(&config, tool, tasks, extra)
        .layer(from_fn_with_state(transport, unavailable));
    let server = tokio::spawn(agent_host::serve_with(
        listener,
        router,
        shutdown,
        settings.serving.connections,
    ));
    Ok(RunningTool {
        agent,
        url,
        card,
        faults,
        ledger,
        server,
    })
}

/// Starts all six agents, in [`AGENTS`] order, on `listen` (port 0: a free port each;
/// port P: P, P+1, …, P+5).
pub async fn start_all(
    settings: SuiteSettings,
    listen: SocketAddr,
    shutdown: CancellationToken,
) -> Result<Vec<RunningTool>> {
    for (skill, _) in &settings.faults {
        if agent_of(skill).is_none() {
            return Err(SupplierError::Config(format!(
                "no demo agent has a skill {skill:?}"
            )));
        }
    }
    let mut running = Vec::new();
    for (offset, agent) in (0u16..).zip(AGENTS) {
        let mut address = listen;
        if listen.port() != 0 {
            let port = listen.port().checked_add(offset).ok_or_else(|| {
                SupplierError::Config(format!("no port {offset} above {}", listen.port()))
            })?;
            address.set_port(port);
        }
        let listener = TcpListener::bind(address)
            .await
            .map_err(|e| SupplierError::Io(format!("cannot listen on {address}: {e}")))?;
        let faults = settings
            .faults
            .iter()
            .filter(|(skill, _)| agent_of(skill) == Some(agent))
            .cloned()
            .collect();
        let one = ToolSettings {
            agent: agent.to_owned(),
            data_dir: settings.data_dir.clone(),
            cards_dir: settings.cards_dir.clone(),
            token: settings.token.clone(),
            signer: settings.signer.clone(),
            faults,
            serving: settings.serving,
        };
        running.push(start(one, listener, shutdown.clone()).await?);
    }
    Ok(running)
}

/// What the extra routes work on.
#[derive(Debug, Clone)]
struct Admin {
    ledger: Ledger,
    faults: Faults,
}

async fn get_ledger(State(admin): State<Admin>) -> Response {
    ledger_answer(admin.ledger.report().await)
}

async fn get_faults(State(admin): State<Admin>) -> Response {
    axum::Json(admin.faults.snapshot()).into_response()
}

/// `PUT /faults {"<skill>": "<mode>" | "none", …}` replaces every fault of the agent.
async fn put_faults(State(admin): State<Admin>, body: Bytes) -> Response {
    let requested: BTreeMap<String, String> = match serde_json::from_slice(&body) {
        Ok(map) => map,
        Err(e) => {
            let why = format!("expected {{\"<skill>\": \"<mode>\", …}}: {e}");
            return error(StatusCode::BAD_REQUEST, &why);
        }
    };
    let mut faults = BTreeMap::new();
    for (skill, mode) in requested {
        if mode == "none" {
            continue;
        }
        match mode.parse::<FaultMode>() {
            Ok(mode) => {
                faults.insert(skill, mode);
            }
            Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
        }
    }
    match admin.faults.replace(faults) {
        Ok(()) => axum::Json(admin.faults.snapshot()).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

/// What the transport layer needs to answer 503 for `unavailable` skills.
#[derive(Debug, Clone)]
struct Transport {
    admin: Admin,
    token: Arc<str>,
    max_body_bytes: usize,
}

impl Transport {
    /// Whether the request carries the agent's token (only authenticated calls see the
    /// fault; the others go on to get their 401).
    fn authorized(&self, headers: &HeaderMap) -> bool {
        let given = agent_host::auth::bearer_token(headers).unwrap_or_default();
        let token = self.token.as_bytes();
        given.len() == token.len()
            && given
                .bytes()
                .zip(token)
                .fold(0u8, |acc, (x, y)| acc | (x ^ y))
                == 0
    }
}

/// The skill named by an A2A `SendMessage` body of either binding.
fn skill_in(body: &Value) -> Option<String> {
    let parts = body
        .pointer("/params/message/parts")
        .or_else(|| body.pointer("/message/parts"))?
        .as_array()?;
    parts
        .iter()
        .find_map(|p| p.pointer("/data/skill").and_then(Value::as_str))
        .map(str::to_owned)
}

/// Answers `503 Service Unavailable` for calls of skills set `unavailable`, before the
/// agent sees them.
async fn unavailable(State(transport): State<Transport>, request: Request, next: Next) -> Response {
    let faults = &transport.admin.faults;
    if request.method() != Method::POST
        || !faults.any(FaultMode::Unavailable)
        || !transport.authorized(request.headers())
    {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, transport.max_body_bytes).await else {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the request body is too large",
        );
    };
    let skill = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|call| skill_in(&call));
    if let Some(skill) = skill
        && faults.get(&skill) == Some(FaultMode::Unavailable)
    {
        let key = parts
            .headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok());
        if let Err(e) = transport
            .admin
            .ledger
            .note(key, &skill, "unavailable", None)
            .await
        {
            tracing::error!(error = %e, "cannot record a call");
        }
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            format!("{skill} is unavailable (fault injected)"),
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
