//! Who may open the console, and the sessions it hands out. An operator logs in with the
//! operator token (or the admin token); an approver with a JWT of theirs, as they would
//! call A2A. Planners and anonymous callers are refused. A login gives a random session
//! token that the page sends as `Authorization: Bearer` (never a cookie, so that another
//! site cannot make a browser send it); sessions live in this process's memory only.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_host::JwtPolicy;
use agent_host::auth::constant_time_eq;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::{Console, refusal};
use crate::sync;

/// How long an operator's session lasts.
pub const OPERATOR_SESSION: Duration = Duration::from_secs(8 * 3600);
/// How long an approver's session lasts: shorter, since an approver's answers move money.
pub const APPROVER_SESSION: Duration = Duration::from_secs(3600);
/// Sessions held at once; a login past this is refused until one ends or expires.
pub const MAX_SESSIONS: usize = 1024;
/// Sessions one credential holds at once: its next login ends its oldest, so that no
/// credential can fill the console and lock the others out.
pub const MAX_SESSIONS_PER_CREDENTIAL: usize = 16;
/// Failed logins one peer address may make in `FAILED_LOGIN_WINDOW`; past that, its
/// logins are answered 429 until the window ends.
pub const MAX_FAILED_LOGINS: u32 = 10;
pub const FAILED_LOGIN_WINDOW: Duration = Duration::from_secs(60);
/// Peer addresses whose failed logins are counted at once (the oldest windows go first).
const MAX_PEERS_COUNTED: usize = 4096;

/// What a session may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    /// Read every page.
    Operator,
    /// Read every page, and answer the sagas that wait for a person.
    Approver,
}

/// A logged-in operator or approver; added to the requests of their session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// The credential's name: `operator`, `admin`, or the approver's JWT issuer.
    pub name: String,
    pub role: Role,
    pub expires_at_ms: i64,
    /// When it was opened (ms since the epoch): a credential's oldest goes first.
    #[serde(skip)]
    pub opened_at_ms: i64,
}

/// The credentials that open the console, and the sessions opened with them.
pub struct Gate {
    /// `(name, token)` of each static token that opens an operator's session.
    operator_tokens: Vec<(String, String)>,
    /// Verifies the JWTs of planners and approvers (one audience, as on A2A).
    jwts: Arc<JwtPolicy>,
    approvers: std::collections::HashSet<String>,
    sessions: Mutex<HashMap<String, Session>>,
    failed_logins: Mutex<HashMap<IpAddr, FailedLogins>>,
}

/// The failed logins of one peer address in its current window.
#[derive(Debug, Clone, Copy)]
struct FailedLogins {
    since_ms: i64,
    count: u32,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Tokens never reach a log line.
        f.debug_struct("Gate").finish_non_exhaustive()
    }
}

impl Gate {
    pub fn new(
        operator_tokens: Vec<(String, String)>,
        jwts: Arc<JwtPolicy>,
        approvers: std::collections::HashSet<String>,
    ) -> Self {
        Self {
            operator_tokens,
            jwts,
            approvers,
            sessions: Mutex::new(HashMap::new()),
            failed_logins: Mutex::new(HashMap::new()),
        }
    }

    /// How long `peer` must wait before its next login is looked at (too many failed
    /// logins in the window), if it must.
    pub fn throttled(&self, peer: IpAddr, now_ms: i64) -> Option<Duration> {
        let window_ms = FAILED_LOGIN_WINDOW.as_millis() as i64;
        let failed = *sync::lock(&self.failed_logins).get(&peer)?;
        let left_ms = failed.since_ms.saturating_add(window_ms) - now_ms;
        (failed.count >= MAX_FAILED_LOGINS && left_ms > 0)
            .then(|| Duration::from_millis(left_ms.unsigned_abs()))
    }

    /// Counts a failed login of `peer`; `true` when it is the one that starts throttling
    /// it (the moment to say so in the log, once per burst).
    pub fn failed_login(&self, peer: IpAddr, now_ms: i64) -> bool {
        let window_ms = FAILED_LOGIN_WINDOW.as_millis() as i64;
        let mut peers = sync::lock(&self.failed_logins);
        if peers.len() >= MAX_PEERS_COUNTED && !peers.contains_key(&peer) {
            peers.retain(|_, f| f.since_ms.saturating_add(window_ms) > now_ms);
            if peers.len() >= MAX_PEERS_COUNTED
                && let Some(oldest) = peers
                    .iter()
                    .min_by_key(|(_, f)| f.since_ms)
                    .map(|(p, _)| *p)
            {
                peers.remove(&oldest);
            }
        }
        let failed = peers.entry(peer).or_insert(FailedLogins {
            since_ms: now_ms,
            count: 0,
        });
        if failed.since_ms.saturating_add(window_ms) <= now_ms {
            *failed = FailedLogins {
                since_ms: now_ms,
                count: 0,
            };
        }
        failed.count += 1;
        failed.count == MAX_FAILED_LOGINS
    }

    /// Opens a session for `token` at `now_ms`, or says why not (a sentence for a 401).
    pub fn log_in(&self, token: &str, now_ms: i64) -> Result<(String, Session), Refused> {
        let (name, role, lasts) = self.who(token, now_ms)?;
        let mut sessions = sync::lock(&self.sessions);
        sessions.retain(|_, s| s.expires_at_ms > now_ms);
        let own: Vec<(&String, &Session)> =
            sessions.iter().filter(|(_, s)| s.name == name).collect();
        if own.len() >= MAX_SESSIONS_PER_CREDENTIAL
            && let Some(oldest) = own
                .iter()
                .min_by_key(|(_, s)| s.opened_at_ms)
                .map(|(id, _)| (*id).clone())
        {
            sessions.remove(&oldest);
            tracing::info!(who = ?name, "a credential at its session cap logged in again: its oldest session was ended");
        }
        if sessions.len() >= MAX_SESSIONS {
            return Err(Refused::Full);
        }
        let session = Session {
            name,
            role,
            expires_at_ms: now_ms.saturating_add(lasts.as_millis() as i64),
            opened_at_ms: now_ms,
        };
        let id = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        sessions.insert(id.clone(), session.clone());
        Ok((id, session))
    }

    fn who(&self, token: &str, now_ms: i64) -> Result<(String, Role, Duration), Refused> {
        if let Some((name, _)) = self
            .operator_tokens
            .iter()
            .find(|(_, t)| constant_time_eq(t.as_bytes(), token.as_bytes()))
        {
            return Ok((name.clone(), Role::Operator, OPERATOR_SESSION));
        }
        if token.matches('.').count() != 2 {
            return Err(Refused::Credential(
                "the token is neither the operator's token nor an approver's JWT".into(),
            ));
        }
        let issuer = self
            .jwts
            .check(token, now_ms / 1000)
            .map_err(Refused::Credential)?;
        if self.approvers.contains(&issuer) {
            Ok((issuer, Role::Approver, APPROVER_SESSION))
        } else {
            Err(Refused::Credential(
                "a planner's token does not open the console: operators and approvers log in"
                    .into(),
            ))
        }
    }

    /// The session `id` names, while it lasts.
    pub fn session(&self, id: &str, now_ms: i64) -> Option<Session> {
        let sessions = sync::lock(&self.sessions);
        sessions
            .get(id)
            .filter(|s| s.expires_at_ms > now_ms)
            .cloned()
    }

    /// Ends session `id`; whether there was one.
    pub fn log_out(&self, id: &str) -> bool {
        sync::lock(&self.sessions).remove(id).is_some()
    }
}

/// Why a login was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Not a credential that opens the console (401).
    Credential(String),
    /// Too many sessions are open (503).
    Full,
}

/// The bearer token of a request, if it sent a non-empty one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    agent_host::auth::bearer_token(headers).filter(|t| !t.is_empty())
}

/// The middleware of the console's API: a live session, added to the request.
pub async fn require_session(
    State(console): State<Arc<Console>>,
    mut request: Request,
    next: Next,
) -> Response {
    let now_ms = chrono::Utc::now().timestamp_millis();
    let Some(id) = bearer(request.headers()) else {
        return unauthorized(
            "the console's API needs Authorization: Bearer <session>; log in first",
        );
    };
    match console.gate.session(id, now_ms) {
        Some(session) => {
            request.extensions_mut().insert(session);
            next.run(request).await
        }
        None => unauthorized("the session is unknown or has expired; log in again"),
    }
}

/// A 401 with the challenge RFC 6750 asks for.
pub fn unauthorized(message: &str) -> Response {
    let mut response = refusal(StatusCode::UNAUTHORIZED, message);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response.into_response()
}
