//! Assembling an agent's HTTP service: the card, both A2A bindings, the protocol
//! middleware, authentication and the body limit; and serving it on a given listener
//! until a cancellation token fires.

use std::sync::Arc;

use axum::Router;
use axum::middleware::{from_fn, from_fn_with_state};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_http::limit::RequestBodyLimitLayer;

use crate::agent::Agent;
use crate::auth::{InboundAuth, authenticate};
use crate::card::{ServedCard, card_router};
use crate::error::{Error, Result};
use crate::handler::HostHandler;
use crate::health::health_router;
use crate::protocol::{require_version, rest_responses};
use crate::sdk;
use crate::tasks::TaskManager;

/// Default cap on request bodies.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// How one agent is served.
#[derive(Debug, Clone)]
pub struct HostConfig {
    pub card: ServedCard,
    pub auth: InboundAuth,
    pub max_body_bytes: usize,
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
            shutdown: CancellationToken::new(),
        }
    }
}

/// The agent's whole router, for tests to call without a socket: the card and the
/// health probes (open), and both A2A bindings (authenticated).
pub fn app<A: Agent>(config: &HostConfig, agent: Arc<A>, tasks: Arc<TaskManager>) -> Router {
    let health = health_router(tasks.store().clone(), config.shutdown.clone());
    let handler = Arc::new(
        HostHandler::new(agent, tasks, config.shutdown.clone())
            .accepting(config.card.input_modes().clone()),
    );
    let a2a = sdk::jsonrpc_router(handler.clone())
        .merge(sdk::rest_router(handler))
        .layer(from_fn(rest_responses))
        .layer(from_fn(require_version))
        .layer(from_fn_with_state(config.auth.clone(), authenticate));
    card_router(config.card.clone())
        .merge(health)
        .merge(a2a)
        .layer(RequestBodyLimitLayer::new(config.max_body_bytes))
}

/// Serves `router` on `listener` until `shutdown` is cancelled; in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .map_err(|e| Error::Config(format!("server failed: {e}")))
}
