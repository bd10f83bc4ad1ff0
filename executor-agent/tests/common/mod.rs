//! Tool agents for the executor's tests: real A2A servers on 127.0.0.1:0 that honour
//! Idempotency-Key, record what they were asked and what they applied, and take faults.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use agent_host::sdk::{Artifact, Message, Part, PartContent, Role, TaskState, new_message_id};
use agent_host::{
    Agent, HostConfig, InboundAuth, MemoryTaskStore, RequestContext, ServedCard, TaskHandle,
    TaskManager, prepare_card,
};
use serde_json::{Value, json};

pub const AGENTS: [&str; 6] = [
    "vendor-registry",
    "budget",
    "sandbox",
    "compliance-registry",
    "payments",
    "mailer",
];
pub const TOOL_TOKEN: &str = "tool-secret";

pub fn read(path: &str) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    shared_types::json::parse_strict(&std::fs::read_to_string(root.join(path)).unwrap()).unwrap()
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    Decline,
    Hang,
}

/// What one tool agent saw and did.
#[derive(Debug, Default)]
pub struct ToolLog {
    /// (idempotency key, skill) of every effect applied, in order.
    pub effects: Vec<(String, String)>,
    /// Every call received: (key, skill, caller, traceparent present, baggage).
    pub calls: Vec<(String, String, String, bool, String)>,
    pub results: HashMap<String, (Value, Value)>,
}

struct Tool {
    faults: HashMap<String, Fault>,
    log: Arc<Mutex<ToolLog>>,
}

pub fn response(skill: &str) -> Value {
    match skill {
        "vendor.create" => json!({"vendorId": "v_1"}),
        "budget.reserve" => json!({"reservationId": "r_1"}),
        "sandbox.provision" => json!({"tenantId": "t_1", "login": "acme-admin"}),
        "compliance.check" => json!({"status": "clear", "reference": "c_1"}),
        "payments.capture" => json!({"captureId": "p_1", "amountMinor": 12000, "currency": "EUR"}),
        "email.send" => json!({"messageId": "m_1"}),
        _ => json!({"done": true}),
    }
}

#[async_trait::async_trait]
impl Agent for Tool {
    async fn run(&self, ctx: RequestContext, task: TaskHandle, message: Message) {
        let Some(PartContent::Data(call)) = message.parts.first().map(|p| p.content.clone()) else {
            let _ = task.set_status(TaskState::Rejected, None).await;
            return;
        };
        let skill = call["skill"].as_str().unwrap_or_default().to_owned();
        let key = ctx.idempotency_key.clone().unwrap_or_default();
        self.log.lock().unwrap().calls.push((
            key.clone(),
            skill.clone(),
            ctx.caller.clone(),
            ctx.traceparent.is_some(),
            ctx.baggage.clone().unwrap_or_default(),
        ));
        let fault = self.faults.get(&skill).copied();
        if fault == Some(Fault::Hang) {
            std::future::pending::<()>().await;
        }
        if fault == Some(Fault::Decline) {
            let reason = Message {
                message_id: new_message_id(),
                context_id: None,
                task_id: None,
                role: Role::Agent,
                parts: vec![Part::text("declined")],
                metadata: None,
                extensions: None,
                reference_task_ids: None,
            };
            let _ = task.set_status(TaskState::Failed, Some(reason)).await;
            return;
        }
        let result = {
            let mut log = self.log.lock().unwrap();
            match log.results.get(&key) {
                Some((args, result)) if *args == call["args"] => result.clone(),
                Some(_) => Value::Null,
                None => {
                    let result = response(&skill);
                    log.effects.push((key.clone(), skill.clone()));
                    log.results
                        .insert(key, (call["args"].clone(), result.clone()));
                    result
                }
            }
        };
        if result.is_null() {
            let _ = task.set_status(TaskState::Failed, None).await;
            return;
        }
        let artifact = Artifact {
            artifact_id: "result".into(),
            name: None,
            description: None,
            parts: vec![Part::data(result)],
            metadata: None,
            extensions: None,
        };
        let _ = task.add_artifact(artifact, false, true).await;
        let _ = task.set_status(TaskState::Completed, None).await;
    }
}

pub async fn start_tool(faults: HashMap<String, Fault>, log: Arc<Mutex<ToolLog>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let card = json!({"name": "tool", "description": "", "version": "1", "supportedInterfaces": [],
        "capabilities": {"streaming": true}, "defaultInputModes": [], "defaultOutputModes": [], "skills": []});
    let card = prepare_card(card, &url, None).unwrap();
    let auth = InboundAuth::StaticBearer {
        name: "executor".into(),
        token: TOOL_TOKEN.into(),
    };
    let config = HostConfig::new(ServedCard::new(&card).unwrap(), auth);
    let router = agent_host::app(
        &config,
        Arc::new(Tool { faults, log }),
        TaskManager::new(Arc::new(MemoryTaskStore::new())),
    );
    tokio::spawn(agent_host::serve(listener, router, config.shutdown.clone()));
    url
}

/// The catalog of the six demo agents' (unsigned) cards.
pub fn supplier_catalog() -> shared_types::Catalog {
    let mut catalog = shared_types::Catalog::default();
    for agent in AGENTS {
        catalog
            .add_card(&read(&format!("agent-cards/{agent}.json")))
            .unwrap();
    }
    catalog
}

/// The supplier-onboarding example plan.
pub fn supplier_plan() -> shared_types::Plan {
    shared_types::Plan::from_value(&read("examples/plans/supplier-onboarding.json")).unwrap()
}
