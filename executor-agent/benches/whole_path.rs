//! Benchmark of the path users take (issue 21, first cut): the real `executor-agent`
//! binary as a process with its default SQLite state, six loopback A2A tool agents (in
//! this process, on threads of their own), and a load client that, for every saga, signs
//! a fresh plan (a unique saga id) under a principal's mandate, mints a fresh planner JWT
//! and sends it with a blocking `SendMessage`, as a planner does. It reports sagas/s,
//! steps/s, latency, and CPU per saga of the executor process, of the tool agents' threads
//! and of the client's threads, from `/proc`.
//!
//! `cargo bench -p executor-agent --bench whole_path` (`WHOLE_PATH_SECONDS`, 5 by default,
//! per concurrency level).

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_host::sdk::{
    Message, Part, Role, SendMessageRequest, SendMessageResponse, TaskState, new_message_id,
};
use agent_host::{AgentClient, OutboundCall, mint_jwt};
use serde_json::{Value, json};
use shared_types::SigningIdentity;

#[path = "saga/tool_agent.rs"]
mod tool_agent;

pub(crate) const TOOL_TOKEN: &str = "tool-secret";
const AGENTS: [&str; 6] = [
    "vendor-registry",
    "budget",
    "sandbox",
    "compliance-registry",
    "payments",
    "mailer",
];
const STEPS: u64 = 6;
const ADMIN_TOKEN: &str = "admin-token-for-the-whole-path-bench";
const TOOL_THREADS: &str = "tool-agent";
const CLIENT_THREADS: &str = "load-client";

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read_json(path: &str) -> Value {
    let text = std::fs::read_to_string(root().join(path)).expect("a workspace file");
    shared_types::json::parse_strict(&text).expect("JSON")
}

/// utime + stime, in ticks, of a `/proc/.../stat` line.
fn ticks(stat: &str) -> u64 {
    let Some(close) = stat.rfind(')') else {
        return 0;
    };
    let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

fn process_ticks(pid: u32) -> u64 {
    ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
}

/// Ticks of this process's threads whose name starts with `prefix`.
fn thread_ticks(prefix: &str) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .is_ok_and(|name| name.trim_end().starts_with(prefix))
        })
        .map(|e| ticks(&std::fs::read_to_string(e.path().join("stat")).unwrap_or_default()))
        .sum()
}

/// `/proc` counts CPU in ticks of 10 ms.
fn ms(ticks: u64) -> f64 {
    ticks as f64 * 10.0
}

struct Executor {
    child: Child,
    url: String,
}

impl Drop for Executor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write(dir: &std::path::Path, name: &str, value: &Value) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, value.to_string()).expect("a temporary file");
    path
}

fn start_executor(dir: &std::path::Path, keys: &Keys) -> Executor {
    let public = |name: &str, id: &SigningIdentity| {
        write(
            dir,
            name,
            &serde_json::to_value(id.public_jwk()).expect("a JWK"),
        )
    };
    let credentials: serde_json::Map<String, Value> = AGENTS
        .iter()
        .map(|a| (a.to_string(), json!(TOOL_TOKEN)))
        .collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_executor-agent"))
        .args(["--listen", "127.0.0.1:0", "--data"])
        .arg(dir.join("data"))
        .arg("--platform-key")
        .arg(public("platform.pub.jwk", &keys.platform))
        .arg("--planner")
        .arg(public("planner.pub.jwk", &keys.planner))
        .arg("--principal")
        .arg(public("principal.pub.jwk", &keys.principal))
        .arg("--credentials")
        .arg(write(dir, "credentials.json", &Value::Object(credentials)))
        // A blocking send holds its request turn until its saga ends (README, security).
        .args([
            "--max-concurrent-requests",
            "4096",
            "--max-connections",
            "4096",
        ])
        .env("SAGAPLANE_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the executor-agent binary starts");
    let stdout = child.stdout.take().expect("its stdout");
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the executor prints where it listens");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .expect("listening on URL")
        .to_owned();
    Executor { child, url }
}

struct Keys {
    platform: SigningIdentity,
    planner: SigningIdentity,
    principal: SigningIdentity,
}

/// One concurrency level's figures.
struct Round {
    clients: usize,
    sagas: u64,
    seconds: f64,
    latencies_ms: Vec<f64>,
    executor_ms: f64,
    tools_ms: f64,
    client_ms: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let seconds: u64 = std::env::var("WHOLE_PATH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let keys = Keys {
        platform: SigningIdentity::generate(Some("platform".into())).expect("a key"),
        planner: SigningIdentity::generate(Some("planner-1".into())).expect("a key"),
        principal: SigningIdentity::generate(Some("principal".into())).expect("a key"),
    };
    let tools = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(TOOL_THREADS)
        .enable_all()
        .build()
        .expect("the tool agents' runtime");
    let tool_urls: Vec<String> = AGENTS
        .iter()
        .map(|_| tool_agent::start_tool_agent(&tools))
        .collect();
    let executor = start_executor(dir.path(), &keys);
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(CLIENT_THREADS)
        .enable_all()
        .build()
        .expect("the client's runtime");
    client.block_on(register(&executor.url, &keys.platform, &tool_urls));
    let template = plan_template(&keys);
    println!(
        "whole path: the executor-agent binary (pid {}, SQLite state) ← a client signing a plan and minting a JWT per saga, blocking SendMessage; six tool agents in this process; {seconds} s per level",
        executor.child.id()
    );
    println!(
        "{:>7} {:>7} {:>8} {:>8} {:>8} {:>8} {:>12} {:>12} {:>11} {:>11}",
        "clients",
        "sagas",
        "sagas/s",
        "steps/s",
        "p50 ms",
        "p99 ms",
        "exec ms/saga",
        "exec ms/step",
        "tools ms/s",
        "client ms/s"
    );
    for clients in [1usize, 64, 256] {
        let round = client.block_on(run_round(
            &executor,
            &keys.planner,
            &template,
            clients,
            Duration::from_secs(seconds),
        ));
        let mut sorted = round.latencies_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let sagas = round.sagas.max(1) as f64;
        println!(
            "{:>7} {:>7} {:>8.0} {:>8.0} {:>8.1} {:>8.1} {:>12.2} {:>12.3} {:>11.2} {:>11.2}",
            round.clients,
            round.sagas,
            round.sagas as f64 / round.seconds,
            (round.sagas * STEPS) as f64 / round.seconds,
            percentile(&sorted, 0.5),
            percentile(&sorted, 0.99),
            round.executor_ms / sagas,
            round.executor_ms / (sagas * STEPS as f64),
            round.tools_ms / sagas,
            round.client_ms / sagas,
        );
    }
    println!(
        "CPU from /proc (10 ms ticks): the executor process; the tool agents' and the client's threads of this process. Every saga COMPLETED or the bench stops."
    );
}

/// Registers the six curated cards, each naming its tool agent's URL, signed by the
/// platform.
async fn register(executor: &str, platform: &SigningIdentity, urls: &[String]) {
    let http = reqwest::Client::new();
    for (agent, url) in AGENTS.iter().zip(urls) {
        let mut card = read_json(&format!("agent-cards/{agent}.json"));
        if let Some(interfaces) = card["supportedInterfaces"].as_array_mut() {
            for interface in interfaces {
                interface["url"] = json!(url);
            }
        }
        platform.sign_in_place(&mut card).expect("signed");
        let answer = http
            .post(format!("{executor}/admin/cards"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&card)
            .send()
            .await
            .expect("the executor answers");
        assert_eq!(
            answer.status(),
            201,
            "{agent}: {}",
            answer.text().await.unwrap_or_default()
        );
    }
}

/// The example plan under a principal's mandate for the planner, as text with the saga id
/// to replace.
fn plan_template(keys: &Keys) -> String {
    let mut mandate = read_json("examples/mandates/test-mandate.json");
    mandate["mandateId"] = json!("md_whole_path");
    mandate["grantees"] = json!([keys.planner.kid()]);
    mandate["budget"]["amountMinor"] = json!(9_000_000_000_000_000u64);
    keys.principal.sign_in_place(&mut mandate).expect("signed");
    let mut plan = read_json("examples/plans/supplier-onboarding.json");
    plan["mandate"] = mandate;
    plan.to_string()
}

async fn run_round(
    executor: &Executor,
    planner: &SigningIdentity,
    template: &str,
    clients: usize,
    length: Duration,
) -> Round {
    let pid = executor.child.id();
    let (executor_before, tools_before, client_before) = (
        process_ticks(pid),
        thread_ticks(TOOL_THREADS),
        thread_ticks(CLIENT_THREADS),
    );
    let started = Instant::now();
    let deadline = started + length;
    let template = Arc::new(template.to_owned());
    let workers = (0..clients).map(|worker| {
        let (template, planner, url) = (template.clone(), planner.clone(), executor.url.clone());
        tokio::spawn(async move {
            let agent = AgentClient::new(&url).expect("a client");
            let mut latencies = Vec::new();
            let mut n = 0u64;
            while Instant::now() < deadline {
                let saga = format!("sg_wp_{clients}_{worker}_{n}");
                n += 1;
                let sent = Instant::now();
                let mut plan: Value =
                    serde_json::from_str(&template.replace("sg_demo_supplier_onboarding", &saga))
                        .expect("the plan");
                planner.sign_in_place(&mut plan).expect("signed");
                let call = OutboundCall {
                    bearer: Some(mint_jwt(&planner, planner.kid(), "executor", 60).expect("a JWT")),
                    ..OutboundCall::default()
                };
                let request = SendMessageRequest {
                    message: Message {
                        message_id: new_message_id(),
                        context_id: None,
                        task_id: None,
                        role: Role::User,
                        parts: vec![Part::data(json!({ "plan": plan }))],
                        metadata: None,
                        extensions: None,
                        reference_task_ids: None,
                    },
                    configuration: None,
                    metadata: None,
                    tenant: None,
                };
                match agent.send(&call, &request).await {
                    Ok(SendMessageResponse::Task(task))
                        if task.status.state == TaskState::Completed => {}
                    other => panic!("saga {saga} did not complete: {other:?}"),
                }
                latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
            }
            latencies
        })
    });
    let mut latencies_ms = Vec::new();
    for worker in futures::future::join_all(workers).await {
        latencies_ms.extend(worker.expect("a client task"));
    }
    let seconds = started.elapsed().as_secs_f64();
    Round {
        clients,
        sagas: latencies_ms.len() as u64,
        seconds,
        latencies_ms,
        executor_ms: ms(process_ticks(pid) - executor_before),
        tools_ms: ms(thread_ticks(TOOL_THREADS) - tools_before),
        client_ms: ms(thread_ticks(CLIENT_THREADS) - client_before),
    }
}
