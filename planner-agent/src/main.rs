//! `planner-agent`: the intent plane as a process. Serves A2A (`plan-and-execute`), signs
//! plans with its own key and submits them to the executor with short-lived JWTs. It
//! holds no tool credentials: its configuration is its key, the executor's address and,
//! optionally, a model endpoint.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_host::InboundAuth;
use anyhow::{Context, bail};
use clap::Parser;
use planner_agent::service::{Settings, build_with};
use planner_agent::{LlmConfig, Templates};
use shared_types::{Jwk, SigningIdentity};
use tokio_util::sync::CancellationToken;

/// Environment variable holding the bearer token clients must present.
const TOKEN_ENV: &str = "SAGAPLANE_PLANNER_TOKEN";
/// Environment variable holding the model endpoint's API key.
const LLM_KEY_ENV: &str = "SAGAPLANE_LLM_API_KEY";

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Sagaplane planner: turns goals into signed plans and submits them to the executor",
    after_help = "Environment:\n  SAGAPLANE_PLANNER_TOKEN   bearer token clients must present (at least 16 characters); \
                  without it the planner is open and may only listen on a loopback address\n  \
                  SAGAPLANE_LLM_API_KEY     API key of the model endpoint (with --llm-url)\n  \
                  RUST_LOG                  log filter (default: info)"
)]
struct Args {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:7400")]
    listen: String,
    /// Base URL clients use to reach this planner (default: http://<listen address>).
    #[arg(long)]
    url: Option<String>,
    /// Directory for the task store (created if missing).
    #[arg(long)]
    data: PathBuf,
    /// The planner's private key (JWK); its kid is the planner's id, the `iss` of its
    /// JWTs and the signer of its plans.
    #[arg(long, value_name = "planner.jwk")]
    key: PathBuf,
    /// The executor's base URL.
    #[arg(long, default_value = "http://127.0.0.1:7300")]
    executor: String,
    /// The executor's id: the audience of the planner's JWTs.
    #[arg(long, default_value = "executor")]
    executor_id: String,
    /// Base URL of an OpenAI-compatible API (`/chat/completions` is appended); without
    /// it the planner uses its deterministic rules.
    #[arg(long, requires = "llm_model")]
    llm_url: Option<String>,
    /// The model to ask for plan drafts.
    #[arg(long, requires = "llm_url")]
    llm_model: Option<String>,
    /// How long to wait for the model's answer, in seconds.
    #[arg(long, default_value_t = 120)]
    llm_timeout_seconds: u64,
    #[command(flatten)]
    serving: agent_host::cli::ServingArgs,
}

fn read_identity(path: &Path) -> anyhow::Result<SigningIdentity> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value = shared_types::json::parse_strict(&text)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    let jwk: Jwk = serde_json::from_value(value)
        .with_context(|| format!("{} is not a JSON Web Key", path.display()))?;
    SigningIdentity::from_jwk(&jwk).with_context(|| format!("{}", path.display()))
}

/// A static bearer token when one is set; otherwise open, and only on loopback.
fn inbound_auth(address: std::net::SocketAddr) -> anyhow::Result<InboundAuth> {
    match std::env::var(TOKEN_ENV) {
        Ok(token) if !token.is_empty() => {
            if token.len() < 16 {
                bail!("{TOKEN_ENV} must be at least 16 characters");
            }
            Ok(InboundAuth::StaticBearer {
                name: "user".into(),
                token,
            })
        }
        _ if address.ip().is_loopback() => Ok(InboundAuth::Open),
        _ => bail!(
            "without {TOKEN_ENV} the planner is open to anyone who can reach it, so it listens only on a loopback address; set {TOKEN_ENV} to listen on {address}"
        ),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    agent_host::process::init_logging();
    let args = Args::parse();

    let identity = read_identity(&args.key)?;
    let llm = match (args.llm_url, args.llm_model) {
        (Some(base_url), Some(model)) => Some(LlmConfig {
            base_url,
            model,
            api_key: std::env::var(LLM_KEY_ENV).ok().filter(|k| !k.is_empty()),
            timeout: Duration::from_secs(args.llm_timeout_seconds.max(1)),
        }),
        _ => None,
    };

    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let address = listener.local_addr()?;
    let auth = inbound_auth(address)?;
    let public_url = args.url.unwrap_or_else(|| format!("http://{address}"));

    let shutdown = CancellationToken::new();
    let service = build_with(
        Settings {
            data_dir: Some(args.data),
            identity,
            executor_url: args.executor,
            executor_id: args.executor_id,
            public_url: public_url.clone(),
            auth,
            llm,
            templates: Templates::builtin(),
        },
        shutdown.clone(),
        args.serving.max_concurrent_requests,
    )?;
    tracing::info!(planner = %service.planner.id(), "planner ready");
    let resumed = service.planner.recover().await?;
    if resumed > 0 {
        tracing::info!(tasks = resumed, "resuming interrupted planner tasks");
    }
    tokio::spawn(agent_host::process::shutdown_on_signal(shutdown.clone()));
    println!("listening on {public_url}");
    let limits = args.serving.connection_limits();
    agent_host::serve_with(listener, service.router, shutdown, limits).await?;
    Ok(())
}
