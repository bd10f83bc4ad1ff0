//! The executor's own HTTP routes beside A2A: the admin API that registers curated cards
//! and MCP servers (admin token), the catalog planners read (planner JWT), and the metrics
//! Prometheus scrapes (open, like the health probes). None ever shows an endpoint's
//! credentials.

use agent_host::auth::{InboundAuth, authenticate};
use agent_host::{AgentClient, Caller};
use axum::extract::{Query, State};
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
use crate::registry_history::Registration;

/// What the admin routes work with.
#[derive(Debug, Clone)]
pub struct Admin {
    pub registry: Registry,
    /// Opens sessions with MCP servers to list their tools before registering them.
    pub mcp: Arc<McpInvoker>,
    /// The hosts a registration may make the executor fetch from.
    pub hosts: RegistrationHosts,
}

/// The hosts registrations may reach (`--allow-registration-host`): any, or a list of
/// `host` (any port) and `host:port` entries.
#[derive(Debug, Clone, Default)]
pub struct RegistrationHosts {
    allowed: Option<Vec<String>>,
}

impl RegistrationHosts {
    /// Any host (the default; the executor logs that it is so).
    pub fn any() -> Self {
        Self { allowed: None }
    }

    /// Only these entries (`host` or `host:port`, compared without case).
    pub fn only(entries: impl IntoIterator<Item = String>) -> Self {
        Self {
            allowed: Some(
                entries
                    .into_iter()
                    .map(|e| e.to_ascii_lowercase())
                    .collect(),
            ),
        }
    }

    pub fn is_any(&self) -> bool {
        self.allowed.is_none()
    }

    /// These entries, and `more` (nothing changes when any host is allowed).
    pub fn and(mut self, more: impl IntoIterator<Item = String>) -> Self {
        if let Some(allowed) = &mut self.allowed {
            allowed.extend(more.into_iter().map(|e| e.to_ascii_lowercase()));
        }
        self
    }

    /// Whether `url` may be fetched, or a sentence saying why not.
    pub fn admits(&self, url: &str) -> std::result::Result<(), String> {
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!("{url:?} is not an http(s) URL"));
        }
        let Some(allowed) = &self.allowed else {
            return Ok(());
        };
        let host = parsed.host_str().unwrap_or_default().to_ascii_lowercase();
        let port = parsed.port_or_known_default().unwrap_or_default();
        let with_port = format!("{host}:{port}");
        if allowed
            .iter()
            .any(|entry| *entry == host || *entry == with_port)
        {
            Ok(())
        } else {
            Err(format!(
                "registrations may not fetch from {with_port:?} (not among --allow-registration-host)"
            ))
        }
    }
}

fn error(status: StatusCode, message: String) -> Response {
    (
        status,
        Json(json!({"error": {"code": status.as_u16(), "message": message}})),
    )
        .into_response()
}

/// The answer to a registration, and its line in the log: a change to what may be undone
/// is a warning, because it applies to the sagas accepted from now on only.
fn registered(
    result: crate::Result<(RegisteredAgent, Registration)>,
    caller: &Caller,
    what: &str,
) -> Response {
    match result {
        Ok((agent, registration)) => {
            // Accepted, but pointers into these skills' results go unchecked.
            let warnings = registration_warnings(&agent.declarations);
            for warning in &warnings {
                tracing::warn!(agent = ?agent.name, warning = ?warning, "{what} registered with a warning");
            }
            let summary: Vec<String> = registration
                .changes
                .iter()
                .map(|c| format!("{} {}", c.skill, c.change))
                .collect();
            match registration.kind.as_str() {
                "first" => {
                    tracing::info!(agent = ?agent.name, by = ?caller.id, signed_by = ?agent.signed_by, "{what} registered")
                }
                "unchanged" => {
                    tracing::info!(agent = ?agent.name, by = ?caller.id, "{what} registered again, declarations unchanged")
                }
                _ if registration
                    .changes
                    .iter()
                    .any(|c| c.alters_reversibility()) =>
                {
                    tracing::warn!(agent = ?agent.name, by = ?caller.id, changes = ?summary,
                        "{what} registered again with changed reversibility; sagas already accepted keep the declarations they were accepted with")
                }
                _ => {
                    tracing::info!(agent = ?agent.name, by = ?caller.id, changes = ?summary, "{what} registered again with changed declarations")
                }
            }
            (
                StatusCode::CREATED,
                Json(
                    json!({"name": agent.name, "signedBy": agent.signed_by, "url": agent.url,
                    "skills": agent.declarations.skills.keys().collect::<Vec<_>>(),
                    "registration": registration, "warnings": warnings}),
                ),
            )
                .into_response()
        }
        Err(Error::Refused(reason)) => error(StatusCode::UNPROCESSABLE_ENTITY, reason),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            e.reply("the registration"),
        ),
    }
}

/// `GET /admin/registry-history[?agent=NAME][&limit=N]`: the newest registrations first
/// (at most 1,000; 100 by default), each with who made it, when, and what it changed.
async fn history(State(admin): State<Admin>, Query(query): Query<HistoryQuery>) -> Response {
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    match admin.registry.history(query.agent.as_deref(), limit).await {
        Ok(registrations) => Json(json!({"registrations": registrations})).into_response(),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            e.reply("reading the registry's history"),
        ),
    }
}

#[derive(Debug, serde::Deserialize)]
struct HistoryQuery {
    agent: Option<String>,
    limit: Option<u32>,
}

/// `POST /admin/cards`: the body is a signed agent card, or `{"url": BASE_URL}` to fetch
/// the card from the agent's `/.well-known/agent-card.json` (no credential is sent, no
/// redirect followed, at most `MAX_FETCHED_DOCUMENT_BYTES` read).
async fn register(
    State(admin): State<Admin>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<Value>,
) -> Response {
    let card = match body.get("url").and_then(Value::as_str) {
        Some(url) if body.get("name").is_none() => {
            if let Err(why) = admin.hosts.admits(url) {
                return error(StatusCode::UNPROCESSABLE_ENTITY, why);
            }
            match AgentClient::new(url) {
                Ok(client) => match client.fetch_card().await {
                    Ok(card) => card,
                    Err(e) => {
                        tracing::warn!(url = ?url, error = ?e.to_string(), "cannot fetch a card to register");
                        return error(
                            StatusCode::BAD_GATEWAY,
                            format!("cannot fetch the card: {e}"),
                        );
                    }
                },
                Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
            }
        }
        _ => body,
    };
    // With an allow-list, the tool's credential goes only to the hosts it names.
    if !admin.hosts.is_any()
        && let Some(why) = endpoints_of(&card)
            .iter()
            .find_map(|url| admin.hosts.admits(url).err())
    {
        tracing::warn!(by = ?caller.id, refusal = ?why, "a card whose endpoint is outside the registration allow-list was refused");
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "the card's endpoint is refused: {why}; the executor would send the tool's credential there"
            ),
        );
    }
    registered(
        admin.registry.register(card, &caller.id).await,
        &caller,
        "card",
    )
}

/// Every address a card says its agent is reached at (each interface's `url`, and the
/// top-level `url` of cards from before interfaces).
fn endpoints_of(card: &Value) -> Vec<String> {
    let interfaces = card
        .get("supportedInterfaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| i.get("url"));
    interfaces
        .chain(card.get("url"))
        .map(|url| url.as_str().unwrap_or_default().to_owned())
        .collect()
}

/// `POST /admin/mcp-servers`: `{"manifest": SIGNED_MANIFEST}`, optionally with `"url"`,
/// which must then be the endpoint the manifest names. The manifest is verified first;
/// only then does the executor open a session with the endpoint it names (with the
/// credential of the agent it curates), list its tools, and register the server if they
/// match. A peer's answer is never quoted back: the log has the reason.
async fn register_mcp(
    State(admin): State<Admin>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<Value>,
) -> Response {
    let Some(manifest) = body.get("manifest").filter(|m| m.is_object()) else {
        return error(
            StatusCode::BAD_REQUEST,
            "the body must be {\"manifest\": SIGNED_MANIFEST} (and optionally \"url\": the endpoint it names)".into(),
        );
    };
    let curated = match admin.registry.verify_manifest(manifest) {
        Ok(curated) => curated,
        Err(Error::Refused(why)) => return error(StatusCode::UNPROCESSABLE_ENTITY, why),
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                e.reply("checking the manifest"),
            );
        }
    };
    match body.get("url") {
        None => {}
        Some(Value::String(url))
            if url.trim_end_matches('/') == curated.url.trim_end_matches('/') => {}
        Some(other) => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!(
                    "the manifest names the endpoint {:?}, not {other}: the executor connects only to the endpoint the platform signed",
                    curated.url
                ),
            );
        }
    }
    if let Err(why) = admin.hosts.admits(&curated.url) {
        return error(StatusCode::UNPROCESSABLE_ENTITY, why);
    }
    let listing = match admin.mcp.listing(&curated).await {
        Ok(listing) => listing,
        Err(why) => {
            tracing::warn!(agent = ?curated.agent(), url = ?curated.url, error = ?why, "cannot list an MCP server's tools");
            return error(
                StatusCode::BAD_GATEWAY,
                format!(
                    "cannot list the tools of the MCP server at {:?} (the executor's log has the reason)",
                    curated.url
                ),
            );
        }
    };
    let agent = curated.agent().to_owned();
    let result = admin
        .registry
        .register_mcp(curated, listing, &caller.id)
        .await;
    if result.is_ok() {
        admin.mcp.forget(&agent).await;
    }
    registered(result, &caller, "MCP server")
}

/// `GET /catalog`: every curated skill's declaration.
async fn catalog(State(registry): State<Registry>) -> Response {
    // What another replica registered is in the catalog from the next read on.
    if let Err(e) = registry.refresh().await {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            e.reply("reading the catalog"),
        );
    }
    match registry.catalog() {
        Ok(catalog) => Json(catalog).into_response(),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            e.reply("reading the catalog"),
        ),
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
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.reply("the metrics")),
    }
}

/// `GET /metrics`: counts of sagas, tool calls, compensations and open undo handles, no
/// saga, task or caller named. Open, so that
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
        .route("/admin/registry-history", get(history))
        .layer(from_fn_with_state(admin_auth, authenticate))
        .with_state(admin);
    let catalog_routes = Router::new()
        .route("/catalog", get(catalog))
        .layer(from_fn_with_state(planners, authenticate))
        .with_state(registry);
    admin_routes.merge(catalog_routes)
}
