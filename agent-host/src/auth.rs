//! Inbound authentication as middleware: a static bearer token, or a short-lived EdDSA
//! JWT (`iss`, `aud`, `exp`, `iat`, `jti`, optional `nbf`, with a small clock-skew
//! allowance and replay protection). Unauthenticated requests get HTTP 401 with an error
//! in the request's binding (a JSON-RPC error echoing the id, or an AIP-193 error), never
//! a task. A refusal says what is wrong with a token only once its signature verified:
//! before that, an unknown issuer and a known one with the wrong key get the same answer,
//! after the same work, so that the answers do not tell which issuer names are trusted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use shared_types::{Jwk, SigningIdentity};

use crate::agent::CALLER_HEADER;
use crate::error::{Error, Result};
use crate::protocol::{is_jsonrpc, unauthenticated_request_id, unstamped_error_info};
use crate::replay::{Admission, ReplayCache};

/// Clock skew tolerated on `exp`, `nbf` and `iat`, in seconds.
pub const CLOCK_SKEW_SECONDS: u64 = 30;
/// The longest lifetime a token may claim.
pub const MAX_TOKEN_LIFETIME_SECONDS: i64 = 300;
/// The longest `jti` accepted, in bytes. Ours are UUIDs (36); 128 leaves room for any
/// common id (a ULID, 64 hex digits, 64 random bytes in base64url) while bounding what a
/// caller can make each replay-cache entry cost.
pub const MAX_JTI_BYTES: usize = 128;
/// The longest bearer token read at all, in bytes (ours are about 400).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// Unexpired tokens remembered per trusted issuer. A token is remembered for at most
/// 300 s + 2 x 30 s skew, so this allows a sustained 180 fresh tokens a second per
/// issuer, at under 250 bytes an entry (at most ~16 MiB per issuer); past it, new
/// tokens from that issuer are refused until older ones expire.
pub const MAX_UNEXPIRED_TOKENS_PER_ISSUER: usize = 65_536;
/// The JSON-RPC error code of a 401: A2A 1.0 defines none (its spec says "JSON-RPC
/// custom error"), and reserves -32001..-32099 for its own errors; this is the code the
/// official A2A Go SDK gives `ErrUnauthenticated`, outside JSON-RPC's reserved range.
pub const UNAUTHENTICATED_CODE: i32 = -31401;

/// The one answer to a token whose signature did not verify, for whatever reason
/// (unknown issuer, wrong key, wrong algorithm, tampered claims).
const NOT_TRUSTED: &str =
    "the bearer token is refused: it is not signed by an issuer this agent trusts";

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
    /// Trusted issuer names, each to its index in `keys`.
    issuers: HashMap<String, usize>,
    keys: Vec<DecodingKey>,
    /// Verified against when the issuer is unknown, so that the refusal costs the same
    /// work as a known issuer's bad signature. Its verdict is never used.
    decoy: DecodingKey,
    /// Accepted `(issuer, jti)` until they expire, to refuse replays.
    seen: Mutex<ReplayCache>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    iss: String,
    aud: String,
    exp: i64,
    iat: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nbf: Option<i64>,
    jti: String,
}

impl JwtPolicy {
    /// `issuers` maps each trusted `iss` to its Ed25519 public key.
    pub fn new(audience: impl Into<String>, issuers: &[(String, Jwk)]) -> Result<Self> {
        let mut names = HashMap::new();
        let mut keys = Vec::new();
        for (iss, jwk) in issuers {
            jwk.verifying_key()
                .map_err(|e| Error::Config(format!("key of issuer {iss}: {e}")))?;
            let key = DecodingKey::from_ed_components(&jwk.x)
                .map_err(|e| Error::Config(format!("key of issuer {iss}: {e}")))?;
            match names.get(iss) {
                Some(&index) => keys[index] = key,
                None => {
                    names.insert(iss.clone(), keys.len());
                    keys.push(key);
                }
            }
        }
        let decoy = DecodingKey::from_ed_components(
            &SigningIdentity::from_seed([0x5a; 32], None).public_jwk().x,
        )
        .map_err(|e| Error::Config(format!("decoy key: {e}")))?;
        let seen = ReplayCache::new(
            keys.len(),
            MAX_UNEXPIRED_TOKENS_PER_ISSUER,
            CLOCK_SKEW_SECONDS as i64,
        );
        Ok(Self {
            audience: audience.into(),
            issuers: names,
            keys,
            decoy,
            seen: Mutex::new(seen),
        })
    }

    /// Checks a token at time `now` (Unix seconds); returns the issuer.
    pub fn check(&self, token: &str, now: i64) -> std::result::Result<String, String> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(format!(
                "the bearer token is longer than {MAX_TOKEN_BYTES} bytes"
            ));
        }
        let unverified = jsonwebtoken::dangerous::insecure_decode::<Claims>(token)
            .map_err(|_| "the bearer token is not a JWT with iss, aud, exp, iat and jti")?;
        let known = self.issuers.get(&unverified.claims.iss).copied();
        let key = known.and_then(|i| self.keys.get(i)).unwrap_or(&self.decoy);
        // The signature only: the claims are checked below against `now`.
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        let verified = jsonwebtoken::decode::<Claims>(token, key, &validation);
        let (Some(issuer), Ok(verified)) = (known, verified) else {
            return Err(NOT_TRUSTED.to_owned());
        };
        let claims = verified.claims;
        let refused = |why: &str| Err(format!("the bearer token is refused: {why}"));
        let skew = CLOCK_SKEW_SECONDS as i64;
        if claims.aud != self.audience {
            return refused("it is for another audience");
        }
        if claims.exp.saturating_add(skew) < now {
            return refused("it has expired");
        }
        if let Some(nbf) = claims.nbf
            && nbf > now.saturating_add(skew)
        {
            return refused(&format!(
                "it is not valid before {nbf} (nbf), {} s from now",
                nbf - now
            ));
        }
        if claims.iat > now.saturating_add(skew) {
            return refused("it was issued in the future");
        }
        if claims.exp.saturating_sub(now) > MAX_TOKEN_LIFETIME_SECONDS + skew {
            return refused(&format!(
                "it lives longer than {MAX_TOKEN_LIFETIME_SECONDS} s"
            ));
        }
        if claims.jti.is_empty() || claims.jti.len() > MAX_JTI_BYTES {
            return refused(&format!("its jti must be 1 to {MAX_JTI_BYTES} bytes"));
        }
        // A poisoned lock means a panic mid-update: refuse rather than trust the cache,
        // and say so in the log only.
        let Ok(mut seen) = self.seen.lock() else {
            tracing::error!("the JWT replay cache is poisoned; refusing tokens");
            return refused("it cannot be checked against replays now");
        };
        let admission = seen.admit(issuer, &claims.jti, claims.exp, now);
        drop(seen);
        match admission {
            Admission::Fresh => Ok(claims.iss),
            Admission::Replayed => refused("its jti was already used"),
            Admission::Full => refused(
                "its issuer has too many unexpired tokens in use; retry once older ones expire",
            ),
        }
    }

    /// How many accepted tokens are remembered (for tests and metrics).
    pub fn remembered_tokens(&self) -> usize {
        self.seen.lock().map(|seen| seen.len()).unwrap_or(0)
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
        nbf: None,
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

/// Why a request was not authenticated, and the challenge that goes with it.
struct Unauthenticated {
    message: String,
    /// Whether credentials were presented (RFC 6750's `invalid_token`) or not.
    presented: bool,
}

/// A 401 in the request's binding: on JSON-RPC (`POST /`) an error response echoing the
/// request's id, read from the body with a bound on size and time; on HTTP+JSON an
/// AIP-193 error. Both carry `google.rpc.ErrorInfo` with reason `UNAUTHENTICATED`, and
/// nothing that changes from one request to the next (no timestamp), so that two
/// refusals for the same reason are byte-identical.
async fn unauthorized(request: Request, refusal: Unauthenticated) -> Response {
    let info = unstamped_error_info("UNAUTHENTICATED");
    let body = if is_jsonrpc(&request) {
        let id = unauthenticated_request_id(request.into_body()).await;
        json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": UNAUTHENTICATED_CODE, "message": refusal.message, "data": [info]}})
    } else {
        json!({"error": {"code": 401, "status": "UNAUTHENTICATED",
            "message": refusal.message, "details": [info]}})
    };
    let challenge = if refusal.presented {
        HeaderValue::from_static("Bearer error=\"invalid_token\"")
    } else {
        HeaderValue::from_static("Bearer")
    };
    let mut response = (StatusCode::UNAUTHORIZED, Body::from(body_bytes(&body))).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::WWW_AUTHENTICATE, challenge);
    response
}

fn body_bytes(body: &Value) -> Vec<u8> {
    serde_json::to_vec(body).unwrap_or_default()
}

/// The token of an `Authorization: Bearer` header, trimmed, if one was sent.
pub fn bearer_token(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
}

/// The middleware: authenticates, then adds the `Caller` to the request.
pub async fn authenticate(
    State(auth): State<InboundAuth>,
    mut request: Request,
    next: Next,
) -> Response {
    let presented = bearer_token(request.headers()).map(str::to_owned);
    let refused = |message: &str| Unauthenticated {
        message: message.to_owned(),
        presented: true,
    };
    let caller = match (&auth, presented) {
        (InboundAuth::Open, _) => Caller {
            id: "anonymous".into(),
        },
        (_, None) => {
            let refusal = Unauthenticated {
                message: "this agent requires Authorization: Bearer <token>".into(),
                presented: false,
            };
            return unauthorized(request, refusal).await;
        }
        (InboundAuth::StaticBearer { name, token }, Some(given)) => {
            if !constant_time_eq(token.as_bytes(), given.as_bytes()) {
                let refusal = refused("the bearer token is not valid for this agent");
                return unauthorized(request, refusal).await;
            }
            Caller { id: name.clone() }
        }
        (InboundAuth::Jwt(policy), Some(given)) => {
            let checked = crate::cpu::measure(crate::cpu::Phase::Authentication, || {
                policy.check(&given, chrono::Utc::now().timestamp())
            });
            match checked {
                Ok(iss) => Caller { id: iss },
                Err(why) => return unauthorized(request, refused(&why)).await,
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

/// Whether `a` and `b` are equal, in a time that depends on their length only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn planner() -> SigningIdentity {
        SigningIdentity::from_seed([1; 32], Some("planner".into()))
    }

    fn policy() -> JwtPolicy {
        JwtPolicy::new(
            "executor",
            &[("planner".to_owned(), planner().public_jwk())],
        )
        .unwrap()
    }

    /// A token issued at `iat`, living `lifetime` seconds, with `jti`.
    fn token(iat: i64, lifetime: i64, jti: &str) -> String {
        let claims = Claims {
            iss: "planner".into(),
            aud: "executor".into(),
            iat,
            exp: iat + lifetime,
            nbf: None,
            jti: jti.into(),
        };
        let header = Header::new(Algorithm::EdDSA);
        let key = EncodingKey::from_ed_der(&planner().pkcs8_der());
        jsonwebtoken::encode(&header, &claims, &key).unwrap()
    }

    #[test]
    fn accepted_tokens_are_forgotten_once_they_can_no_longer_be_presented() {
        let policy = policy();
        for jti in ["a", "b", "c"] {
            assert!(policy.check(&token(NOW, 60, jti), NOW).is_ok());
        }
        assert!(policy.check(&token(NOW, 300, "long"), NOW).is_ok());
        assert_eq!(policy.remembered_tokens(), 4);
        // The same token is refused while it is valid, up to exp + skew.
        let replay = policy.check(&token(NOW, 60, "a"), NOW + 60 + 30);
        assert!(replay.unwrap_err().contains("already used"));

        // Past exp + skew of the short ones, a request evicts them (and only them).
        let later = NOW + 60 + 31;
        assert!(policy.check(&token(later, 60, "d"), later).is_ok());
        assert_eq!(policy.remembered_tokens(), 2, "long and d remain");
        // The evicted token is refused for having expired, not remembered as used.
        let expired = policy.check(&token(NOW, 60, "a"), later).unwrap_err();
        assert!(expired.contains("expired"), "{expired}");
    }

    #[test]
    fn time_claims_are_checked_against_the_given_clock() {
        let policy = policy();
        let at = |iat: i64, lifetime: i64, now: i64| {
            policy.check(
                &token(iat, lifetime, &format!("{iat}-{lifetime}-{now}")),
                now,
            )
        };
        assert!(at(NOW, 60, NOW + 90).is_ok(), "expired within the skew");
        assert!(at(NOW, 60, NOW + 91).unwrap_err().contains("expired"));
        assert!(at(NOW + 30, 60, NOW).is_ok(), "issued within the skew");
        assert!(
            at(NOW + 31, 60, NOW)
                .unwrap_err()
                .contains("issued in the future")
        );
        assert!(at(NOW, 331, NOW).unwrap_err().contains("lives longer"));
    }
}
