//! A client for one demo tool agent: calls a skill the way the executor does
//! (`SendMessage` with `{"skill", "args"}` in a data part, bearer token, `Idempotency-Key`),
//! reads its ledger and sets its faults.

use std::collections::BTreeMap;
use std::time::Duration;

use agent_host::sdk::{PartContent, SendMessageResponse, Task};
use agent_host::{AgentClient, OutboundCall};
use serde_json::{Value, json};

use super::faults::FaultMode;
use super::ledger::LedgerReport;
use super::{Result, SupplierError};

/// A client for one tool agent at `url` (its base URL).
#[derive(Debug)]
pub struct ToolClient {
    url: String,
    token: Option<String>,
    a2a: AgentClient,
    http: reqwest::Client,
}

/// The first data part of the task's artifacts, with integral numbers as integers.
pub fn task_data(task: &Task) -> Option<Value> {
    let mut data = task
        .artifacts
        .as_deref()
        .unwrap_or_default()
        .iter()
        .flat_map(|a| a.parts.iter())
        .find_map(|p| match &p.content {
            PartContent::Data(v) => Some(v.clone()),
            _ => None,
        })?;
    shared_types::json::normalize_integers(&mut data);
    Some(data)
}

/// The text of the task's status message (why it was refused or failed).
pub fn task_text(task: &Task) -> Option<String> {
    task.status.message.as_ref()?.text().map(str::to_owned)
}

impl ToolClient {
    /// A client presenting `token` (none: unauthenticated).
    pub fn new(url: &str, token: Option<&str>) -> Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| SupplierError::Io(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self {
            url: url.trim_end_matches('/').to_owned(),
            token: token.map(str::to_owned),
            a2a: AgentClient::new(url)?,
            http,
        })
    }

    /// The underlying A2A client.
    pub fn a2a(&self) -> &AgentClient {
        &self.a2a
    }

    /// Calls `skill` with `args` under `key`, waiting at most `timeout` for the answer.
    pub async fn call(
        &self,
        skill: &str,
        args: Value,
        key: Option<&str>,
        timeout: Duration,
    ) -> Result<Task> {
        let call = OutboundCall {
            bearer: self.token.clone(),
            idempotency_key: key.map(str::to_owned),
            timeout,
            ..OutboundCall::default()
        };
        self.call_with(&call, skill, args).await
    }

    /// Calls `skill` with `args` and a full call context (headers, deadline).
    pub async fn call_with(&self, call: &OutboundCall, skill: &str, args: Value) -> Result<Task> {
        let request =
            agent_host::user_request(None, Some(json!({"skill": skill, "args": args})), None);
        match self.a2a.send(call, &request).await? {
            SendMessageResponse::Task(task) => Ok(task),
            SendMessageResponse::Message(_) => Err(SupplierError::Io(format!(
                "{} answered {skill} with a message, not a task",
                self.url
            ))),
        }
    }

    async fn json(&self, request: reqwest::RequestBuilder) -> Result<Value> {
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let response = request
            .send()
            .await
            .map_err(|e| SupplierError::Io(format!("{}: {e}", self.url)))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| SupplierError::Io(format!("{}: {e}", self.url)))?;
        if !status.is_success() {
            return Err(SupplierError::Io(format!(
                "{} answered {status}: {}",
                self.url,
                String::from_utf8_lossy(&body)
            )));
        }
        serde_json::from_slice(&body)
            .map_err(|e| SupplierError::Io(format!("{} answered with bad JSON: {e}", self.url)))
    }

    /// `GET /ledger`.
    pub async fn ledger(&self) -> Result<LedgerReport> {
        let value = self
            .json(self.http.get(format!("{}/ledger", self.url)))
            .await?;
        serde_json::from_value(value)
            .map_err(|e| SupplierError::Io(format!("{}/ledger: unexpected shape: {e}", self.url)))
    }

    /// `GET /faults`.
    pub async fn faults(&self) -> Result<BTreeMap<String, FaultMode>> {
        let value = self
            .json(self.http.get(format!("{}/faults", self.url)))
            .await?;
        serde_json::from_value(value)
            .map_err(|e| SupplierError::Io(format!("{}/faults: unexpected shape: {e}", self.url)))
    }

    /// `PUT /faults`: replaces every fault of the agent; returns what is set now.
    pub async fn set_faults(
        &self,
        faults: &BTreeMap<String, FaultMode>,
    ) -> Result<BTreeMap<String, FaultMode>> {
        let request = self.http.put(format!("{}/faults", self.url)).json(faults);
        let value = self.json(request).await?;
        serde_json::from_value(value)
            .map_err(|e| SupplierError::Io(format!("{}/faults: unexpected shape: {e}", self.url)))
    }
}
