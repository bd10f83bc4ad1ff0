//! Calls MCP tools of registered servers. One session per server, opened on first use and
//! checked before any call: the server must still be the one the manifest names and still
//! declare exactly the recovery the manifest pins, or nothing is called.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use shared_types::mcp::McpManifest;

use super::{McpCallContext, McpSession};
use crate::registry::{AgentKind, CuratedManifest, McpListing, RegisteredAgent};
use crate::saga::{CallOutcome, Invocation};

/// How long opening a session and listing tools may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// MCP sessions by agent, and the executor's credential for each server.
#[derive(Debug, Default)]
pub struct McpInvoker {
    credentials: HashMap<String, String>,
    /// Open sessions by agent name, with the manifest they were checked against.
    sessions: tokio::sync::Mutex<HashMap<String, (McpManifest, Arc<McpSession>)>>,
}

impl McpInvoker {
    /// `credentials`: the bearer token for each agent, by agent name.
    pub fn new(credentials: HashMap<String, String>) -> Self {
        Self {
            credentials,
            sessions: Default::default(),
        }
    }

    /// Looks at a server before it is registered: its name and raw tool list, read from
    /// the endpoint the verified manifest names, with the credential of the agent it
    /// curates. Nothing else decides where a credential goes.
    pub async fn listing(&self, curated: &CuratedManifest) -> Result<McpListing, String> {
        let url = curated.url.as_str();
        let credential = self.credentials.get(curated.agent()).cloned();
        let session = McpSession::connect(url, credential, CONNECT_TIMEOUT).await?;
        let tools = session.list_tools().await;
        let server_name = session.server_name();
        session.close().await;
        Ok(McpListing {
            url: url.to_owned(),
            server_name,
            tools: tools?,
        })
    }

    /// Drops the session of `agent` (after it is registered again).
    pub async fn forget(&self, agent: &str) {
        if let Some((_, session)) = self.sessions.lock().await.remove(agent)
            && let Ok(session) = Arc::try_unwrap(session)
        {
            session.close().await;
        }
    }

    /// The open session for `agent`, or a new one that passed the manifest's checks.
    async fn session(
        &self,
        agent: &str,
        url: &str,
        manifest: &McpManifest,
    ) -> Result<Arc<McpSession>, String> {
        let mut sessions = self.sessions.lock().await;
        if let Some((checked, session)) = sessions.get(agent)
            && checked == manifest
        {
            return Ok(session.clone());
        }
        let session =
            McpSession::connect(url, self.credentials.get(agent).cloned(), CONNECT_TIMEOUT).await?;
        let refused = |why: String| {
            format!("the MCP server for {agent} no longer matches its curated manifest: {why}")
        };
        if let Some(name) = session.server_name()
            && name != manifest.server.name
        {
            return Err(refused(format!(
                "it is {name:?}, the manifest names {:?}",
                manifest.server.name
            )));
        }
        let tools = session.list_tools().await?;
        manifest
            .catalog_agent(&tools)
            .map_err(|e| refused(e.to_string()))?;
        let session = Arc::new(session);
        sessions.insert(agent.to_owned(), (manifest.clone(), session.clone()));
        Ok(session)
    }

    async fn drop_session(&self, agent: &str, session: &Arc<McpSession>) {
        let mut sessions = self.sessions.lock().await;
        if sessions
            .get(agent)
            .is_some_and(|(_, open)| Arc::ptr_eq(open, session))
        {
            sessions.remove(agent);
        }
    }

    /// Calls the tool an invocation names on `agent`'s server.
    pub async fn invoke(
        &self,
        agent: &RegisteredAgent,
        invocation: &Invocation,
        context: McpCallContext,
    ) -> CallOutcome {
        let (AgentKind::Mcp { manifest, .. }, Some(url)) = (&agent.kind, &agent.url) else {
            return CallOutcome::failed(format!("{} is not a registered MCP server", agent.name));
        };
        // Nothing was sent when the session cannot be opened or checked: a definite failure.
        let session = match self.session(&agent.name, url, manifest).await {
            Ok(session) => session,
            Err(reason) => return CallOutcome::failed(reason),
        };
        let arguments = match &invocation.args {
            Value::Object(_) => invocation.args.clone(),
            Value::Null => Value::Object(Default::default()),
            other => {
                return CallOutcome::failed(format!(
                    "MCP tool arguments must be an object, not {other}"
                ));
            }
        };
        let timeout = Duration::from_millis(invocation.call.timeout_ms);
        let outcome = session
            .call(&invocation.call.skill, &arguments, &context, timeout)
            .await;
        if matches!(outcome, CallOutcome::Unknown { .. }) {
            // The session may be what broke; the next call opens a fresh one.
            self.drop_session(&agent.name, &session).await;
        }
        outcome
    }
}
