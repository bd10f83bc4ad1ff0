//! The executor's mandate routes: a principal's revocation (`POST /mandates/revocations`,
//! whose only credential is the principal's signature on it) and the account of a
//! mandate operators read (`GET /admin/mandates/{id}`, admin token).

use std::sync::Arc;

use agent_host::auth::{InboundAuth, authenticate};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::agent::Executor;
use crate::error::Error;

fn error(status: StatusCode, message: String) -> Response {
    (
        status,
        Json(json!({"error": {"code": status.as_u16(), "message": message}})),
    )
        .into_response()
}

/// `POST /mandates/revocations`: a signed revocation, verified before anything is
/// recorded; sent again, it changes nothing. Answered once every saga under the mandate
/// driven here has journaled it, with what it did to them: `unwinding`, `heldAtPivot`
/// (the pivot's call out or in doubt: no attempt starts again), `finishing` (past the
/// pivot), `notYetHeard` (a saga whose journal could not be written in time: it acts on
/// nothing meanwhile, and hears it when it resumes).
async fn revoke(State(executor): State<Arc<Executor>>, body: Bytes) -> Response {
    let document = match shared_types::json::parse_strict_bytes(&body) {
        Ok(document) => document,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("not JSON: {e}")),
    };
    match executor.revoke(&document).await {
        Ok((revoked, heard)) => Json(json!({
            "revoked": revoked.mandate_id,
            "principalKey": revoked.principal_key,
            "unwinding": heard.unwinding,
            "heldAtPivot": heard.held_at_pivot,
            "finishing": heard.finishing,
            "notYetHeard": heard.not_yet_heard,
        }))
        .into_response(),
        Err(Error::Refused(why)) => error(StatusCode::UNPROCESSABLE_ENTITY, why),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{}; send it again", e.reply("recording the revocation")),
        ),
    }
}

/// `GET /admin/mandates/{id}`: budget, reserved, spent, remaining, sagas.
async fn show(State(executor): State<Arc<Executor>>, Path(mandate_id): Path<String>) -> Response {
    match executor.mandate(&mandate_id).await {
        Ok(shown) => Json(shown).into_response(),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            e.reply("reading the mandate"),
        ),
    }
}

pub fn routes(executor: Arc<Executor>, admin_auth: InboundAuth) -> Router {
    let admin = Router::new()
        .route("/admin/mandates/{mandate_id}", get(show))
        .layer(from_fn_with_state(admin_auth, authenticate))
        .with_state(executor.clone());
    Router::new()
        .route("/mandates/revocations", post(revoke))
        .with_state(executor)
        .merge(admin)
}
