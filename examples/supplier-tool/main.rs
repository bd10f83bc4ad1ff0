//! `supplier-tool`: runs one of the six supplier-onboarding tool agents (or all six) as
//! real A2A servers on the hosting layer, each with its own durable ledger, bearer token
//! and fault switches (docs/getting-started.md).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Parser;
use sagaplane_examples::supplier::{
    AGENTS, FaultMode, RunningTool, SuiteSettings, ToolSettings, agent_of, parse_fault,
    scenario_faults, start, start_all,
};
use shared_types::{Jwk, SigningIdentity};
use tokio_util::sync::CancellationToken;

/// Environment variable holding the bearer token callers must present.
const TOKEN_ENV: &str = "SUPPLIER_TOOL_TOKEN";

#[derive(Debug, Parser)]
#[command(
    version,
    about = "The supplier-onboarding demo's tool agents: A2A servers with durable ledgers and fault switches",
    after_help = "Agents: vendor-registry, budget, sandbox, compliance-registry, payments, mailer, or all.\n\
Fault modes: decline, hang, apply-then-hang, unavailable, fail-always, transient-once, expire-early;\n\
and, to see `sagaplane tools check` name a broken promise: not-idempotent, strict-undo, accept-late, bad-output.\n\
Routes besides A2A (bearer token): GET /ledger, GET /faults, PUT /faults {\"<skill>\": \"<mode>\"|\"none\"} (replaces all).\n\n\
Environment:\n  SUPPLIER_TOOL_TOKEN   the bearer token (or --token-file)\n  RUST_LOG              log filter (default: info)"
)]
struct Args {
    /// The agent to run, or `all` for the six in one process.
    #[arg(long)]
    agent: String,
    /// Address to listen on. Port 0 picks free ports; with `--agent all` and port P, the
    /// agents take P, P+1, …, P+5.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Directory for each agent's ledger (`<agent>.ledger.db`) and tasks (`<agent>.tasks.db`).
    #[arg(long)]
    data: PathBuf,
    /// File holding the bearer token (instead of SUPPLIER_TOOL_TOKEN).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Private JWK of the platform key that signs the served cards.
    #[arg(long, value_name = "PLATFORM.jwk")]
    sign_card_with: Option<PathBuf>,
    /// A fault: `SKILL=MODE`, e.g. `compliance.check=hang`. Repeatable.
    #[arg(long = "fault", value_name = "SKILL=MODE")]
    faults: Vec<String>,
    /// The faults of one of the demo's scenarios: none, compliance, capture-decline,
    /// capture-unknown, capture-lost, capture-unverified, email, release (added to
    /// --fault).
    #[arg(long)]
    fail_at: Option<String>,
    /// Folder of the curated cards (`<agent>.json`).
    #[arg(long, default_value_os_t = sagaplane_examples::agent_cards_dir())]
    cards: PathBuf,
    #[command(flatten)]
    serving: agent_host::cli::ServingArgs,
}

fn token(file: Option<&Path>) -> anyhow::Result<String> {
    let token = match file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .trim()
            .to_owned(),
        None => std::env::var(TOKEN_ENV)
            .unwrap_or_default()
            .trim()
            .to_owned(),
    };
    if token.is_empty() {
        bail!("the agents need a bearer token: set {TOKEN_ENV} or pass --token-file");
    }
    Ok(token)
}

fn signer(path: &Path) -> anyhow::Result<SigningIdentity> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value = shared_types::json::parse_strict(&text)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    let jwk: Jwk = serde_json::from_value(value)
        .with_context(|| format!("{} is not a JSON Web Key", path.display()))?;
    SigningIdentity::from_jwk(&jwk).with_context(|| format!("{}", path.display()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    agent_host::process::init_logging();
    let args = Args::parse();

    let token = token(args.token_file.as_deref())?;
    let signer = args.sign_card_with.as_deref().map(signer).transpose()?;
    let mut faults: Vec<(String, FaultMode)> = args
        .faults
        .iter()
        .map(|spec| parse_fault(spec))
        .collect::<Result<_, _>>()?;
    let scenario = match &args.fail_at {
        Some(mode) => scenario_faults(mode)?,
        None => Vec::new(),
    };

    let shutdown = CancellationToken::new();
    let running: Vec<RunningTool> = if args.agent == "all" {
        faults.extend(scenario);
        let settings = SuiteSettings {
            data_dir: args.data,
            cards_dir: args.cards,
            token,
            signer,
            faults,
            serving: args.serving.serving(),
        };
        start_all(settings, args.listen, shutdown.clone()).await?
    } else {
        if !AGENTS.contains(&args.agent.as_str()) {
            bail!(
                "unknown agent {:?}; choose one of {} or all",
                args.agent,
                AGENTS.join(", ")
            );
        }
        // A scenario spans agents: this one takes the faults on its own skills.
        faults.extend(
            scenario
                .into_iter()
                .filter(|(skill, _)| agent_of(skill) == Some(args.agent.as_str())),
        );
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let settings = ToolSettings {
            agent: args.agent,
            data_dir: args.data,
            cards_dir: args.cards,
            token,
            signer,
            faults,
            serving: args.serving.serving(),
        };
        vec![start(settings, listener, shutdown.clone()).await?]
    };
    for tool in &running {
        println!("{} listening on {}", tool.agent, tool.url);
    }
    tokio::spawn(agent_host::process::shutdown_on_signal(shutdown.clone()));
    // One agent's server failing stops them all.
    let mut servers = tokio::task::JoinSet::new();
    for tool in running {
        servers.spawn(async move { (tool.agent, tool.stopped().await) });
    }
    let mut failed = None;
    while let Some(joined) = servers.join_next().await {
        let (agent, result) = joined.context("an agent's server task failed")?;
        if let Err(e) = result {
            tracing::error!(agent, error = %e, "the agent stopped with an error");
            shutdown.cancel();
            failed.get_or_insert(e);
        }
    }
    if let Some(e) = failed {
        return Err(e.into());
    }
    Ok(())
}
