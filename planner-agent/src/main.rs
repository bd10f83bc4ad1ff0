//! `planner-agent`: the intent plane as a process. Serves A2A (`plan-and-execute`), signs
//! plans with its own key and submits them to the executor with short-lived JWTs. It
//! holds no tool credentials: its configuration is its key, the executor's address and,
//! optionally, a model endpoint.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_host::{InboundAuth, JwtPolicy};
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
    after_help = "Environment:\n  SAGAPLANE_PLANNER_TOKEN   bearer token callers must present (at least 16 characters), \
                  instead of --caller-token-file\n  \
                  SAGAPLANE_LLM_API_KEY     API key of the model server (with --llm-url), sent as a bearer token; never logged\n  \
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
    /// The executor's base URL. Repeated for executor replicas on one database: calls go
    /// to the first until it cannot be reached, then to the next.
    #[arg(long, default_value = "http://127.0.0.1:7300")]
    executor: Vec<String>,
    /// The executor's id: the audience of the planner's JWTs.
    #[arg(long, default_value = "executor")]
    executor_id: String,
    /// Plan any goal with a model: the URL of an OpenAI-compatible server (Ollama, vLLM,
    /// llama.cpp's server, a hosted API). `http://host:port` gets `/v1/chat/completions`
    /// appended; a URL with a path (`http://host:port/v1`, `https://api.example/openai/v1`)
    /// gets `/chat/completions`; trailing slashes do not matter. Its API key, if it needs
    /// one, goes in SAGAPLANE_LLM_API_KEY. Without this flag the planner plans from its
    /// goal templates only.
    #[arg(long, value_name = "URL", requires = "llm_model")]
    llm_url: Option<String>,
    /// The model to ask for plan drafts (as the server names it, e.g. `qwen2.5:7b`).
    #[arg(long, value_name = "NAME", requires = "llm_url")]
    llm_model: Option<String>,
    /// How long to wait for each of the model's answers, in seconds.
    #[arg(long, default_value_t = 120)]
    llm_timeout_seconds: u64,
    /// PEM certificates to trust for an https:// model server besides the system's
    /// roots (a server behind a private certificate authority).
    #[arg(long, value_name = "PEM", requires = "llm_url")]
    llm_ca_file: Option<std::path::PathBuf>,
    /// How many times a draft the planner refuses goes back to the model with the
    /// refusals (0: never; at most 10). Every refused draft is kept in the plan's
    /// authoredBy.rejectedAlternatives; when none passes, the goal is REJECTED.
    #[arg(long, value_name = "N", default_value_t = planner_agent::llm::DEFAULT_MAX_REPAIRS,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(planner_agent::llm::MAX_REPAIRS_LIMIT)))]
    llm_max_repairs: u32,
    /// Callers present the bearer token in FILE (at least 16 characters); they are
    /// named NAME (default `user`), and a goal's task is its sender's.
    #[arg(long, value_name = "[NAME=]FILE", conflicts_with = "callers")]
    caller_token_file: Option<String>,
    /// A trusted caller: EdDSA JWTs from ISSUER (default: the key's `kid`) signed by
    /// this key, for the audience of the planner's id. Repeatable; each issuer sees and
    /// cancels only the goals it sent.
    #[arg(long = "caller", value_name = "[ISSUER=]PUB.jwk")]
    callers: Vec<String>,
    /// Serve anyone, unauthenticated (local experiments only: loopback, and logged).
    #[arg(long, conflicts_with_all = ["caller_token_file", "callers"])]
    open: bool,
    /// A principal's signed mandate (JSON) that goals are planned under, embedded
    /// unchanged in every plan: it must be granted to this planner's key id. A goal may
    /// bring its own in its data part (`mandate`), which takes precedence; without this
    /// flag, every goal must.
    #[arg(long, value_name = "MANDATE.json")]
    mandate: Option<PathBuf>,
    /// For how many seconds reading the executor's catalog, or submitting a plan, is tried
    /// again while the executor cannot be reached, answers with a server error or its
    /// answer is lost (waits from 100 ms doubling up to 5 s, or an eighth of this, with
    /// jitter); a refusal is not tried again.
    #[arg(long, value_name = "SECONDS", default_value_t = planner_agent::DEFAULT_EXECUTOR_RETRY.as_secs())]
    executor_retry_secs: u64,
    /// How long (ms) the executor's progress on a plan gathers before it is written to the
    /// planner's task, so that a saga's steps cost the planner a few writes rather than
    /// one each. Pauses and ends are written at once; 0 writes each status at once; at
    /// most 60000.
    #[arg(long, value_name = "MS",
          default_value_t = planner_agent::GATHER_PROGRESS.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    gather_progress_ms: u64,
    /// How many times a goal whose saga unwound (every completed step compensated), or
    /// whose plan the executor refused for a reason a new plan may avoid (its catalog
    /// changed), is planned again, under the same mandate, with the failure as input;
    /// each new plan names the saga it supersedes. 0 never plans again; at most 10.
    #[arg(long, value_name = "N",
          default_value_t = planner_agent::replan::DEFAULT_MAX_REPLANS,
          value_parser = clap::value_parser!(u32).range(0..=i64::from(planner_agent::replan::MAX_REPLANS_LIMIT)))]
    max_replans: u32,
    /// An OpenTelemetry collector's OTLP/HTTP base URL (e.g. http://127.0.0.1:4318): each
    /// plan's making is sent there as a span in its saga's trace, under the executor's
    /// span of that saga. Off unless given.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    #[command(flatten)]
    serving: agent_host::cli::ServingArgs,
}

/// The signed mandate in `path`, which must not have expired.
fn read_mandate(path: &Path) -> anyhow::Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value = shared_types::json::parse_strict(&text)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    let mandate = shared_types::Mandate::from_value(&value)
        .map_err(|e| anyhow::anyhow!("{} is not a mandate: {e}", path.display()))?;
    if mandate.not_after <= chrono::Utc::now() {
        bail!(
            "mandate {:?} in {} expired at {}; ask its principal for a new one",
            mandate.mandate_id,
            path.display(),
            mandate.not_after.to_rfc3339()
        );
    }
    Ok(value)
}

fn read_identity(path: &Path) -> anyhow::Result<SigningIdentity> {
    let jwk = read_jwk(path)?;
    SigningIdentity::from_jwk(&jwk).with_context(|| format!("{}", path.display()))
}

fn read_jwk(path: &Path) -> anyhow::Result<Jwk> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value = shared_types::json::parse_strict(&text)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    serde_json::from_value(value)
        .with_context(|| format!("{} is not a JSON Web Key", path.display()))
}

/// `[ISSUER=]PUB.jwk`: the issuer defaults to the key's kid.
fn trusted_caller(spec: &str) -> anyhow::Result<(String, Jwk)> {
    let (issuer, path) = match spec.split_once('=') {
        Some((issuer, path)) if !issuer.is_empty() => (Some(issuer.to_owned()), path),
        _ => (None, spec),
    };
    let jwk = read_jwk(Path::new(path))?;
    let issuer = match (issuer, &jwk.kid) {
        (Some(issuer), _) => issuer,
        (None, Some(kid)) => kid.clone(),
        (None, None) => bail!("{path} has no kid: name its issuer as ISSUER={path}"),
    };
    Ok((issuer, jwk))
}

fn static_token(name: String, token: String, from: &str) -> anyhow::Result<InboundAuth> {
    if token.len() < 16 {
        bail!("the token from {from} must be at least 16 characters");
    }
    Ok(InboundAuth::StaticBearer { name, token })
}

/// How callers authenticate: a static token (file or environment), trusted JWT issuers,
/// or, only with `--open` and only on loopback, nobody.
fn inbound_auth(
    args: &Args,
    planner_id: &str,
    address: std::net::SocketAddr,
) -> anyhow::Result<InboundAuth> {
    if let Some(spec) = &args.caller_token_file {
        let (name, path) = match spec.split_once('=') {
            Some((name, path)) if !name.is_empty() => (name.to_owned(), path),
            _ => ("user".to_owned(), spec.as_str()),
        };
        let token = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {path}"))?
            .trim()
            .to_owned();
        return static_token(name, token, path);
    }
    if !args.callers.is_empty() {
        let issuers = args
            .callers
            .iter()
            .map(|spec| trusted_caller(spec))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let policy = JwtPolicy::new(planner_id, &issuers).context("--caller")?;
        return Ok(InboundAuth::Jwt(Arc::new(policy)));
    }
    if let Ok(token) = std::env::var(TOKEN_ENV)
        && !token.is_empty()
        && !args.open
    {
        return static_token("user".into(), token, TOKEN_ENV);
    }
    if args.open {
        if !address.ip().is_loopback() {
            bail!(
                "--open serves anyone who can reach the planner, so it listens only on a loopback address, not {address}"
            );
        }
        tracing::warn!(
            %address,
            "--open: the planner serves ANY local caller without authentication; anyone on this machine can send goals and cancel them"
        );
        return Ok(InboundAuth::Open);
    }
    bail!(
        "the planner authenticates its callers: pass --caller-token-file FILE (or set {TOKEN_ENV}), or --caller PUB.jwk for EdDSA JWTs; --open serves anyone on loopback, for local experiments"
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    agent_host::process::init_logging();
    let args = Args::parse();

    let identity = read_identity(&args.key)?;
    let mandate = args.mandate.as_deref().map(read_mandate).transpose()?;
    let mandate_id = mandate
        .as_ref()
        .and_then(|m| m.get("mandateId"))
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    let llm = match (args.llm_url.clone(), args.llm_model.clone()) {
        (Some(base_url), Some(model)) => Some(LlmConfig {
            base_url,
            model,
            api_key: std::env::var(LLM_KEY_ENV).ok().filter(|k| !k.is_empty()),
            timeout: Duration::from_secs(args.llm_timeout_seconds.max(1)),
            max_repairs: args.llm_max_repairs,
            extra_roots: args
                .llm_ca_file
                .as_ref()
                .map(|path| {
                    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
                })
                .transpose()?,
        }),
        _ => None,
    };

    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let address = listener.local_addr()?;
    let auth = inbound_auth(&args, identity.kid(), address)?;
    let public_url = args
        .url
        .clone()
        .unwrap_or_else(|| format!("http://{address}"));

    let shutdown = CancellationToken::new();
    let service = build_with(
        Settings {
            data_dir: Some(args.data.clone()),
            identity,
            executor_urls: args.executor,
            executor_id: args.executor_id,
            public_url: public_url.clone(),
            auth,
            mandate,
            llm,
            templates: Templates::builtin(),
            executor_retry: Duration::from_secs(args.executor_retry_secs),
            gather_progress: Duration::from_millis(args.gather_progress_ms),
            max_replans: args.max_replans,
            otlp_endpoint: args.otlp_endpoint,
        },
        shutdown.clone(),
        args.serving.max_concurrent_requests,
    )?;
    tracing::info!(planner = %service.planner.id(), mandate = ?mandate_id, "planner ready");
    let resumed = service.planner.recover().await?;
    if resumed > 0 {
        tracing::info!(tasks = resumed, "resuming interrupted planner tasks");
    }
    tokio::spawn(agent_host::process::shutdown_on_signal(shutdown.clone()));
    println!("listening on {public_url}");
    let limits = args.serving.connection_limits();
    agent_host::serve_with(listener, service.router, shutdown, limits).await?;
    if let Some(traces) = service.traces {
        // The exporter's thread sends what is buffered; shutting it down blocks.
        let _ = tokio::task::spawn_blocking(move || traces.shut_down()).await;
    }
    Ok(())
}
