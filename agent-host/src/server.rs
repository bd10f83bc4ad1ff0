//! Assembling an agent's HTTP service: the card, both A2A bindings, the protocol
//! middleware, authentication, the body limit and scan, and the cap on requests in
//! flight; and serving it on a given listener, with bounded connections, until a
//! cancellation token fires.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::middleware::{from_fn, from_fn_with_state};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

use crate::cpu::{self, Phase};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower_http::add_extension::AddExtension;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::agent::Agent;
use crate::auth::{InboundAuth, authenticate};
use crate::body_check::{BodyLimits, check_body};
use crate::card::{ServedCard, card_router};
use crate::error::{Error, Result};
use crate::handler::HostHandler;
use crate::health::health_router;
use crate::protocol::{require_version, rest_responses};
use crate::sdk;
use crate::tasks::TaskManager;

/// Default cap on request bodies, on every route of an agent.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Default cap on requests being handled at once by one agent (card and probes aside):
/// the largest body the scan lets through costs about 10 MiB while the SDK holds it.
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 32;
/// Default for `ConnectionLimits::max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// How one agent serves: its listener's connections, and its requests in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Serving {
    pub connections: ConnectionLimits,
    /// Requests handled at once (`HostConfig::max_concurrent_requests`).
    pub max_concurrent_requests: usize,
}

impl Default for Serving {
    fn default() -> Self {
        Self {
            connections: ConnectionLimits::default(),
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
        }
    }
}
/// Default for `ConnectionLimits::header_read_timeout`.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How one agent is served.
#[derive(Debug, Clone)]
pub struct HostConfig {
    pub card: ServedCard,
    pub auth: InboundAuth,
    /// Applies to every route, the extra routes passed to `app_with` included.
    pub max_body_bytes: usize,
    /// What an A2A request body may hold, checked before the SDK reads it.
    pub body_limits: BodyLimits,
    /// Requests handled at once; more wait for a turn, their bodies not yet read.
    pub max_concurrent_requests: usize,
    /// Cancelled to shut down: open streams end (with the task as it stands), so the
    /// server's graceful shutdown does not wait on them forever.
    pub shutdown: CancellationToken,
}

impl HostConfig {
    pub fn new(card: ServedCard, auth: InboundAuth) -> Self {
        Self {
            card,
            auth,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            body_limits: BodyLimits::default(),
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            shutdown: CancellationToken::new(),
        }
    }
}

/// The agent's whole router, for tests to call without a socket: the card and the
/// health probes (open), and both A2A bindings (authenticated).
pub fn app<A: Agent>(config: &HostConfig, agent: Arc<A>, tasks: Arc<TaskManager>) -> Router {
    app_with(config, agent, tasks, Router::new())
}

/// `app` with the agent's own further routes (an executor's admin API, catalog and
/// metrics), which bring their own authentication: they share the body limit and the
/// cap on requests in flight with the A2A routes.
///
/// Order on an A2A request: the body limit (413 on `Content-Length` alone), then
/// authentication (headers only), a turn under the request cap, and the body scan;
/// only then is the body parsed, by the version check (for the id it echoes) and the
/// SDK.
pub fn app_with<A: Agent>(
    config: &HostConfig,
    agent: Arc<A>,
    tasks: Arc<TaskManager>,
    extra: Router,
) -> Router {
    let health = health_router(tasks.store().clone(), config.shutdown.clone());
    let handler = Arc::new(
        HostHandler::new(agent, tasks, config.shutdown.clone())
            .accepting(config.card.input_modes().clone()),
    );
    // One semaphore for every route (`Router::layer` layers each route on its own).
    let in_flight = GlobalConcurrencyLimitLayer::new(config.max_concurrent_requests.max(1));
    let a2a = sdk::jsonrpc_router(handler.clone())
        .merge(sdk::rest_router(handler))
        .layer(from_fn(rest_responses))
        .layer(from_fn(require_version))
        .layer(from_fn_with_state(config.body_limits, check_body))
        .layer(in_flight.clone())
        .layer(from_fn_with_state(config.auth.clone(), authenticate));
    // The A2A routes merge last: of routers with default fallbacks the last one's is
    // kept, so that an unknown path meets the A2A routes' authentication, as before.
    card_router(config.card.clone())
        .merge(health)
        .merge(extra.layer(in_flight))
        .merge(a2a)
        // The limit inside the timeout: its error reaches the extractors unwrapped, so
        // that they answer 413.
        .layer(RequestBodyLimitLayer::new(config.max_body_bytes))
        .layer(RequestBodyTimeoutLayer::new(
            config.body_limits.read_timeout,
        ))
}

/// How one listener holds its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a connection may take to send a request's head. hyper starts this
    /// clock whenever the connection waits for a request, so it also closes a
    /// kept-alive connection idle for that long (not one streaming an answer).
    pub header_read_timeout: Duration,
    /// Connections open at once; beyond it the listener accepts no more until one
    /// closes (they wait in the kernel's backlog, costing the process nothing).
    pub max_connections: usize,
}

/// The most a connection buffers (hyper's default is about 400 KiB): a request head
/// must fit, so 1024 connections stalled mid-head hold at most 64 MiB. Bearer JWTs and
/// A2A headers take well under 4 KiB.
const MAX_HEAD_BUFFER_BYTES: usize = 64 * 1024;

impl Default for ConnectionLimits {
    /// Every legitimate caller (the SDKs, the planner, the executor) sends a request
    /// head in milliseconds; 10 s is generous. An executor runs up to 1024 sagas, each
    /// with at most one call out to a tool agent, so 1024 connections from it stay
    /// served; requests beyond the request cap wait on their connection.
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Serves `router` on `listener` with the default `ConnectionLimits`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> Result<()> {
    serve_with(listener, router, shutdown, ConnectionLimits::default()).await
}

/// Serves `router` on `listener` (HTTP/1.1) until `shutdown` is cancelled: no more
/// connections are accepted, in-flight requests finish, idle connections close.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
    limits: ConnectionLimits,
) -> Result<()> {
    let mut builder = auto::Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_HEAD_BUFFER_BYTES);
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    loop {
        // A permit first: at the cap, nothing more is accepted.
        let permit = tokio::select! {
            () = shutdown.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            permit = open.clone().acquire_owned() => permit
                .map_err(|e| Error::Config(format!("server failed: {e}")))?,
        };
        let stream = loop {
            tokio::select! {
                () = shutdown.cancelled() => break None,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => break Some(accepted),
                    Err(error) => accept_failed(error).await,
                },
            }
        };
        let Some((stream, peer)) = stream else { break };
        let _ = stream.set_nodelay(true);
        // The peer's address, for routes that answer per peer (`ConnectInfo`).
        let service = TowerToHyperService::new(AddExtension::new(
            router.clone(),
            axum::extract::ConnectInfo(peer),
        ));
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        connections.spawn(cpu::measured(Phase::Serving, async move {
            if let Err(error) = connection.await {
                tracing::debug!(error = ?error, "connection ended with an error");
            }
            drop(permit);
        }));
    }
    drop(listener);
    graceful.shutdown().await;
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// Errors of one connection (reset before accept) are nothing; others (out of file
/// descriptors) are retried after a pause, as axum's `serve` does.
async fn accept_failed(error: std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = ?error, "accept failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
