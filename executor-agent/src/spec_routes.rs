//! The published contract's JSON Schemas (`spec/schemas/`), served open at
//! `GET /spec/v1/schemas/{file}`, with their list at `GET /spec/v1/schemas`: a tool
//! author or another implementation checks its documents against the very schemas this
//! executor was built with. They are compiled into the binary; nothing is read from disk.

use axum::Json;
use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

/// Every schema: its file name and its text.
pub const SCHEMAS: [(&str, &str); 7] = [
    (
        "skill-declarations.schema.json",
        include_str!("../../spec/schemas/skill-declarations.schema.json"),
    ),
    (
        "plan.schema.json",
        include_str!("../../spec/schemas/plan.schema.json"),
    ),
    (
        "mandate.schema.json",
        include_str!("../../spec/schemas/mandate.schema.json"),
    ),
    (
        "revocation.schema.json",
        include_str!("../../spec/schemas/revocation.schema.json"),
    ),
    (
        "answer.schema.json",
        include_str!("../../spec/schemas/answer.schema.json"),
    ),
    (
        "tool-call.schema.json",
        include_str!("../../spec/schemas/tool-call.schema.json"),
    ),
    (
        "tool-answer.schema.json",
        include_str!("../../spec/schemas/tool-answer.schema.json"),
    ),
];

/// Where the schemas are served.
pub const SCHEMAS_PATH: &str = "/spec/v1/schemas";

async fn list() -> Response {
    let files: Vec<String> = SCHEMAS
        .iter()
        .map(|(name, _)| format!("{SCHEMAS_PATH}/{name}"))
        .collect();
    Json(json!({"extension": shared_types::REVERSIBILITY_EXTENSION_URI, "schemas": files}))
        .into_response()
}

async fn schema(Path(file): Path<String>) -> Response {
    let Some((_, text)) = SCHEMAS.iter().find(|(name, _)| *name == file) else {
        let known: Vec<&str> = SCHEMAS.iter().map(|(name, _)| *name).collect();
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": {"code": 404, "message": format!(
                "no such schema; the schemas are {}", known.join(", "))}})),
        )
            .into_response();
    };
    let mut response = (*text).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/schema+json"),
    );
    response
}

/// The two routes; they need no credential (the contract is public).
pub fn routes() -> Router {
    Router::new()
        .route(SCHEMAS_PATH, get(list))
        .route(&format!("{SCHEMAS_PATH}/{{file}}"), get(schema))
}
