//! Inbound authentication as middleware: a static bearer token, or a short-lived EdDSA
//! JWT (`iss`, `aud`, `exp`, `jti`, with a small clock-skew allowance and replay
//! protection). Unauthenticated requests get HTTP 401 with a JSON body, never a task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::json;
use shared_types::{Jwk, SigningIdentity};

use crate::agent::CALLER_HEADER;
use crate::error::{Error, Result};

/// Clock skew tolerated on `exp` and `iat`, in seconds.
pub const CLOCK_SKEW_SECONDS: u64 = 30;
/// The longest lifetime a token may claim.
pub const MAX_TOKEN_LIFETIME_SECONDS: i64 = 300;

/// Who made an authenticated request; added to the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The JWT issuer, or the name given to the static token.
    pub id: String,
}

/// What inbound requests must present.
#[derive(Clone)]
pub enum InboundAuth {
    /// Nothing (the TCK, local experiments).
    Open,
    /// `Authorization: Bearer <token>`; callers are named `name`.
    StaticBearer { name: String, token: String },
    /// `Authorization: Bearer <EdDSA JWT>` from one of the trusted issuers, for `audience`.
    Jwt(Arc<JwtPolicy>),
}

impl std::fmt::Debug for InboundAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Open => f.write_str("Open"),
            Self::StaticBearer { name, .. } => write!(f, "StaticBearer({name})"),
            Self::Jwt(p) => write!(f, "Jwt(aud={})", p.audience),
        }
    }
}

/// Trusted issuers of JWTs for one audience.
pub struct JwtPolicy {
    audience: String,
    issuers: HashMap<String, DecodingKey>,
    /// `iss:jti` of accepted tokens with their expiry, to refuse replays.
    seen: Mutex<HashMap<String, i64>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    iss: String,
    aud: String,
    exp: i64,
    iat: i64,
    jti: String,
}

impl JwtPolicy {
    /// `issuers` maps each trusted `iss` to its Ed25519 public key.
    pub fn new(audience: impl Into<String>, issuers: &[(String, Jwk)]) -> Result<Self> {
        let mut keys = HashMap::new();
        for (iss, jwk) in issuers {
            jwk.verifying_key()
                .map_err(|e| Error::Config(format!("key of issuer {iss}: {e}")))?;
            let key = DecodingKey::from_ed_components(&jwk.x)
                .map_err(|e| Error::Config(format!("key of issuer {iss}: {e}")))?;
            keys.insert(iss.clone(), key);
        }
        Ok(Self {
            audience: audience.into(),
            issuers: keys,
            seen: Mutex::new(HashMap::new()),
        })
    }

    /// Checks a token; returns the issuer.
    pub fn check(&self, token: &str, now: i64) -> std::result::Result<String, String> {
        let unverified =
            jsonwebtoken::dangerous::insecure_decode::<Claims>(token).map_err(|e| {
                format!("the bearer token is not a JWT with iss, aud, exp, iat and jti: {e}")
            })?;
        let iss = unverified.claims.iss;
        let key = self
            .issuers
            .get(&iss)
            .ok_or_else(|| format!("issuer {iss:?} is not trusted"))?;
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.set_audience(&[&self.audience]);
        validation.set_issuer(&[&iss]);
        validation.set_required_spec_claims(&["iss", "aud", "exp"]);
        validation.leeway = CLOCK_SKEW_SECONDS;
        let claims = jsonwebtoken::decode::<Claims>(token, key, &validation)
            .map_err(|e| format!("the token from {iss} is refused: {e}"))?
            .claims;
        if claims.exp - now > MAX_TOKEN_LIFETIME_SECONDS + CLOCK_SKEW_SECONDS as i64 {
            return Err(format!(
                "the token from {iss} lives longer than {MAX_TOKEN_LIFETIME_SECONDS} s"
            ));
        }
        if claims.iat > now + CLOCK_SKEW_SECONDS as i64 {
            return Err(format!("the token from {iss} was issued in the future"));
        }
        let mut seen = self
            .seen
            .lock()
            .map_err(|_| "replay cache poisoned".to_owned())?;
        seen.retain(|_, exp| *exp + CLOCK_SKEW_SECONDS as i64 >= now);
        if seen
            .insert(format!("{iss}:{}", claims.jti), claims.exp)
            .is_some()
        {
            return Err(format!(
                "the token from {iss} (jti {}) was already used",
                claims.jti
            ));
        }
        Ok(iss)
    }
}

/// Mints a JWT for calling `audience` as `issuer`, valid for `lifetime_seconds` (≤ 300).
pub fn mint_jwt(
    identity: &SigningIdentity,
    issuer: &str,
    audience: &str,
    lifetime_seconds: i64,
) -> Result<String> {
    let now = chrono::Utc::now().timestamp();
    let claims = Claims {
        iss: issuer.to_owned(),
        aud: audience.to_owned(),
        iat: now,
        exp: now + lifetime_seconds.min(MAX_TOKEN_LIFETIME_SECONDS),
        jti: uuid::Uuid::new_v4().to_string(),
    };
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(identity.kid().to_owned());
    jsonwebtoken::encode(
        &header,
        &claims,
        &EncodingKey::from_ed_der(&identity.pkcs8_der()),
    )
    .map_err(|e| Error::Config(format!("cannot sign a JWT: {e}")))
}

/// A 401 whose body reads as an error in both bindings: the REST binding's
/// `{"error": {code, status, message}}`, and, with `jsonrpc` and a null `id`, a JSON-RPC
/// error response, so that JSON-RPC clients show the reason rather than a parse error.
fn unauthorized(message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": 401, "status": "UNAUTHENTICATED", "message": message}});
    let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The middleware: authenticates, then adds the `Caller` to the request.
pub async fn authenticate(
    State(auth): State<InboundAuth>,
    mut request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .map(str::to_owned);
    let caller = match (&auth, presented) {
        (InboundAuth::Open, _) => Caller {
            id: "anonymous".into(),
        },
        (_, None) => return unauthorized("this agent requires Authorization: Bearer <token>"),
        (InboundAuth::StaticBearer { name, token }, Some(given)) => {
            if !constant_time_eq(token.as_bytes(), given.as_bytes()) {
                return unauthorized("the bearer token is not valid for this agent");
            }
            Caller { id: name.clone() }
        }
        (InboundAuth::Jwt(policy), Some(given)) => {
            match policy.check(&given, chrono::Utc::now().timestamp()) {
                Ok(iss) => Caller { id: iss },
                Err(why) => return unauthorized(&why),
            }
        }
    };
    // The handler sees headers only: pass the caller on as one, after removing any copy
    // the client sent.
    request.headers_mut().remove(CALLER_HEADER);
    if let Ok(value) = HeaderValue::from_str(&caller.id) {
        request.headers_mut().insert(CALLER_HEADER, value);
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
