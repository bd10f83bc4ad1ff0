//! What the example agents' admin routes share: a JSON error body and the answer to
//! `GET /ledger`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::json;

/// `{"error": message}` with `status`.
pub fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"error": message}))).into_response()
}

/// The ledger's report as JSON, or a 500 that keeps the cause in the log.
pub fn ledger_answer<T: Serialize, E: std::fmt::Display>(report: Result<T, E>) -> Response {
    match report {
        Ok(report) => axum::Json(report).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot read the ledger");
            error(StatusCode::INTERNAL_SERVER_ERROR, "cannot read the ledger")
        }
    }
}
