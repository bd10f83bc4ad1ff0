//! The executor as an A2A agent: a signed plan in, every check before any effect, the
//! saga run against real tool agents, and the task lifecycle a client sees.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agent_host::sdk::{
    Message, Part, Role, SendMessageRequest, SendMessageResponse, Task, TaskState, new_message_id,
};
use agent_host::{
    AgentClient, HostConfig, InboundAuth, MemoryTaskStore, OutboundCall, ServedCard, TaskManager,
    prepare_card,
};
use common::*;
use executor_agent::agent::{Executor, ExecutorAgent, ExecutorConfig};
use executor_agent::journal::SqliteJournal;
use executor_agent::registry::Registry;
use serde_json::{Value, json};
use shared_types::{SigningIdentity, TrustStore};

struct Setup {
    client: AgentClient,
    planner: SigningIdentity,
    logs: HashMap<String, Arc<Mutex<ToolLog>>>,
    _dir: tempfile::TempDir,
}

async fn setup(faults: &[(&str, Fault)]) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let platform = SigningIdentity::from_seed([21; 32], Some("platform".into()));
    let planner = SigningIdentity::from_seed([22; 32], Some("planner".into()));
    let mut platform_keys = TrustStore::new();
    platform_keys.add_jwk(&platform.public_jwk()).unwrap();
    let registry = Registry::open(&dir.path().join("registry.db"), platform_keys).unwrap();
    let mut logs = HashMap::new();
    let mut credentials = HashMap::new();
    for agent in AGENTS {
        let log = Arc::new(Mutex::new(ToolLog::default()));
        let faults = faults.iter().map(|(s, f)| (s.to_string(), *f)).collect();
        let url = start_tool(faults, log.clone()).await;
        let mut card = read(&format!("agent-cards/{agent}.json"));
        // Short timeouts and backoffs keep faults quick here.
        if let Some(skills) = card
            .pointer_mut("/capabilities/extensions/0/params/skills")
            .and_then(Value::as_object_mut)
        {
            for declaration in skills.values_mut() {
                declaration["timeoutMs"] = json!(300);
                if let Some(retry) = declaration.get_mut("retry") {
                    retry["initialBackoffMs"] = json!(20);
                    retry["maxBackoffMs"] = json!(50);
                }
            }
        }
        let card = prepare_card(card, &url, Some(&platform)).unwrap();
        registry.register(card).await.unwrap();
        credentials.insert(agent.to_owned(), TOOL_TOKEN.to_owned());
        logs.insert(agent.to_owned(), log);
    }
    let mut planner_keys = TrustStore::new();
    planner_keys.add_jwk(&planner.public_jwk()).unwrap();
    let journal = Arc::new(SqliteJournal::open(&dir.path().join("journal.db")).unwrap());
    let tasks = TaskManager::new(Arc::new(MemoryTaskStore::new()));
    let executor = Executor::new(
        ExecutorConfig {
            registry,
            planner_keys,
            journal,
            credentials,
        },
        tasks.clone(),
    );

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let card = json!({"name": "executor", "description": "", "version": "1", "supportedInterfaces": [],
        "capabilities": {"streaming": true}, "defaultInputModes": [], "defaultOutputModes": [], "skills": []});
    let config = HostConfig::new(
        ServedCard::new(&prepare_card(card, &url, None).unwrap()).unwrap(),
        InboundAuth::Open,
    );
    let router = agent_host::app(&config, Arc::new(ExecutorAgent(executor)), tasks);
    tokio::spawn(agent_host::serve(listener, router, config.shutdown.clone()));
    Setup {
        client: AgentClient::new(&url).unwrap(),
        planner,
        logs,
        _dir: dir,
    }
}

fn message(data: Value, task_id: Option<&str>) -> SendMessageRequest {
    SendMessageRequest {
        message: Message {
            message_id: new_message_id(),
            context_id: None,
            task_id: task_id.map(str::to_owned),
            role: Role::User,
            parts: vec![Part::data(data)],
            metadata: None,
            extensions: None,
            reference_task_ids: None,
        },
        configuration: None,
        metadata: None,
        tenant: None,
    }
}

fn signed(setup: &Setup, path: &str) -> Value {
    let mut plan = read(path);
    setup.planner.sign_in_place(&mut plan).unwrap();
    plan
}

async fn send(setup: &Setup, data: Value, task_id: Option<&str>) -> Task {
    match setup
        .client
        .send(&OutboundCall::default(), &message(data, task_id))
        .await
        .unwrap()
    {
        SendMessageResponse::Task(task) => task,
        other => panic!("expected a task, got {other:?}"),
    }
}

fn applied(setup: &Setup) -> usize {
    setup
        .logs
        .values()
        .map(|l| l.lock().unwrap().effects.len())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_plan_runs_to_completion_and_a_resubmission_returns_the_same_task() {
    let setup = setup(&[]).await;
    let plan = signed(&setup, "examples/plans/supplier-onboarding.json");
    let task = send(&setup, plan.clone(), None).await;
    assert_eq!(task.status.state, TaskState::Completed, "{task:?}");
    let ledger = task
        .artifacts
        .as_ref()
        .unwrap()
        .iter()
        .find(|a| a.artifact_id == "saga-ledger")
        .unwrap();
    assert!(format!("{ledger:?}").contains("sg_demo_supplier_onboarding:s5"));
    assert_eq!(applied(&setup), 6);

    let again = send(&setup, json!({"plan": plan}), None).await;
    assert_eq!(
        again.id, task.id,
        "an identical plan returns the existing task"
    );
    assert_eq!(applied(&setup), 6, "and runs nothing again");

    let mut conflicting = read("examples/plans/invalid/plan-conflict.json");
    setup.planner.sign_in_place(&mut conflicting).unwrap();
    let refused = send(&setup, conflicting, None).await;
    assert_eq!(refused.status.state, TaskState::Rejected);
    assert!(format!("{:?}", refused.status.message).contains("PLAN_CONFLICT"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_plan_is_rejected_with_every_violation_before_any_effect() {
    let setup = setup(&[]).await;
    let task = send(
        &setup,
        signed(&setup, "examples/plans/five-violations.json"),
        None,
    )
    .await;
    assert_eq!(task.status.state, TaskState::Rejected);
    let text = format!("{:?}", task.status.message);
    for code in [
        "IDEMPOTENCY_KEY_MISMATCH",
        "ARGS_INVALID",
        "BAD_REFERENCE",
        "MANDATE_EXCEEDED",
        "CLASS_MISMATCH",
    ] {
        assert!(text.contains(code), "{code} in {text}");
    }
    // A plan signed by someone else is refused too.
    let mut forged = read("examples/plans/supplier-onboarding.json");
    SigningIdentity::from_seed([99; 32], Some("mallory".into()))
        .sign_in_place(&mut forged)
        .unwrap();
    let task = send(&setup, forged, None).await;
    assert_eq!(task.status.state, TaskState::Rejected);
    assert!(format!("{:?}", task.status.message).contains("SIGNER_UNTRUSTED"));
    assert_eq!(applied(&setup), 0, "nothing ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_before_the_pivot_ends_failed_with_outcome_compensated() {
    let setup = setup(&[("compliance.check", Fault::Hang)]).await;
    let task = send(
        &setup,
        signed(&setup, "examples/plans/supplier-onboarding.json"),
        None,
    )
    .await;
    assert_eq!(task.status.state, TaskState::Failed);
    assert_eq!(task.metadata.as_ref().unwrap()["outcome"], "compensated");
    for agent in ["vendor-registry", "budget", "sandbox"] {
        let effects = setup.logs[agent].lock().unwrap().effects.clone();
        assert_eq!(
            effects.len(),
            2,
            "{agent}: the effect and its undo: {effects:?}"
        );
        assert!(effects[1].0.ends_with(":undo"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalation_waits_for_a_person_and_cannot_be_canceled_past_the_pivot() {
    let setup = setup(&[("email.send", Fault::Hang)]).await;
    let task = send(
        &setup,
        signed(&setup, "examples/plans/supplier-onboarding.json"),
        None,
    )
    .await;
    assert_eq!(
        task.status.state,
        TaskState::InputRequired,
        "{:?}",
        task.status
    );
    let err = setup
        .client
        .cancel_task(&OutboundCall::default(), &task.id)
        .await
        .unwrap_err();
    assert!(err.to_string().to_lowercase().contains("cancel"), "{err}");
    let done = send(
        &setup,
        json!({"resolution": "resolved-manually"}),
        Some(&task.id),
    )
    .await;
    assert_eq!(done.status.state, TaskState::Completed, "{:?}", done.status);
}
