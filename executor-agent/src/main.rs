//! `executor-agent`: the execution plane as a process. Holds the tool credentials, serves
//! A2A (`execute-plan`: planner and approver JWTs), the admin API and the catalog, and resumes every
//! unfinished saga from its journal at start. On Ctrl-C or SIGTERM it stops serving, lets
//! the calls out answer (up to `--drain-secs`), and exits.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use executor_agent::agent::DEFAULT_MAX_RUNNING_SAGAS;
use executor_agent::http::RegistrationHosts;
use executor_agent::metrics::DEFAULT_UNDO_EXPIRING_WITHIN;
use executor_agent::service::{Replica, Settings, Store, build_with};

/// See the dependency's note in Cargo.toml: the hot path allocates a lot, briefly.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use serde_json::Value;
use shared_types::{Jwk, TrustStore};
use tokio_util::sync::CancellationToken;

/// A replica's lease unless told otherwise: with `DEFAULT_RENEWAL`, a dead replica's
/// sagas are taken over within about 5 s.
const DEFAULT_REPLICA_LEASE: Duration = Duration::from_secs(4);
/// How often a replica renews its leases and looks for lapsed ones, unless told otherwise.
const DEFAULT_RENEWAL: Duration = Duration::from_secs(1);

/// Environment variable holding the admin API's bearer token.
const ADMIN_TOKEN_ENV: &str = "SAGAPLANE_ADMIN_TOKEN";
/// Environment variable holding the operator token (the console, read only).
const OPERATOR_TOKEN_ENV: &str = "SAGAPLANE_OPERATOR_TOKEN";
/// Prefix of environment variables holding a tool credential: `SAGAPLANE_CREDENTIAL_`
/// followed by the agent's name in upper case with `-` as `_`.
const CREDENTIAL_ENV_PREFIX: &str = "SAGAPLANE_CREDENTIAL_";

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Sagaplane executor: validates signed plans and runs them as durable sagas",
    after_help = "Environment:\n  SAGAPLANE_ADMIN_TOKEN          bearer token of the admin API (or --admin-token-file)\n  SAGAPLANE_OPERATOR_TOKEN       token that opens the console at /console, read only (or --operator-token-file)\n  SAGAPLANE_STORE                the PostgreSQL database replicas share (or --store)\n  SAGAPLANE_CREDENTIAL_<AGENT>   credential for a tool agent, e.g. SAGAPLANE_CREDENTIAL_VENDOR_REGISTRY\n  RUST_LOG                       log filter (default: info)"
)]
struct Args {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:7300")]
    listen: String,
    /// Base URL clients use to reach this executor (default: http://<listen address>).
    #[arg(long)]
    url: Option<String>,
    /// Directory of the executor's state file, `executor.db`: registry, journal and tasks
    /// (created if missing), held by this process alone. Either this or --store.
    #[arg(long, required_unless_present = "store", conflicts_with = "store")]
    data: Option<PathBuf>,
    /// A PostgreSQL database (`postgres://user[:password]@host:port/database`) that
    /// executor replicas share, instead of a data directory: the executor creates and
    /// migrates its tables there. Every replica given the same database accepts plans and
    /// serves every saga's task; each saga is driven by one replica at a time, under a
    /// lease, and taken over by another when its replica stops renewing it.
    #[arg(
        long,
        env = "SAGAPLANE_STORE",
        hide_env_values = true,
        value_name = "URL"
    )]
    store: Option<String>,
    /// With --store: how long (ms) a replica's claim on a saga holds without renewal.
    /// Once a replica dies (or is cut off from the database) for this long, the others
    /// take its sagas over. At least 500, at most 600000.
    #[arg(long, default_value_t = DEFAULT_REPLICA_LEASE.as_millis() as u64, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(500..=600_000))]
    lease_ms: u64,
    /// With --store: how often (ms) a replica renews the leases of its sagas (all in one
    /// statement) and looks for sagas whose lease lapsed, to take them over. Shorter than
    /// --lease-ms; at least 100.
    #[arg(long, default_value_t = DEFAULT_RENEWAL.as_millis() as u64, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    renew_ms: u64,
    /// With --store: how many connections to the database the replica opens at most for its
    /// work (and four more: two for leases, one for group commits, one listening).
    #[arg(long, default_value_t = sagaplane_storage::postgres::DEFAULT_CONNECTIONS, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(2..=1000))]
    store_connections: usize,
    /// The executor's name: its card's name and the audience planner JWTs must carry.
    #[arg(long, default_value = "executor")]
    id: String,
    /// Public key (JWK) of the platform that signs curated agent cards. Repeatable.
    #[arg(long = "platform-key", required = true, value_name = "PUB.jwk")]
    platform_keys: Vec<PathBuf>,
    /// A trusted planner: `[ISSUER=]PUB.jwk`. The issuer defaults to the key's `kid`; the
    /// key authenticates the planner's JWTs and verifies its plans. Repeatable.
    #[arg(long = "planner", required = true, value_name = "[ISSUER=]PUB.jwk")]
    planners: Vec<String>,
    /// Public key (JWK) of a principal (a person or organisation) whose signed mandates
    /// plans may run under: the budget, window and scope no planner can raise. Repeatable;
    /// never a planner's key.
    #[arg(long = "principal", required = true, value_name = "PUB.jwk")]
    principals: Vec<PathBuf>,
    /// A trusted approver (a person): `[ISSUER=]PUB.jwk`, the issuer defaulting to the
    /// key's `kid`. Its JWTs (same audience and rules as a planner's) answer sagas that
    /// wait for a person (approve, retry, resolved-manually, compensate) and see every
    /// saga; nobody else answers one. Never a planner's name or key. Repeatable.
    #[arg(long = "approver", value_name = "[ISSUER=]PUB.jwk")]
    approvers: Vec<String>,
    /// JSON file `{"<agent name>": "<bearer token>", …}` with the tool credentials.
    #[arg(long)]
    credentials: Option<PathBuf>,
    /// File holding the admin API's bearer token (instead of SAGAPLANE_ADMIN_TOKEN). The
    /// admin token also opens the console at /console.
    #[arg(long)]
    admin_token_file: Option<PathBuf>,
    /// An OpenTelemetry collector's OTLP/HTTP base URL (as OTEL_EXPORTER_OTLP_ENDPOINT,
    /// e.g. http://127.0.0.1:4318): each saga is sent there as a trace, one span per saga
    /// and one per tool call, in the trace the tools see in `traceparent`. Off unless
    /// given.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// File holding the operator token (instead of SAGAPLANE_OPERATOR_TOKEN): it opens the
    /// console at /console to read, and nothing else. Approvers log in there with a JWT
    /// of theirs, and answer the sagas that wait for a person.
    #[arg(long)]
    operator_token_file: Option<PathBuf>,
    /// On Ctrl-C or SIGTERM, how long (s) to wait for the tool calls out to answer, so that
    /// their answers are journaled and the next start goes on from there. A call still out
    /// then is treated at the next start as after a crash: repeated under the same key if
    /// its skill is idempotent, otherwise a person is asked. A second Ctrl-C or SIGTERM
    /// stops at once. At most 3600.
    #[arg(long, default_value_t = 30, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    drain_secs: u64,
    /// How long (days) a finished saga's journal and task are kept; after that, and once
    /// its plan's mandate has expired (so the plan can never be accepted again), both are
    /// deleted, checked at start and every hour. 0, the default, keeps everything. At
    /// most 36500.
    #[arg(long, default_value_t = 0, value_name = "DAYS",
          value_parser = clap::value_parser!(u64).range(0..=36500))]
    retention_days: u64,
    /// How many sagas may act at once. A saga holds a slot from its first call until it
    /// ends, except while it waits for a person; accepted plans beyond the limit wait
    /// for a slot in the order they came, their tasks SUBMITTED. Bounds the calls this
    /// executor has out on the tool agents. At least 1.
    #[arg(long, default_value_t = DEFAULT_MAX_RUNNING_SAGAS, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    max_running_sagas: usize,
    /// How many steps of one saga may be under way at once: the steps a plan's `after`
    /// leaves independent run side by side up to this bound (a plan's `maxParallelSteps`
    /// may ask for fewer). 1 runs every plan one step at a time.
    #[arg(long, default_value_t = executor_agent::saga::spec::DEFAULT_MAX_PARALLEL_STEPS, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    max_parallel_steps: u32,
    /// A host (`NAME`, any port) or `NAME:PORT` that registrations may reach: what
    /// `POST /admin/cards {"url": …}` and MCP registrations fetch from, and where a
    /// registered card's or manifest's endpoint (which receives the tool's credential)
    /// may be; a card or manifest naming another is refused (422). Repeatable; without
    /// it, any host (logged at start).
    #[arg(long = "allow-registration-host", value_name = "HOST[:PORT]")]
    allow_registration_hosts: Vec<String>,
    /// On /metrics, an undo handle still open in an unfinished saga counts as expiring
    /// (`sagaplane_undo_handles_expiring`) once its deadline is at most this many seconds
    /// away, or past. At most 31536000 (a year).
    #[arg(long, default_value_t = DEFAULT_UNDO_EXPIRING_WITHIN.as_secs(), value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(0..=31_536_000))]
    undo_expiring_within_secs: u64,
    #[command(flatten)]
    serving: agent_host::cli::ServingArgs,
    /// Crash-test fault injection: stop after this many durable journal writes.
    #[arg(long, hide = true)]
    pause_after_journal_writes: Option<u64>,
}

fn read_text(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

fn read_jwk(path: &Path) -> anyhow::Result<Jwk> {
    let value = shared_types::json::parse_strict(&read_text(path)?)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    serde_json::from_value(value)
        .with_context(|| format!("{} is not a JSON Web Key", path.display()))
}

/// `[ISSUER=]PUB.jwk` of a planner or an approver (`role`, for the error).
fn issuer_key(spec: &str, role: &str) -> anyhow::Result<(String, Jwk)> {
    let (issuer, path) = match spec.split_once('=') {
        Some((issuer, path)) => (Some(issuer.to_owned()), path),
        None => (None, spec),
    };
    let jwk = read_jwk(Path::new(path))?;
    let issuer = match (issuer, &jwk.kid) {
        (Some(issuer), _) => issuer,
        (None, Some(kid)) => kid.clone(),
        (None, None) => bail!("{path} has no kid: name the {role} as ISSUER={path}"),
    };
    Ok((issuer, jwk))
}

/// Credentials from the file, then from the environment (which wins).
fn credentials(file: Option<&Path>) -> anyhow::Result<HashMap<String, String>> {
    let mut credentials = HashMap::new();
    if let Some(path) = file {
        let value = shared_types::json::parse_strict(&read_text(path)?)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        let Value::Object(entries) = value else {
            bail!(
                "{}: expected {{\"<agent>\": \"<token>\", …}}",
                path.display()
            );
        };
        for (agent, token) in entries {
            let Value::String(token) = token else {
                bail!(
                    "{}: the credential of {agent} is not a string",
                    path.display()
                );
            };
            credentials.insert(agent, token);
        }
    }
    for (name, token) in std::env::vars() {
        if let Some(rest) = name.strip_prefix(CREDENTIAL_ENV_PREFIX) {
            credentials.insert(rest.to_lowercase().replace('_', "-"), token);
        }
    }
    Ok(credentials)
}

fn admin_token(file: Option<&Path>) -> anyhow::Result<String> {
    let token = match file {
        Some(path) => read_text(path)?.trim().to_owned(),
        None => std::env::var(ADMIN_TOKEN_ENV).unwrap_or_default(),
    };
    if token.len() < 16 {
        bail!(
            "the admin API needs a token of at least 16 characters: set {ADMIN_TOKEN_ENV} or pass --admin-token-file"
        );
    }
    Ok(token)
}

/// The operator token, if one is given; at least 16 characters, and not the admin's.
fn operator_token(file: Option<&Path>, admin: &str) -> anyhow::Result<Option<String>> {
    let token = match file {
        Some(path) => read_text(path)?.trim().to_owned(),
        None => match std::env::var(OPERATOR_TOKEN_ENV) {
            Ok(token) => token,
            Err(_) => return Ok(None),
        },
    };
    if token.len() < 16 {
        bail!(
            "the operator token must have at least 16 characters ({OPERATOR_TOKEN_ENV} or --operator-token-file)"
        );
    }
    if token == admin {
        bail!("the operator token must differ from the admin token: an operator only reads");
    }
    Ok(Some(token))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    agent_host::process::init_logging();
    let args = Args::parse();

    let mut platform_keys = TrustStore::new();
    for path in &args.platform_keys {
        platform_keys
            .add_jwk(&read_jwk(path)?)
            .with_context(|| format!("platform key {}", path.display()))?;
    }
    let planners = args
        .planners
        .iter()
        .map(|spec| issuer_key(spec, "planner"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let approvers = args
        .approvers
        .iter()
        .map(|spec| issuer_key(spec, "approver"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let principals = args
        .principals
        .iter()
        .map(|path| read_jwk(path).with_context(|| format!("principal key {}", path.display())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let credentials = credentials(args.credentials.as_deref())?;
    let admin_token = admin_token(args.admin_token_file.as_deref())?;
    let operator_token = operator_token(args.operator_token_file.as_deref(), &admin_token)?;

    let (store, renewal) = match (&args.store, &args.data) {
        (Some(url), _) => {
            if args.renew_ms >= args.lease_ms {
                bail!(
                    "--renew-ms ({}) must be shorter than --lease-ms ({}): a lease must be renewed before it lapses",
                    args.renew_ms,
                    args.lease_ms
                );
            }
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                bail!("--store takes a PostgreSQL URL, postgres://user@host:port/database");
            }
            (
                Store::Postgres(Replica {
                    url: url.clone(),
                    lease: Duration::from_millis(args.lease_ms),
                    connections: args.store_connections,
                }),
                Duration::from_millis(args.renew_ms),
            )
        }
        (None, Some(dir)) => (
            Store::DataDir(dir.clone()),
            executor_agent::journal::DEFAULT_LEASE / 3,
        ),
        (None, None) => {
            bail!("give the executor a data directory (--data) or a database (--store)")
        }
    };

    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let address = listener.local_addr()?;
    let public_url = args.url.unwrap_or_else(|| format!("http://{address}"));

    let shutdown = CancellationToken::new();
    let service = build_with(
        Settings {
            store,
            executor_id: args.id,
            public_url: public_url.clone(),
            platform_keys,
            planners,
            principals,
            approvers,
            admin_token,
            operator_token,
            otlp_endpoint: args.otlp_endpoint,
            credentials,
            pause_after_journal_writes: args.pause_after_journal_writes,
            max_running_sagas: args.max_running_sagas,
            max_parallel_steps: args.max_parallel_steps,
            registration_hosts: if args.allow_registration_hosts.is_empty() {
                RegistrationHosts::any()
            } else {
                RegistrationHosts::only(args.allow_registration_hosts)
            },
            undo_expiring_within: Duration::from_secs(args.undo_expiring_within_secs),
        },
        shutdown.clone(),
        args.serving.max_concurrent_requests,
    )
    .await?;
    let resumed = service.executor.recover().await?;
    if resumed > 0 {
        tracing::info!(
            sagas = resumed,
            "resuming unfinished sagas from the journal"
        );
    }
    tokio::spawn(agent_host::process::shutdown_on_signal(shutdown.clone()));
    tokio::spawn(keep_leases(
        service.executor.clone(),
        renewal,
        shutdown.clone(),
    ));
    // Replicas: cancels and answers other replicas forward for the sagas driven here.
    tokio::spawn(service.executor.clone().serve_forwarded());
    if args.retention_days > 0 {
        let keep = Duration::from_secs(args.retention_days * 24 * 3600);
        tokio::spawn(forget_finished(
            service.executor.clone(),
            keep,
            shutdown.clone(),
        ));
    }
    println!("listening on {public_url}");
    let limits = args.serving.connection_limits();
    agent_host::serve_with(listener, service.router, shutdown, limits).await?;
    drain(&service.executor, Duration::from_secs(args.drain_secs)).await;
    if let Some(traces) = service.traces {
        // The exporter's thread sends what is buffered; shutting it down blocks.
        let _ = tokio::task::spawn_blocking(move || traces.shut_down()).await;
    }
    Ok(())
}

/// Every `renewal` until the shutdown: renews the leases of the sagas this process
/// drives (one write), and, on a database replicas share, takes over the sagas whose
/// owner's lease lapsed and carries out the cancels and answers left for its sagas. The two go on side by side: resuming many sagas taken over must
/// not hold up the renewal that keeps this replica's own sagas. With a state file of its
/// own a lapse takes nothing from this process; the leases say which sagas are driven,
/// for whoever reads the journal.
async fn keep_leases(
    executor: std::sync::Arc<executor_agent::agent::Executor>,
    renewal: Duration,
    shutdown: CancellationToken,
) {
    let renewer = executor.clone();
    let renewing = every(
        renewal,
        shutdown.clone(),
        "renew the leases of the sagas this process drives",
        move || {
            let executor = renewer.clone();
            async move {
                let now = chrono::Utc::now().timestamp_millis();
                executor.renew_leases(now).await.map(|_| ())
            }
        },
    );
    let taking_over = every(
        renewal,
        shutdown.clone(),
        "take over the sagas whose owner's lease lapsed",
        move || {
            let executor = executor.clone();
            async move {
                let now = chrono::Utc::now().timestamp_millis();
                executor.take_over_lapsed(now).await?;
                // Requests left for the sagas driven here: for those just taken over,
                // and any whose announcement was missed.
                executor.carry_out_open().await.map(|_| ())
            }
        },
    );
    // Tasks of their own: a long poll of one does not hold the other up.
    let (renewing, taking_over) = (tokio::spawn(renewing), tokio::spawn(taking_over));
    let _ = tokio::join!(renewing, taking_over);
}

/// Does `work` every `period` until the shutdown, a failure said once until it succeeds
/// again (`what` it could not do).
async fn every<F, W>(period: Duration, shutdown: CancellationToken, what: &'static str, work: W)
where
    W: Fn() -> F,
    F: std::future::Future<Output = executor_agent::Result<()>>,
{
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        match work().await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("the journal answers again: could {what}");
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e.chain(), "cannot {what}; trying again every {} ms", period.as_millis());
            }
            Err(_) => {}
        }
    }
}

/// How often finished sagas past their retention are looked for.
const RETENTION_SWEEP: Duration = Duration::from_secs(3600);

/// Forgets the finished sagas kept longer than `keep`, now and every `RETENTION_SWEEP`,
/// until the shutdown.
async fn forget_finished(
    executor: std::sync::Arc<executor_agent::agent::Executor>,
    keep: Duration,
    shutdown: CancellationToken,
) {
    let mut sweeps = tokio::time::interval(RETENTION_SWEEP);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = sweeps.tick() => {}
        }
        let now = chrono::Utc::now().timestamp_millis();
        match executor.forget_finished(keep, now).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                sagas = n,
                days = keep.as_secs() / 86400,
                "deleted the journal and tasks of sagas finished longer ago than the retention"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "cannot delete sagas past their retention; tried again in an hour")
            }
        }
    }
}

/// How often a stop that waits says how many sagas it still waits for.
const DRAIN_PROGRESS: Duration = Duration::from_secs(5);

/// Waits for the sagas' drivers to stop (each after the call it has out answers), telling
/// what it waits for and what it leaves behind.
async fn drain(executor: &executor_agent::agent::Executor, within: Duration) {
    let running = executor.running();
    if running > 0 {
        tracing::info!(
            sagas = running,
            "stopping: waiting up to {} s for the tool calls out to answer (Ctrl-C again stops at once)",
            within.as_secs()
        );
    }
    let stopped = executor.stopped(within);
    let interrupted = agent_host::process::interrupted();
    tokio::pin!(stopped, interrupted);
    let mut progress =
        tokio::time::interval_at(tokio::time::Instant::now() + DRAIN_PROGRESS, DRAIN_PROGRESS);
    let left = loop {
        tokio::select! {
            left = &mut stopped => break left,
            () = &mut interrupted => {
                tracing::warn!("stopping at once, as asked");
                return;
            }
            _ = progress.tick() => {
                tracing::info!(sagas = executor.running(), "stopping: still waiting for tool calls to answer");
            }
        }
    };
    if !left.is_empty() {
        tracing::warn!(
            tasks = ?left,
            "stopped with tool calls still out: at the next start each is repeated under its key if its skill is idempotent, otherwise a person is asked"
        );
    } else if running > 0 {
        tracing::info!("stopped: every saga goes on at the next start without repeating a call");
    }
}
