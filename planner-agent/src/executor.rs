//! The planner's link to the executor: the curated catalog (`GET {executor}/catalog`) and
//! the A2A calls on the executor's tasks, each authenticated with a fresh short-lived
//! EdDSA JWT (`iss` = the planner's key id, `aud` = the executor's id, a new `jti`).
//! This is the only way out of the planner: it holds no tool credentials. Given several
//! executor replicas (one database, docs/running-the-executor.md: any of them answers for every saga),
//! the link uses one until it cannot be reached, then the next.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_host::sdk::{A2AError, StreamResponse, Task, error_code};
use agent_host::{AgentClient, OutboundCall, mint_jwt};
use futures::stream::BoxStream;
use serde_json::Value;
use shared_types::{Catalog, SigningIdentity};

use crate::error::{Error, Result};

/// Lifetime of each JWT the planner mints (the executor accepts at most 300 s).
pub const JWT_LIFETIME_SECONDS: i64 = 120;
/// Largest catalog the planner reads.
const MAX_CATALOG_BYTES: usize = 16 * 1024 * 1024;

/// One executor replica's address and client.
struct Replica {
    url: String,
    client: AgentClient,
}

/// Where the executor is and who the planner is to it.
#[derive(Clone)]
pub struct ExecutorLink {
    replicas: Arc<[Replica]>,
    /// Which replica calls go to: the next one after a call that could not reach it.
    current: Arc<AtomicUsize>,
    executor_id: String,
    identity: Arc<SigningIdentity>,
    http: reqwest::Client,
    timeout: Duration,
}

impl std::fmt::Debug for ExecutorLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorLink")
            .field("url", &self.url())
            .field("executor_id", &self.executor_id)
            .field("planner", &self.identity.kid())
            .finish_non_exhaustive()
    }
}

impl ExecutorLink {
    /// `url` is the executor's base URL; `executor_id` the audience of its JWTs.
    pub fn new(url: &str, executor_id: &str, identity: Arc<SigningIdentity>) -> Result<Self> {
        Self::replicas(&[url.to_owned()], executor_id, identity)
    }

    /// Executor replicas sharing one database, tried in this order: calls go to one until
    /// it cannot be reached, then to the next.
    pub fn replicas(
        urls: &[String],
        executor_id: &str,
        identity: Arc<SigningIdentity>,
    ) -> Result<Self> {
        if urls.is_empty() {
            return Err(Error::Config("no executor URL".into()));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| Error::Config(format!("cannot build an HTTP client: {e}")))?;
        let replicas = urls
            .iter()
            .map(|url| {
                let url = url.trim_end_matches('/').to_owned();
                let client = AgentClient::new(&url).map_err(|e| Error::Config(e.to_string()))?;
                Ok(Replica { url, client })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            replicas: replicas.into(),
            current: Arc::default(),
            executor_id: executor_id.to_owned(),
            identity,
            http,
            timeout: Duration::from_secs(30),
        })
    }

    /// The replica calls go to now, and its place in the list.
    fn replica(&self) -> (usize, &Replica) {
        let at = self.current.load(Ordering::Relaxed) % self.replicas.len();
        (at, &self.replicas[at])
    }

    /// After a call to replica `at` that could not reach it: the next calls go to the
    /// next replica (unless another call moved on already).
    fn unreachable(&self, at: usize) {
        if self.replicas.len() > 1
            && self
                .current
                .compare_exchange(
                    at,
                    (at + 1) % self.replicas.len(),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            tracing::warn!(
                unreachable = %self.replicas[at].url,
                next = %self.replicas[(at + 1) % self.replicas.len()].url,
                "an executor replica cannot be reached; calling the next one"
            );
        }
    }

    /// The URL of the executor (replica) calls go to now.
    pub fn url(&self) -> &str {
        &self.replica().1.url
    }

    pub fn executor_id(&self) -> &str {
        &self.executor_id
    }

    /// The planner's id: its key's kid, the `iss` of its JWTs and the signer of its plans.
    pub fn planner_id(&self) -> &str {
        self.identity.kid()
    }

    fn bearer(&self) -> Result<String> {
        mint_jwt(
            &self.identity,
            self.identity.kid(),
            &self.executor_id,
            JWT_LIFETIME_SECONDS,
        )
        .map_err(|e| Error::Config(format!("cannot mint a JWT for the executor: {e}")))
    }

    fn call(&self) -> Result<OutboundCall> {
        Ok(OutboundCall {
            bearer: Some(self.bearer()?),
            timeout: self.timeout,
            ..OutboundCall::default()
        })
    }

    /// Reads the executor's curated catalog.
    pub async fn catalog(&self) -> Result<Catalog> {
        let (at, replica) = self.replica();
        let result = self.catalog_of(&replica.url).await;
        if matches!(result, Err(Error::ExecutorUnavailable(_))) {
            self.unreachable(at);
        }
        result
    }

    async fn catalog_of(&self, base: &str) -> Result<Catalog> {
        let url = format!("{base}/catalog");
        let failed = |what: String| Error::Executor(format!("cannot read {url}: {what}"));
        let unavailable =
            |what: String| Error::ExecutorUnavailable(format!("cannot read {url}: {what}"));
        let mut response = self
            .http
            .get(&url)
            .bearer_auth(self.bearer()?)
            .send()
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        let status = response.status();
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| unavailable(e.to_string()))?
        {
            if bytes.len() + chunk.len() > MAX_CATALOG_BYTES {
                return Err(failed(format!(
                    "the catalog exceeds {MAX_CATALOG_BYTES} bytes"
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let body = String::from_utf8_lossy(&bytes);
            let excerpt: String = body.chars().take(300).collect();
            let what = format!("the executor answered {status}: {excerpt}");
            // A server error may pass (a restart, a gateway before it); a refusal does not.
            return Err(if status.is_server_error() {
                unavailable(what)
            } else {
                failed(what)
            });
        }
        let value = shared_types::json::parse_strict_bytes(&bytes)
            .map_err(|e| failed(format!("not JSON: {e}")))?;
        serde_json::from_value(value).map_err(|e| failed(format!("not a catalog: {e}")))
    }

    /// Submits a signed plan with `SendStreamingMessage`; the stream starts with the
    /// executor's task.
    pub async fn submit(
        &self,
        plan: &Value,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>> {
        let request = agent_host::user_request(None, Some(plan.clone()), None);
        let (at, replica) = self.replica();
        replica
            .client
            .stream(&self.call()?, &request)
            .await
            .map_err(|e| {
                if is_unknown_outcome(&e) {
                    self.unreachable(at);
                    Error::ExecutorUnavailable(format!(
                        "the executor at {} could not be reached or did not answer: {e}",
                        replica.url
                    ))
                } else {
                    Error::Executor(format!(
                        "the executor at {} refused the plan: {e}",
                        replica.url
                    ))
                }
            })
    }

    /// Follows an executor task again (after a dropped stream or a restart).
    pub async fn subscribe(
        &self,
        task_id: &str,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>> {
        let (at, replica) = self.replica();
        replica
            .client
            .subscribe(&self.call()?, task_id)
            .await
            .map_err(|e| {
                self.unreachable_if(at, &e);
                Error::Executor(format!("cannot follow executor task {task_id}: {e}"))
            })
    }

    pub async fn get_task(&self, task_id: &str) -> Result<Task> {
        let (at, replica) = self.replica();
        replica
            .client
            .get_task(&self.call()?, task_id)
            .await
            .map_err(|e| {
                self.unreachable_if(at, &e);
                Error::Executor(format!("cannot read executor task {task_id}: {e}"))
            })
    }

    /// Asks the executor to cancel its task; the A2A error is kept for the caller.
    pub async fn cancel_task(&self, task_id: &str) -> Result<Task, agent_host::Error> {
        let call = self
            .call()
            .map_err(|e| agent_host::Error::Config(e.to_string()))?;
        let (at, replica) = self.replica();
        let result = replica.client.cancel_task(&call, task_id).await;
        if let Err(e) = &result {
            self.unreachable_if(at, e);
        }
        result
    }

    fn unreachable_if(&self, at: usize, error: &agent_host::Error) {
        if is_unknown_outcome(error) {
            self.unreachable(at);
        }
    }
}

/// Whether an A2A error from the executor leaves the call's outcome unknown (the
/// connection broke, or the executor failed internally) rather than refusing it.
pub(crate) fn leaves_outcome_unknown(error: &A2AError) -> bool {
    error.code == error_code::INTERNAL_ERROR
}

/// Whether a call that failed with `error` may have reached the executor, or may work if
/// made again: no answer in time, no connection, or an internal error (the SDK's client
/// reports a broken connection, and an answer that is not JSON-RPC, such as a gateway's
/// 502 page, as one). Every other A2A error is the executor's refusal.
fn is_unknown_outcome(error: &agent_host::Error) -> bool {
    match error {
        agent_host::Error::Transport(_) => true,
        agent_host::Error::Protocol(e) => leaves_outcome_unknown(e),
        agent_host::Error::Store(_)
        | agent_host::Error::Config(_)
        | agent_host::Error::Conflict { .. } => false,
    }
}
