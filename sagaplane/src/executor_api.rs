//! The executor's HTTP API beside A2A, as the command line uses it: registering curated
//! cards (admin token) and reading the catalog (planner JWT). Each call runs on a small
//! runtime of its own: the rest of the command line is synchronous.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use shared_types::{Catalog, SigningIdentity};

use crate::a2a::block_on;
use crate::failure::Failure;
use crate::input::read_jwk;

/// Environment variable holding the executor's admin token.
pub const ADMIN_TOKEN_ENV: &str = "SAGAPLANE_ADMIN_TOKEN";

fn http() -> Result<reqwest::Client, Failure> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| Failure::unusable(format!("cannot start the HTTP client: {e}")))
}

fn base(url: &str) -> &str {
    url.trim_end_matches('/')
}

/// The error message in an executor's error body, or the body itself.
fn reason(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| body.chars().take(300).collect())
}

/// Sends the request; answers the body of a 2xx, or a failure naming the status and reason.
async fn exchange(request: reqwest::RequestBuilder, what: &str) -> Result<Value, Failure> {
    let response = request
        .send()
        .await
        .map_err(|e| Failure::unusable(format!("cannot reach the executor to {what}: {e}")))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        let why = reason(&body);
        return Err(match status.as_u16() {
            401 => Failure::unusable(format!("the executor refused the credential: {why}")),
            422 => Failure::rejected(format!("refused: {why}")),
            code => Failure::unusable(format!("cannot {what}: HTTP {code}: {why}")),
        });
    }
    serde_json::from_str(&body)
        .map_err(|e| Failure::unusable(format!("the executor's answer is not JSON: {e}")))
}

/// The admin token: from `file`, else from the environment.
pub fn admin_token(file: Option<&Path>) -> Result<String, Failure> {
    let token = match file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| Failure::unusable(format!("cannot read {}: {e}", path.display())))?,
        None => std::env::var(ADMIN_TOKEN_ENV).map_err(|_| {
            Failure::unusable(format!(
                "the admin token is missing: set {ADMIN_TOKEN_ENV} or pass --admin-token-file"
            ))
        })?,
    };
    Ok(token.trim().to_owned())
}

/// `POST /admin/cards` with a card, or `{"url": …}` for the executor to fetch it.
pub async fn register_card(executor: &str, token: &str, body: &Value) -> Result<Value, Failure> {
    let request = http()?
        .post(format!("{}/admin/cards", base(executor)))
        .bearer_auth(token)
        .json(body);
    exchange(request, "register the card").await
}

/// `POST /admin/mcp-servers` with `{"url", "manifest"}`: the executor lists the server's
/// tools and checks them against the signed manifest.
pub async fn register_mcp_async(
    executor: &str,
    token: &str,
    body: &Value,
) -> Result<Value, Failure> {
    let request = http()?
        .post(format!("{}/admin/mcp-servers", base(executor)))
        .bearer_auth(token)
        .json(body);
    exchange(request, "register the MCP server").await
}

/// `register_mcp_async`, from synchronous code.
pub fn register_mcp(executor: &str, token: &str, body: &Value) -> Result<Value, Failure> {
    block_on(register_mcp_async(executor, token, body))
}

/// `register_card`, from synchronous code.
pub fn register(executor: &str, token: &str, body: &Value) -> Result<Value, Failure> {
    block_on(register_card(executor, token, body))
}

/// `GET /catalog`, authenticated with a JWT signed by the planner key at `key` (its `kid`
/// is the issuer) for the executor `audience`.
pub fn catalog(executor: &str, key: &Path, audience: &str) -> Result<Catalog, Failure> {
    let identity = SigningIdentity::from_jwk(&read_jwk(key)?)
        .map_err(|e| Failure::unusable(format!("{}: {e}", key.display())))?;
    let issuer = identity.kid().to_owned();
    let jwt = agent_host::mint_jwt(&identity, &issuer, audience, 60)
        .map_err(|e| Failure::unusable(e.to_string()))?;
    let value = block_on(async {
        let request = http()?
            .get(format!("{}/catalog", base(executor)))
            .bearer_auth(jwt);
        exchange(request, "read the catalog").await
    })?;
    serde_json::from_value(value)
        .map_err(|e| Failure::unusable(format!("the executor's catalog is not a catalog: {e}")))
}

/// `POST /mandates/revocations` with a principal's signed revocation: its signature is
/// its authority, so it needs no other credential.
pub fn revoke_mandate(executor: &str, revocation: &Value) -> Result<Value, Failure> {
    block_on(async {
        let request = http()?
            .post(format!("{}/mandates/revocations", base(executor)))
            .json(revocation);
        exchange(request, "revoke the mandate").await
    })
}

/// `GET /admin/mandates/{id}`: budget, reserved, spent and the sagas under it.
pub async fn mandate_async(
    executor: &str,
    token: &str,
    mandate_id: &str,
) -> Result<Value, Failure> {
    let mut url = reqwest::Url::parse(&format!("{}/admin/mandates", base(executor)))
        .map_err(|e| Failure::unusable(format!("bad executor URL {executor:?}: {e}")))?;
    url.path_segments_mut()
        .map_err(|()| Failure::unusable(format!("bad executor URL {executor:?}")))?
        .push(mandate_id);
    let request = http()?.get(url).bearer_auth(token);
    exchange(request, "read the mandate").await
}

/// `mandate_async`, from synchronous code.
pub fn mandate(executor: &str, token: &str, mandate_id: &str) -> Result<Value, Failure> {
    block_on(mandate_async(executor, token, mandate_id))
}
