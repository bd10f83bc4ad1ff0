//! Benchmark: `SendMessage` round trips per second against a trivial agent on loopback,
//! 64 concurrent clients, with the SQLite store and with the in-memory store.
//! Run: `cargo bench -p agent-host --bench send_message` (not a timed test).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agent_host::sdk::{Message, TaskState};
use agent_host::{
    Agent, HostConfig, InboundAuth, MemoryTaskStore, RequestContext, ServedCard, SqliteTaskStore,
    TaskHandle, TaskManager, TaskStore, prepare_card,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const CLIENTS: usize = 64;
const WARMUP: Duration = Duration::from_secs(1);
const MEASURE: Duration = Duration::from_secs(5);

struct Done;

#[async_trait::async_trait]
impl Agent for Done {
    async fn run(&self, _: RequestContext, task: TaskHandle, _: Message) {
        let _ = task.set_status(TaskState::Completed, None).await;
    }
}

async fn measure(name: &str, store: Arc<dyn TaskStore>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let card = json!({"name": "bench", "description": "", "version": "1", "supportedInterfaces": [],
        "capabilities": {"streaming": true}, "defaultInputModes": [], "defaultOutputModes": [], "skills": []});
    let card = prepare_card(card, &url, None).expect("card");
    let config = HostConfig::new(ServedCard::new(&card).expect("card"), InboundAuth::Open);
    let router = agent_host::app(&config, Arc::new(Done), TaskManager::new(store));
    let shutdown = config.shutdown.clone();
    let server = tokio::spawn(agent_host::serve(listener, router, shutdown.clone()));

    let counting = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(CLIENTS)
        .build()
        .expect("client");
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (http, url, count, counting, stop) = (
            http.clone(),
            url.clone(),
            count.clone(),
            counting.clone(),
            stop.clone(),
        );
        clients.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.is_cancelled() {
                n += 1;
                let body = json!({"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": {
                    "role": "ROLE_USER", "messageId": format!("m-{c}-{n}"), "parts": [{"text": "go"}]}}});
                let response = http.post(format!("{url}/")).header("A2A-Version", "1.0").json(&body).send().await;
                let ok = match response {
                    Ok(r) => r.text().await.is_ok_and(|t| t.contains("TASK_STATE_COMPLETED")),
                    Err(_) => false,
                };
                assert!(ok, "a SendMessage failed");
                if counting.load(Ordering::Relaxed) {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(WARMUP).await;
    counting.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(MEASURE).await;
    counting.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    stop.cancel();
    for client in clients {
        client.await.expect("client task");
    }
    let total = count.load(Ordering::Relaxed);
    println!(
        "{name:>8}: {:>8.0} SendMessage/s ({total} round trips in {:.1} s, {CLIENTS} concurrent clients)",
        total as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    shutdown.cancel();
    let _ = server.await;
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing useful: run either way.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        measure("memory", Arc::new(MemoryTaskStore::new())).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteTaskStore::open(&dir.path().join("bench.db")).expect("sqlite");
        measure("sqlite", Arc::new(store)).await;
    });
}
