//! `a2a-tck-sut`: an agent on Sagaplane's hosting layer that performs the A2A TCK's
//! scripted behaviours (chosen by the message id's prefix), so the layer can be checked
//! against the official conformance suite.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_host::agent_message;
use agent_host::sdk::{A2AError, Artifact, Message, Part, Task, TaskState, new_artifact_id};
use agent_host::{
    Agent, HostConfig, InboundAuth, MemoryTaskStore, Reply, RequestContext, ServedCard,
    SqliteTaskStore, TaskHandle, TaskManager, TaskStore, prepare_card,
};
use anyhow::Context;
use clap::Parser;
use serde_json::json;

#[derive(Debug, Parser)]
#[command(about = "A2A TCK system under test, on Sagaplane's hosting layer")]
struct Args {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:9999")]
    listen: String,
    /// SQLite file for tasks (default: in memory).
    #[arg(long)]
    store: Option<PathBuf>,
    #[command(flatten)]
    serving: agent_host::cli::ServingArgs,
}

struct TckAgent;

fn artifact(parts: Vec<Part>) -> Artifact {
    Artifact {
        artifact_id: new_artifact_id(),
        name: None,
        description: None,
        parts,
        metadata: None,
        extensions: None,
    }
}

fn file_part() -> Part {
    Part::raw(b"tck".to_vec())
        .with_media_type("text/plain")
        .with_filename("output.txt")
}

impl TckAgent {
    async fn script(&self, task: &TaskHandle, id: &str) -> agent_host::Result<()> {
        use TaskState::*;
        let working = || task.set_status(Working, None);
        let done = |m: Option<Message>| task.set_status(Completed, m);
        let add = |parts: Vec<Part>| task.add_artifact(artifact(parts), false, true);
        if id.starts_with("tck-stream-artifact-chunked") {
            working().await?;
            let chunked = artifact(vec![Part::text("chunk-1 ")]);
            let mut second = chunked.clone();
            second.parts = vec![Part::text("chunk-2")];
            task.add_artifact(chunked, true, false).await?;
            task.add_artifact(second, true, true).await?;
            done(None).await?;
        } else if id.starts_with("test-resubscribe-message-id") {
            working().await?;
            tokio::time::sleep(Duration::from_secs(4)).await;
            done(None).await?;
        } else if id.starts_with("tck-stream-artifact-text") {
            working().await?;
            add(vec![Part::text("Streamed text content")]).await?;
            done(None).await?;
        } else if id.starts_with("tck-stream-artifact-file") {
            working().await?;
            add(vec![file_part()]).await?;
            done(None).await?;
        } else if id.starts_with("tck-stream-ordering-001") {
            working().await?;
            add(vec![Part::text("Ordered output")]).await?;
            done(None).await?;
        } else if id.starts_with("tck-artifact-file-url") {
            let url = Part::url("https://example.com/output.txt")
                .with_media_type("text/plain")
                .with_filename("output.txt");
            add(vec![url]).await?;
            done(None).await?;
        } else if id.starts_with("tck-input-required") {
            task.set_status(InputRequired, Some(agent_message("Input required", None)))
                .await?;
        } else if id.starts_with("tck-complete-task") {
            done(Some(agent_message("Hello from TCK", None))).await?;
        } else if id.starts_with("tck-artifact-text") {
            add(vec![Part::text("Generated text content")]).await?;
            done(None).await?;
        } else if id.starts_with("tck-artifact-file") {
            add(vec![file_part()]).await?;
            done(None).await?;
        } else if id.starts_with("tck-artifact-data") {
            add(vec![Part::data(json!({"key": "value", "count": 42}))]).await?;
            done(None).await?;
        } else if id.starts_with("tck-reject-task") {
            task.set_status(Rejected, Some(agent_message("rejected", None)))
                .await?;
        } else if id.starts_with("tck-stream-001") {
            working().await?;
            add(vec![Part::text("Stream hello from TCK")]).await?;
            done(None).await?;
        } else if id.starts_with("tck-stream-002") {
            done(None).await?;
        } else if id.starts_with("tck-stream-003") {
            working().await?;
            add(vec![Part::text("Stream task lifecycle")]).await?;
            done(None).await?;
        } else {
            done(Some(agent_message(
                format!("Unhandled messageId prefix: {id}"),
                None,
            )))
            .await?;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Agent for TckAgent {
    async fn accept(
        &self,
        _: &RequestContext,
        message: &Message,
        _: Option<&Task>,
    ) -> Result<Reply, A2AError> {
        if message.message_id.starts_with("tck-message-response") {
            return Ok(Reply::Message(agent_message(
                "Direct message response",
                None,
            )));
        }
        Ok(Reply::Task)
    }

    async fn run(&self, _: RequestContext, task: TaskHandle, message: Message) {
        if let Err(e) = self.script(&task, &message.message_id).await {
            tracing::warn!(task = task.id(), error = %e, "scripted behaviour failed");
        }
    }
}

fn card() -> serde_json::Value {
    json!({
        "name": "sagaplane-tck-sut",
        "description": "A2A TCK system under test on Sagaplane's hosting layer",
        "version": env!("CARGO_PKG_VERSION"),
        "provider": {"organization": "Sagaplane", "url": "https://sagaplane.invalid"},
        "supportedInterfaces": [
            {"url": "", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [{
            "id": "tck", "name": "TCK behaviours", "description": "Scripted behaviours chosen by message id prefix",
            "tags": ["tck"], "examples": ["tck-complete-task"]
        }]
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let address = listener.local_addr()?;
    let store: Arc<dyn TaskStore> = match &args.store {
        Some(path) => Arc::new(SqliteTaskStore::open(path)?),
        None => Arc::new(MemoryTaskStore::new()),
    };
    let card = prepare_card(card(), &format!("http://{address}"), None)?;
    let mut config = HostConfig::new(ServedCard::new(&card)?, InboundAuth::Open);
    config.max_concurrent_requests = args.serving.max_concurrent_requests;
    let router = agent_host::app(&config, Arc::new(TckAgent), TaskManager::new(store));
    let shutdown = config.shutdown.clone();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        on_signal.cancel();
    });
    println!("listening on http://{address}");
    let limits = args.serving.connection_limits();
    agent_host::serve_with(listener, router, shutdown, limits).await?;
    Ok(())
}
