//! The executor's own HTTP routes beside A2A: the admin API that registers curated cards
//! (admin token), and the catalog planners read (planner JWT). Neither ever shows an
//! endpoint's credentials.

use agent_host::auth::{InboundAuth, authenticate};
use agent_host::{AgentClient, Caller};
use axum::extract::State;
use axum::http::StatusCode;
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde_json::{Value, json};

use crate::error::Error;
use crate::registry::Registry;

fn error(status: StatusCode, message: String) -> Response {
    (
        status,
        Json(json!({"error": {"code": status.as_u16(), "message": message}})),
    )
        .into_response()
}

/// `POST /admin/cards`: the body is a signed agent card, or `{"url": BASE_URL}` to fetch
/// the card from the agent's `/.well-known/agent-card.json`.
async fn register(
    State(registry): State<Registry>,
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
    match registry.register(card).await {
        Ok(agent) => {
            tracing::info!(agent = %agent.name, by = %caller.id, "card registered");
            (
                StatusCode::CREATED,
                Json(json!({"name": agent.name, "signedBy": agent.signed_by, "url": agent.url})),
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

/// The admin and catalog routes, each behind its own authentication.
pub fn routes(registry: Registry, admin: InboundAuth, planners: InboundAuth) -> Router {
    let admin_routes = Router::new()
        .route("/admin/cards", post(register))
        .layer(from_fn_with_state(admin, authenticate))
        .with_state(registry.clone());
    let catalog_routes = Router::new()
        .route("/catalog", get(catalog))
        .layer(from_fn_with_state(planners, authenticate))
        .with_state(registry);
    admin_routes.merge(catalog_routes)
}
