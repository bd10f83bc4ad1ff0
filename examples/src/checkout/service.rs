//! Assembling and starting the checkout server: rmcp's streamable HTTP service at `/mcp`
//! (2026-07-28 stateless requests and legacy `initialize` sessions alike) behind an HTTP
//! layer that reads what rmcp's typed requests drop and adds `annotations.recovery` to
//! `tools/list`; `GET /ledger`, `GET|PUT /faults`; an optional bearer token; and the
//! HTTP helpers the demo and tests use to read the ledger and flip the switches.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_host::InboundAuth;
use agent_host::auth::authenticate;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::ledger::Ledger;
use super::report::LedgerReport;
use super::server::{CheckoutServer, ListingSwitches, RawCallParams};
use super::sse::annotate_response;
use super::tools::{CheckoutSwitches, Switches};
use super::{CheckoutError, Result};
use crate::admin::{error, ledger_answer};

/// The largest MCP request body accepted.
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// How to run the checkout server.
#[derive(Clone, Default)]
pub struct CheckoutSettings {
    /// Where `checkout.ledger.db` lives (created if missing); none keeps it in memory.
    pub data_dir: Option<PathBuf>,
    /// The bearer token callers must present; none leaves the server open.
    pub token: Option<String>,
    /// The switches at start.
    pub switches: Switches,
    /// Its listener's connection limits and requests in flight.
    pub serving: agent_host::Serving,
}

impl std::fmt::Debug for CheckoutSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckoutSettings")
            .field("data_dir", &self.data_dir)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("switches", &self.switches)
            .field("serving", &self.serving)
            .finish()
    }
}

/// The checkout server being served.
#[derive(Debug)]
pub struct RunningCheckout {
    /// Its base URL (`http://127.0.0.1:PORT`): `/ledger` and `/faults` live here.
    pub url: String,
    /// Its MCP endpoint (`<url>/mcp`).
    pub mcp_url: String,
    switches: CheckoutSwitches,
    ledger: Ledger,
    server: JoinHandle<agent_host::Result<()>>,
}

impl RunningCheckout {
    /// Its switches, to change in-process (the same ones `PUT /faults` sets).
    pub fn switches(&self) -> &CheckoutSwitches {
        &self.switches
    }

    /// Its ledger as `GET /ledger` serves it.
    pub async fn ledger(&self) -> Result<LedgerReport> {
        self.ledger.report().await
    }

    /// Waits until the server has stopped (cancel the shutdown token first).
    pub async fn stopped(self) -> Result<()> {
        self.server
            .await
            .map_err(|e| CheckoutError::Io(format!("the checkout server panicked: {e}")))?
            .map_err(CheckoutError::from)
    }
}

/// Starts the checkout server on `listener` until `shutdown` is cancelled.
pub async fn start(
    settings: CheckoutSettings,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<RunningCheckout> {
    let address = listener
        .local_addr()
        .map_err(|e| CheckoutError::Io(format!("the listener has no address: {e}")))?;
    let url = format!("http://{address}");
    let ledger = match &settings.data_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| CheckoutError::Io(format!("cannot create {}: {e}", dir.display())))?;
            Ledger::open(Some(&dir.join("checkout.ledger.db")))?
        }
        None => Ledger::open(None)?,
    };
    let auth = match settings.token.as_deref().map(str::trim) {
        Some("") => {
            return Err(CheckoutError::Config("the bearer token is empty".into()));
        }
        Some(token) => InboundAuth::StaticBearer {
            name: "executor".into(),
            token: token.to_owned(),
        },
        None => InboundAuth::Open,
    };
    let switches = CheckoutSwitches::new(settings.switches);
    let handler = CheckoutServer::new(ledger.clone(), switches.clone())?;

    let mut config = StreamableHttpServerConfig::default()
        .with_json_response(true)
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(shutdown.child_token());
    // rmcp accepts only loopback `Host`s by default (against DNS rebinding); a server
    // bound elsewhere was exposed on purpose and is reached by other names.
    if !address.ip().is_loopback() {
        config = config.disable_allowed_hosts();
    }
    let mcp = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let admin = Admin {
        ledger: ledger.clone(),
        switches: switches.clone(),
    };
    let router = Router::new()
        .nest_service("/mcp", mcp)
        .layer(from_fn_with_state(switches.clone(), raw_mcp))
        .merge(
            Router::new()
                .route("/ledger", get(get_ledger))
                .route("/faults", get(get_faults).put(put_faults))
                .with_state(admin),
        )
        // Requests in flight are capped as on every agent, once authenticated.
        .layer(tower::limit::GlobalConcurrencyLimitLayer::new(
            settings.serving.max_concurrent_requests.max(1),
        ))
        .layer(from_fn_with_state(auth, authenticate));
    let server = tokio::spawn(agent_host::serve_with(
        listener,
        router,
        shutdown,
        settings.serving.connections,
    ));
    Ok(RunningCheckout {
        mcp_url: format!("{url}/mcp"),
        url,
        switches,
        ledger,
        server,
    })
}

/// Reads the raw JSON-RPC request before rmcp does: a `tools/call`'s
/// `params.idempotencyKey` goes on as a request extension (rmcp's typed params drop it);
/// a `tools/list` is answered under one snapshot of the switches, and gains
/// `annotations.recovery` on its way out when the mode shows it.
async fn raw_mcp(
    State(switches): State<CheckoutSwitches>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the request body is too large",
        );
    };
    let message = serde_json::from_slice::<Value>(&bytes).ok();
    let method = message
        .as_ref()
        .and_then(|m| m.get("method"))
        .and_then(Value::as_str);
    let mut listing = None;
    match method {
        Some("tools/call") => {
            let idempotency_key = message
                .as_ref()
                .and_then(|m| m.pointer("/params/idempotencyKey"))
                .cloned();
            parts.extensions.insert(RawCallParams { idempotency_key });
        }
        Some("tools/list") => {
            let snapshot = switches.get();
            parts.extensions.insert(ListingSwitches(snapshot));
            listing = Some(snapshot);
        }
        _ => {}
    }
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    match listing {
        Some(snapshot) if snapshot.recovery.in_annotations() => {
            annotate_response(response, snapshot.recovery_variant).await
        }
        _ => response,
    }
}

/// What the admin routes work on.
#[derive(Debug, Clone)]
struct Admin {
    ledger: Ledger,
    switches: CheckoutSwitches,
}

async fn get_ledger(State(admin): State<Admin>) -> Response {
    ledger_answer(admin.ledger.report().await)
}

async fn get_faults(State(admin): State<Admin>) -> Response {
    axum::Json(admin.switches.get()).into_response()
}

/// `PUT /faults {"recovery": …, "recoveryVariant": …, "shipment": …}` replaces every
/// switch (fields left out take their defaults).
async fn put_faults(State(admin): State<Admin>, body: Bytes) -> Response {
    match serde_json::from_slice::<Switches>(&body) {
        Ok(switches) => {
            admin.switches.set(switches);
            tracing::info!(?switches, "switches changed");
            axum::Json(switches).into_response()
        }
        Err(e) => {
            let why = format!(
                "expected {{\"recovery\": \"both|annotations|meta|hidden\", \
                 \"recoveryVariant\": \"curated|altered\", \"shipment\": \"refuse|accept\"}}: {e}"
            );
            error(StatusCode::BAD_REQUEST, &why)
        }
    }
}

/// The base URL of a server given its base or its MCP URL.
fn base_url(url: &str) -> &str {
    let url = url.trim_end_matches('/');
    url.strip_suffix("/mcp").unwrap_or(url)
}

fn http_client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| CheckoutError::Io(format!("cannot build an HTTP client: {e}")))
}

async fn exchange<T: serde::de::DeserializeOwned>(
    request: reqwest::RequestBuilder,
    token: Option<&str>,
    what: &str,
) -> Result<T> {
    let request = match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    };
    let response = request
        .send()
        .await
        .map_err(|e| CheckoutError::Io(format!("{what}: {e}")))?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        return Err(CheckoutError::Io(format!("{what}: HTTP {status}: {body}")));
    }
    response
        .json()
        .await
        .map_err(|e| CheckoutError::Io(format!("{what}: unexpected answer: {e}")))
}

/// Reads the ledger of the server at `url` (its base or MCP URL).
pub async fn fetch_ledger(url: &str, token: Option<&str>) -> Result<LedgerReport> {
    let request = http_client()?.get(format!("{}/ledger", base_url(url)));
    exchange(request, token, "GET /ledger").await
}

/// Reads the switches of the server at `url`.
pub async fn fetch_switches(url: &str, token: Option<&str>) -> Result<Switches> {
    let request = http_client()?.get(format!("{}/faults", base_url(url)));
    exchange(request, token, "GET /faults").await
}

/// Replaces the switches of the server at `url`; returns them as it now has them.
pub async fn put_switches(url: &str, token: Option<&str>, switches: Switches) -> Result<Switches> {
    let request = http_client()?
        .put(format!("{}/faults", base_url(url)))
        .json(&switches);
    exchange(request, token, "PUT /faults").await
}
