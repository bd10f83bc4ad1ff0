//! The executor's own HTTP routes beside A2A: the admin API that registers curated cards
//! and MCP servers (admin token), the catalog planners read (planner JWT), and the metrics
//! Prometheus scrapes (open, like the health probes). None ever shows an endpoint's
//! credentials.

use agent_host::auth::{InboundAuth, authenticate};
use agent_host::{AgentClient, Caller};
use axum::extract::State;
use axum::http::StatusCode;
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde_json::{Value, json};
use shared_types::catalog::registration_warnings;

use std::sync::Arc;

use crate::agent::Executor;
use crate::error::Error;
use crate::mcp::invoker::McpInvoker;
use crate::registry::{RegisteredAgent, Registry};

/// What the admin routes work with.
#[derive(Debug, Clone)]
pub struct Admin {
    pub registry: Registry,
    /// Opens sessions with MCP servers to list their tools before registering them.
    pub mcp: Arc<McpInvoker>,
}

fn error(status: StatusCode, message: String) -> Response {
    (
        status,
        Json(json!({"error": {"code": status.as_u16(), "message": message}})),
    )
        .into_response()
}

/// The answer to a registration.
fn registered(result: crate::Result<RegisteredAgent>, caller: &Caller, what: &str) -> Response {
    match result {
        Ok(agent) => {
            tracing::info!(agent = %agent.name, by = %caller.id, "{what} registered");
            // Accepted, but pointers into these skills' results go unchecked (finding 5).
            let warnings = registration_warnings(&agent.declarations);
            for warning in &warnings {
                tracing::warn!(agent = ?agent.name, warning = ?warning, "{what} registered with a warning");
            }
            (
                StatusCode::CREATED,
                Json(
                    json!({"name": agent.name, "signedBy": agent.signed_by, "url": agent.url,
                    "skills": agent.declarations.skills.keys().collect::<Vec<_>>(),
                    "warnings": warnings}),
                ),
            )
                .into_response()
        }
        Err(Error::Refused(reason)) => error(StatusCode::UNPROCESSABLE_ENTITY, reason),
        Err(e) => {
            tracing::error!(error = %e, "registration failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, "internal error".into())
        }
    }
}

/// `POST /admin/cards`: the body is a signed agent card, or `{"url": BASE_URL}` to fetch
/// the card from the agent's `/.well-known/agent-card.json`.
async fn register(
    State(admin): State<Admin>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<Value>,
) -> Response {
    let card = match body.get("url").and_then(Value::as_str) {
        Some(url) if body.get("name").is_none() => match AgentClient::new(url) {
            Ok(client) => match client.fetch_card().await {
                Ok(card) => card,
                Err(e) => {
                    return error(
                        StatusCode::BAD_GATEWAY,
                        format!("cannot fetch the card: {e}"),
                    );
                }
            },
            Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
        },
        _ => body,
    };
    registered(admin.registry.register(card).await, &caller, "card")
}

/// `POST /admin/mcp-servers`: `{"url": MCP_ENDPOINT, "manifest": SIGNED_MANIFEST}`. The
/// executor opens a session with the server, lists its tools, and registers the server
/// only if the manifest is curated and matches what the server declares.
async fn register_mcp(
    State(admin): State<Admin>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<Value>,
) -> Response {
    let (Some(url), Some(manifest)) = (
        body.get("url").and_then(Value::as_str),
        body.get("manifest").filter(|m| m.is_object()),
    ) else {
        return error(
            StatusCode::BAD_REQUEST,
            "the body must be {\"url\": MCP_ENDPOINT, \"manifest\": SIGNED_MANIFEST}".into(),
        );
    };
    let Some(agent) = manifest.get("agent").and_then(Value::as_str) else {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "the manifest names no \"agent\"".into(),
        );
    };
    let listing = match admin.mcp.listing(agent, url).await {
        Ok(listing) => listing,
        Err(e) => return error(StatusCode::BAD_GATEWAY, e),
    };
    let result = admin.registry.register_mcp(manifest.clone(), listing).await;
    if result.is_ok() {
        admin.mcp.forget(agent).await;
    }
    registered(result, &caller, "MCP server")
}

/// `GET /catalog`: every curated skill's declaration.
async fn catalog(State(registry): State<Registry>) -> Response {
    match registry.catalog() {
        Ok(catalog) => Json(catalog).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "catalog failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, "internal error".into())
        }
    }
}

async fn metrics(State(executor): State<Arc<Executor>>) -> Response {
    match executor.metrics_text().await {
        Ok(text) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "metrics failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, "internal error".into())
        }
    }
}

/// `GET /metrics`: counts of sagas and tool calls, no task or caller named. Open, so that
/// a scraper needs no credential that could do more.
pub fn metrics_routes(executor: Arc<Executor>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(executor)
}

/// The admin and catalog routes, each behind its own authentication.
pub fn routes(admin: Admin, admin_auth: InboundAuth, planners: InboundAuth) -> Router {
    let registry = admin.registry.clone();
    let admin_routes = Router::new()
        .route("/admin/cards", post(register))
        .route("/admin/mcp-servers", post(register_mcp))
        .layer(from_fn_with_state(admin_auth, authenticate))
        .with_state(admin);
    let catalog_routes = Router::new()
        .route("/catalog", get(catalog))
        .layer(from_fn_with_state(planners, authenticate))
        .with_state(registry);
    admin_routes.merge(catalog_routes)
}
