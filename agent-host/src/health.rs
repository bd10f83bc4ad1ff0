//! Probes for the process around an agent, outside A2A and its authentication:
//! `GET /healthz` answers while the agent serves (liveness); `GET /readyz` answers 503,
//! with the reasons, while the agent should be sent no new work: it is stopping, or its
//! task store cannot write (a full disk, say). Neither names a task or a caller.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::store::TaskStore;

#[derive(Clone)]
struct Probe {
    store: Arc<dyn TaskStore>,
    shutdown: CancellationToken,
}

impl Probe {
    /// Why the agent is not ready now; empty when it is.
    fn not_ready(&self) -> Vec<String> {
        let mut reasons = Vec::new();
        if self.shutdown.is_cancelled() {
            reasons.push("stopping".to_owned());
        }
        if let Some(failure) = self.store.write_failure() {
            reasons.push(format!("the task store cannot write: {failure}"));
        }
        reasons
    }
}

async fn live() -> Json<Value> {
    Json(json!({"status": "live"}))
}

async fn ready(State(probe): State<Probe>) -> (StatusCode, Json<Value>) {
    let reasons = probe.not_ready();
    if reasons.is_empty() {
        (StatusCode::OK, Json(json!({"status": "ready"})))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "not ready", "reasons": reasons})),
        )
    }
}

/// The two probes, for the agent whose tasks live in `store`.
pub fn health_router(store: Arc<dyn TaskStore>, shutdown: CancellationToken) -> Router {
    Router::new()
        .route("/healthz", get(live))
        .route("/readyz", get(ready))
        .with_state(Probe { store, shutdown })
}
