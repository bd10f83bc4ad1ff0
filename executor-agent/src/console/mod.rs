//! The operator console at `/console`: a page embedded in the binary (no build step, no
//! outside address) and the JSON API it reads under `/console/api`. Operators read;
//! approvers read and answer the sagas that wait for a person, by the same rules as an
//! answer over A2A (`answers::check`, then the saga's driver, here or on its replica).
//! Planners and anonymous callers get 401. Nothing here shows a tool credential: the
//! pages show plans, tasks, journals and metrics, none of which holds one.
//!
//! Entry points: `routes`, `session::Gate` (who may log in), `views` (what each page
//! shows), `timeline` (a saga's calls and waits, read off its journal).

pub mod session;
pub mod timeline;
pub mod views;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agent_host::sdk::{Message, Part, Role as MessageRole, TaskState};
use agent_host::tasks::Watch;
use agent_host::{Agent, Reply, RequestContext};
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::from_fn_with_state;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::agent::{Executor, ExecutorAgent};
use session::{Gate, Refused, Role, Session};

const INDEX_HTML: &str = include_str!("../../console/index.html");
const CONSOLE_JS: &str = include_str!("../../console/console.js");
const CONSOLE_CSS: &str = include_str!("../../console/console.css");

/// The page may load its own script and style, and reach this executor; nothing else.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// Live streams of saga changes open at once, across every session.
pub const MAX_STREAMS: usize = 64;
/// Live streams one session holds at once (a page shows one saga; a few tabs).
pub const MAX_STREAMS_PER_SESSION: usize = 8;
/// The longest answer body read, in bytes (an approval is about 300).
const MAX_ANSWER_BYTES: usize = 4 * 1024;

/// What the console's routes work with.
pub struct Console {
    pub executor: Arc<Executor>,
    pub gate: Gate,
    streams: Arc<Semaphore>,
    /// The live streams each session holds, by session id.
    streams_of: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
}

/// One live stream counted against its session while it is open.
struct SessionStream {
    streams_of: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    session: String,
}

impl SessionStream {
    /// Counts a stream of `session`, unless it holds `MAX_STREAMS_PER_SESSION` already.
    fn open(console: &Console, session: &str) -> Option<Self> {
        let mut held = crate::sync::lock(&console.streams_of);
        let count = held.entry(session.to_owned()).or_default();
        if *count >= MAX_STREAMS_PER_SESSION {
            return None;
        }
        *count += 1;
        Some(Self {
            streams_of: console.streams_of.clone(),
            session: session.to_owned(),
        })
    }
}

impl Drop for SessionStream {
    fn drop(&mut self) {
        let mut held = crate::sync::lock(&self.streams_of);
        if let Some(count) = held.get_mut(&self.session) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&self.session);
            }
        }
    }
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console").finish_non_exhaustive()
    }
}

impl Console {
    pub fn new(executor: Arc<Executor>, gate: Gate) -> Self {
        Self {
            executor,
            gate,
            streams: Arc::new(Semaphore::new(MAX_STREAMS)),
            streams_of: Arc::default(),
        }
    }
}

/// An error answer: `{"error": {"code", "message"}}`, never an internal detail.
pub fn refusal(status: StatusCode, message: &str) -> Response {
    let mut response = (
        status,
        Json(json!({"error": {"code": status.as_u16(), "message": message}})),
    )
        .into_response();
    no_store(&mut response);
    response
}

fn no_store(response: &mut Response) {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// A store or journal that cannot be read now: said so, the cause logged.
fn unreadable(e: crate::Error) -> Response {
    tracing::warn!(error = %e, "the console could not read the executor's state");
    refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        &e.reply("reading the executor's state"),
    )
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    no_store(&mut response);
    response
}

/// The console's routes: the page (open: it holds no data) and its API (a session).
pub fn routes(console: Arc<Console>) -> Router {
    let api = Router::new()
        .route("/console/api/overview", get(overview))
        .route("/console/api/sagas", get(list))
        .route("/console/api/sagas/{id}", get(saga))
        .route("/console/api/sagas/{id}/events", get(events))
        .route("/console/api/sagas/{id}/answer", post(answer))
        .route("/console/api/waiting", get(waiting))
        .layer(from_fn_with_state(
            console.clone(),
            session::require_session,
        ));
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route(
            "/console/",
            get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/console/console.js",
            get(|| async { asset(CONSOLE_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/console/console.css",
            get(|| async { asset(CONSOLE_CSS, "text/css; charset=utf-8") }),
        )
        .route("/console/api/session", post(log_in).delete(log_out))
        .merge(api)
        .with_state(console)
}

async fn log_in(
    State(console): State<Arc<Console>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: axum::http::HeaderMap,
) -> Response {
    let now_ms = chrono::Utc::now().timestamp_millis();
    let peer = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
    if let Some(wait) = peer.and_then(|peer| console.gate.throttled(peer, now_ms)) {
        let mut response = refusal(
            StatusCode::TOO_MANY_REQUESTS,
            "too many failed logins from this address; try again after Retry-After seconds",
        );
        let secs = wait.as_secs().max(1).to_string();
        if let Ok(value) = HeaderValue::from_str(&secs) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    let Some(token) = session::bearer(&headers) else {
        return session::unauthorized(
            "log in with Authorization: Bearer <the operator token, or an approver's JWT>",
        );
    };
    let logged_in = console.gate.log_in(token, now_ms);
    if let (Err(Refused::Credential(_)), Some(peer)) = (&logged_in, peer)
        && console.gate.failed_login(peer, now_ms)
    {
        tracing::warn!(
            %peer, failed = session::MAX_FAILED_LOGINS,
            window_secs = session::FAILED_LOGIN_WINDOW.as_secs(),
            "failed console logins from one address: its logins are refused until the window ends"
        );
    }
    match logged_in {
        Ok((id, session)) => {
            tracing::info!(who = ?session.name, role = ?session.role, "a console session was opened");
            let mut response = (
                StatusCode::CREATED,
                Json(
                    json!({"session": id, "role": session.role, "name": session.name,
                    "expiresAtMs": session.expires_at_ms}),
                ),
            )
                .into_response();
            no_store(&mut response);
            response
        }
        Err(Refused::Credential(why)) => session::unauthorized(&why),
        Err(Refused::Full) => refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many console sessions are open; log out of one, or wait for one to expire",
        ),
    }
}

async fn log_out(State(console): State<Arc<Console>>, headers: axum::http::HeaderMap) -> Response {
    match session::bearer(&headers) {
        Some(id) if console.gate.log_out(id) => StatusCode::NO_CONTENT.into_response(),
        _ => session::unauthorized("no such session"),
    }
}

fn ok(value: Value) -> Response {
    let mut response = Json(value).into_response();
    no_store(&mut response);
    response
}

/// What `GET api/overview` asks for: the window of the compensation rate, in seconds
/// (60 to 86400); without it, since the executor's start.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct OverviewQuery {
    window_secs: Option<u64>,
}

async fn overview(
    State(console): State<Arc<Console>>,
    Query(query): Query<OverviewQuery>,
) -> Response {
    let window = match query.window_secs {
        None => None,
        Some(secs @ 60..=86_400) => Some(Duration::from_secs(secs)),
        Some(_) => {
            return refusal(
                StatusCode::BAD_REQUEST,
                "windowSecs is from 60 (a minute) to 86400 (a day)",
            );
        }
    };
    match views::overview(&console.executor, window).await {
        Ok(value) => ok(value),
        Err(e) => unreadable(e),
    }
}

async fn list(
    State(console): State<Arc<Console>>,
    Query(query): Query<views::ListQuery>,
) -> Response {
    if let Some(state) = query.state.as_deref().filter(|s| !s.is_empty())
        && !views::STATES.contains(&state)
    {
        return refusal(
            StatusCode::BAD_REQUEST,
            &format!("state must be one of {}", views::STATES.join(", ")),
        );
    }
    if query.q.as_deref().is_some_and(|q| q.len() > 512) {
        return refusal(StatusCode::BAD_REQUEST, "q is longer than 512 bytes");
    }
    if query.supersedes.as_deref().is_some_and(|s| s.len() > 64) {
        return refusal(
            StatusCode::BAD_REQUEST,
            "supersedes is a saga id: at most 64 bytes",
        );
    }
    match views::list(&console.executor, &query).await {
        Ok(value) => ok(value),
        Err(e) => unreadable(e),
    }
}

fn not_found(id: &str) -> Response {
    refusal(
        StatusCode::NOT_FOUND,
        &format!(
            "no saga or task {:?} here",
            id.chars().take(128).collect::<String>()
        ),
    )
}

async fn saga(State(console): State<Arc<Console>>, Path(id): Path<String>) -> Response {
    let task = match views::find_task(&console.executor, &id).await {
        Ok(Some(task)) => task,
        Ok(None) => return not_found(&id),
        Err(e) => return unreadable(e),
    };
    match views::saga(&console.executor, &task).await {
        Ok(value) => ok(value),
        Err(e) => unreadable(e),
    }
}

async fn waiting(State(console): State<Arc<Console>>) -> Response {
    match views::waiting(&console.executor).await {
        Ok(value) => ok(value),
        Err(e) => unreadable(e),
    }
}

/// `event: change` at every change of the saga's task, until it ends or the page
/// leaves; at most `MAX_STREAMS` at once, and `MAX_STREAMS_PER_SESSION` per session.
async fn events(
    State(console): State<Arc<Console>>,
    headers: axum::http::HeaderMap,
    Path(id): Path<String>,
) -> Response {
    // `require_session` let only a live session's bearer through.
    let Some(counted) = session::bearer(&headers).and_then(|id| SessionStream::open(&console, id))
    else {
        return refusal(
            StatusCode::TOO_MANY_REQUESTS,
            "this session holds as many live views as it may; close one",
        );
    };
    let Ok(permit) = console.streams.clone().try_acquire_owned() else {
        return refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many live views are open; close one, or reload later",
        );
    };
    let task = match views::find_task(&console.executor, &id).await {
        Ok(Some(task)) => task,
        Ok(None) => return not_found(&id),
        Err(e) => return unreadable(e),
    };
    let subscription = match console.executor.tasks().watch(&task.id, Watch::Everything) {
        Ok(subscription) => subscription,
        Err(e) => return unreadable(e.into()),
    };
    // The first event says where the page stands; each change after is one more.
    let first = futures::stream::once(async {
        Ok::<_, Infallible>(Event::default().event("change").data("{}"))
    });
    let changes = futures::stream::unfold(
        (subscription, permit, counted),
        |(mut subscription, permit, counted)| async move {
            match subscription.recv().await {
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => Some((
                    Ok::<_, Infallible>(Event::default().event("change").data("{}")),
                    (subscription, permit, counted),
                )),
                Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
            }
        },
    );
    let mut response = Sse::new(first.chain(changes))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    no_store(&mut response);
    response
}

/// An answer as the console sends it: what an approver would put in the data part of
/// an A2A message on the saga's task.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SentAnswer {
    resolution: String,
    #[serde(default)]
    approval: Option<Value>,
}

async fn answer(
    State(console): State<Arc<Console>>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    if session.role != Role::Approver {
        tracing::info!(who = ?session.name, "an operator's answer from the console was refused");
        return refusal(
            StatusCode::FORBIDDEN,
            "NOT_AN_APPROVER: only an approver answers a saga; operators read",
        );
    }
    if body.len() > MAX_ANSWER_BYTES {
        return refusal(StatusCode::PAYLOAD_TOO_LARGE, "an answer is at most 4 KiB");
    }
    let sent: SentAnswer = match serde_json::from_slice(&body) {
        Ok(sent) => sent,
        Err(_) => {
            return refusal(
                StatusCode::BAD_REQUEST,
                "the body must be {\"resolution\": …} with, for approve, \"approval\": {sagaId, stepId, argsSha256, expiresAt}",
            );
        }
    };
    let task = match views::find_task(&console.executor, &id).await {
        Ok(Some(task)) => task,
        Ok(None) => return not_found(&id),
        Err(e) => return unreadable(e),
    };
    if task.status.state != TaskState::InputRequired {
        return refusal(
            StatusCode::CONFLICT,
            &format!(
                "the saga does not wait for a person (it is {})",
                views::state_of(&task)
            ),
        );
    }
    let resolution = sent.resolution.clone();
    let mut data = json!({"resolution": sent.resolution});
    if let (Some(approval), Value::Object(members)) = (sent.approval, &mut data) {
        members.insert("approval".to_owned(), approval);
    }
    let message = Message {
        message_id: uuid::Uuid::new_v4().to_string(),
        context_id: Some(task.context_id.clone()),
        task_id: Some(task.id.clone()),
        role: MessageRole::User,
        parts: vec![Part::data(data)],
        metadata: Some([("sagaplane.via".to_owned(), json!("console"))].into()),
        extensions: None,
        reference_task_ids: None,
    };
    let ctx = RequestContext {
        caller: session.name.clone(),
        idempotency_key: None,
        traceparent: None,
        baggage: None,
        extensions: None,
        accepted: Default::default(),
    };
    // The A2A path's steps, in its order: the agent checks the answer, then gives it to
    // the saga, whose journal write that takes it records it on the task.
    let agent = ExecutorAgent(console.executor.clone());
    match agent.accept(&ctx, &message, Some(&task)).await {
        Ok(Reply::RecordedByRun) => {}
        Ok(_) => return refusal(StatusCode::CONFLICT, "the task took no answer"),
        Err(refused) => return refusal(StatusCode::UNPROCESSABLE_ENTITY, &refused.message),
    }
    let handle = console.executor.tasks().handle(&task.id, &task.context_id);
    tracing::info!(task = %task.id, who = ?session.name, resolution = ?resolution, "an approver answered from the console");
    agent.run(ctx, handle.clone(), message).await;
    let state = match handle.snapshot().await {
        Ok(task) => views::state_of(&task),
        Err(_) => "unknown",
    };
    let mut response = (
        StatusCode::ACCEPTED,
        Json(json!({"accepted": true, "state": state})),
    )
        .into_response();
    no_store(&mut response);
    response
}
