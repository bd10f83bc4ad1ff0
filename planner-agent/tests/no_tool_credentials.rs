//! The planner cannot act below the line: a tool agent that requires the executor's
//! bearer token answers 401 to everything the planner can present (nothing, or a JWT
//! signed with the planner's own key), and nothing the planner links is the executor's
//! tool-invocation code.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_host::sdk::{Message, TaskState};
use agent_host::{
    Agent, AgentClient, HostConfig, InboundAuth, MemoryTaskStore, OutboundCall, RequestContext,
    ServedCard, TaskHandle, TaskManager, mint_jwt, prepare_card,
};
use common::*;
use planner_agent::executor::ExecutorLink;
use serde_json::json;
use tokio::net::TcpListener;

/// A tool agent that counts the calls that got through its authentication.
struct Tool {
    calls: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Agent for Tool {
    async fn run(&self, _: RequestContext, task: TaskHandle, _: Message) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let _ = task.set_status(TaskState::Completed, None).await;
    }
}

async fn start_tool(calls: Arc<AtomicUsize>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let card = json!({"name": "vendor-registry", "description": "", "version": "1",
        "supportedInterfaces": [], "capabilities": {"streaming": true},
        "defaultInputModes": [], "defaultOutputModes": [], "skills": []});
    let card = ServedCard::new(&prepare_card(card, &url, None).unwrap()).unwrap();
    let auth = InboundAuth::StaticBearer {
        name: "executor".into(),
        token: "the-executors-tool-credential".into(),
    };
    let config = HostConfig::new(card, auth);
    let router = agent_host::app(
        &config,
        Arc::new(Tool { calls }),
        TaskManager::new(Arc::new(MemoryTaskStore::new())),
    );
    tokio::spawn(agent_host::serve(listener, router, config.shutdown.clone()));
    url
}

#[tokio::test]
async fn a_tool_agent_refuses_the_planner() {
    let calls = Arc::new(AtomicUsize::new(0));
    let tool = start_tool(calls.clone()).await;
    let identity = planner_identity();
    let call = json!({"skill": "vendor.create",
        "args": {"legalName": "ACME GmbH", "contactEmail": "ops@acme.example"}});

    // Through the planner's own link, which signs a JWT for whatever it is pointed at.
    let link = ExecutorLink::new(&tool, "vendor-registry", Arc::new(identity.clone())).unwrap();
    let refused = link.submit(&call).await.err().expect("refused");
    assert!(
        refused.to_string().contains("not valid for this agent"),
        "{refused}"
    );
    let refused = link.catalog().await.unwrap_err();
    assert!(refused.to_string().contains("401"), "{refused}");

    // With the raw client: no credential, and the planner's JWT.
    let client = AgentClient::new(&tool).unwrap();
    let request = goal_request("", Some(call.clone()));
    let jwt = mint_jwt(&identity, identity.kid(), "vendor-registry", 60).unwrap();
    for bearer in [None, Some(jwt)] {
        let outbound = OutboundCall {
            bearer,
            ..OutboundCall::default()
        };
        let refused = client.send(&outbound, &request).await.unwrap_err();
        let said = refused.to_string();
        assert!(
            said.contains("not valid for this agent") || said.contains("requires Authorization"),
            "{said}"
        );
    }
    let http = reqwest::Client::new()
        .post(format!("{tool}/message:send"))
        .header("A2A-Version", "1.0")
        .json(&json!({"message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"data": call}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(http.status(), 401);
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no call reached the tool");
}

#[test]
fn the_planner_links_no_tool_invocation_code() {
    // Cargo.lock lists each package's dependencies (dev-dependencies included): neither
    // the planner nor anything it pulls in from the workspace may be the executor.
    let lock = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock"),
    )
    .unwrap();
    let dependencies_of = |name: &str| -> Vec<String> {
        let header = format!("[[package]]\nname = \"{name}\"\n");
        let Some(start) = lock.find(&header) else {
            return Vec::new();
        };
        let entry = &lock[start + header.len()..];
        let entry = &entry[..entry.find("\n\n").unwrap_or(entry.len())];
        entry
            .lines()
            .filter_map(|l| l.trim().strip_prefix('"'))
            .filter_map(|l| l.split(['"', ' ']).next())
            .map(str::to_owned)
            .collect()
    };
    let mut seen = vec!["planner-agent".to_owned()];
    let mut queue = seen.clone();
    while let Some(package) = queue.pop() {
        for dependency in dependencies_of(&package) {
            if !seen.contains(&dependency) {
                seen.push(dependency.clone());
                queue.push(dependency);
            }
        }
    }
    assert!(seen.contains(&"agent-host".to_owned()), "{seen:?}");
    assert!(!seen.contains(&"executor-agent".to_owned()), "{seen:?}");
}
