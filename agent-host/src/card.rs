//! Serving the agent card at `/.well-known/agent-card.json` with ETag, Cache-Control
//! and Last-Modified, and preparing a card for the address the agent actually bound.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use shared_types::SigningIdentity;

use crate::auth::InboundAuth;
use crate::error::{Error, Result};
use crate::modes::InputModes;

pub const AGENT_CARD_PATH: &str = "/.well-known/agent-card.json";

/// A card ready to serve: its bytes and validators, computed once, and the input modes
/// it declares (which the handler enforces).
#[derive(Debug, Clone)]
pub struct ServedCard {
    body: Arc<[u8]>,
    etag: HeaderValue,
    last_modified: HeaderValue,
    input_modes: InputModes,
}

impl ServedCard {
    pub fn new(card: &Value) -> Result<Self> {
        let body = serde_json::to_vec_pretty(card)
            .map_err(|e| Error::Config(format!("agent card: {e}")))?;
        let digest = shared_types::json::canonicalize(card)
            .map(|bytes| {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                bytes.hash(&mut h);
                h.finish()
            })
            .map_err(|e| Error::Config(format!("agent card: {e}")))?;
        let etag = HeaderValue::from_str(&format!("\"{digest:016x}\""))
            .map_err(|e| Error::Config(e.to_string()))?;
        let modified = chrono::Utc::now()
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let last_modified =
            HeaderValue::from_str(&modified).map_err(|e| Error::Config(e.to_string()))?;
        Ok(Self {
            body: body.into(),
            etag,
            last_modified,
            input_modes: InputModes::from_card(card),
        })
    }

    /// The media types the card says the agent takes.
    pub fn input_modes(&self) -> &InputModes {
        &self.input_modes
    }
}

async fn serve_card(State(card): State<ServedCard>, headers: HeaderMap) -> Response {
    let fresh = headers.get(header::IF_NONE_MATCH).is_some_and(|v| {
        v.as_bytes()
            .split(|b| *b == b',')
            .any(|t| t.trim_ascii() == card.etag.as_bytes() || t.trim_ascii() == b"*")
    });
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, card.body.to_vec()).into_response()
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::ETAG, card.etag.clone());
    h.insert(header::LAST_MODIFIED, card.last_modified.clone());
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    response
}

/// The router that serves the card; it needs no authentication.
pub fn card_router(card: ServedCard) -> axum::Router {
    axum::Router::new()
        .route(AGENT_CARD_PATH, get(serve_card))
        .with_state(card)
}

/// Points every `supportedInterfaces[].url` at `base_url` (the address actually bound),
/// and signs the card when an identity is given (replacing earlier signatures).
pub fn prepare_card(
    mut card: Value,
    base_url: &str,
    signer: Option<&SigningIdentity>,
) -> Result<Value> {
    if let Some(interfaces) = card
        .get_mut("supportedInterfaces")
        .and_then(Value::as_array_mut)
    {
        for interface in interfaces {
            interface["url"] = Value::String(base_url.to_owned());
        }
    }
    if let Some(signer) = signer {
        signer
            .sign_in_place(&mut card)
            .map_err(|e| Error::Config(format!("cannot sign the agent card: {e}")))?;
    }
    Ok(card)
}

/// Writes into the card the security scheme that `auth` enforces, so that the card
/// describes exactly what the middleware checks. Call before `prepare_card` signs it.
pub fn describe_auth(mut card: Value, auth: &InboundAuth) -> Value {
    let Some(object) = card.as_object_mut() else {
        return card;
    };
    let scheme = match auth {
        InboundAuth::Open => {
            object.remove("securitySchemes");
            object.remove("securityRequirements");
            return card;
        }
        InboundAuth::StaticBearer { .. } => json!({"httpAuthSecurityScheme": {
            "scheme": "Bearer", "description": "A static bearer token issued to the caller"}}),
        InboundAuth::Jwt(_) => json!({"httpAuthSecurityScheme": {
            "scheme": "Bearer", "bearerFormat": "JWT",
            "description": "An EdDSA JWT (iss, aud, exp at most 5 min ahead, jti) signed by a trusted caller key"}}),
    };
    object.insert("securitySchemes".into(), json!({ "bearer": scheme }));
    object.insert(
        "securityRequirements".into(),
        json!([{"schemes": {"bearer": {"list": []}}}]),
    );
    card
}
