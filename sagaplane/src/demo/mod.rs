//! `sagaplane demo`: the supplier-onboarding saga end to end with real processes on
//! loopback — six tool agents, the executor (which alone holds their credentials) and
//! the planner, fresh keys each run — a goal sent to the planner, the saga's timeline,
//! the plan's branches (which steps ran side by side) and, when it unwound, the order of
//! its compensations (`branches.rs`), and every tool agent's own ledger at the end.
//! `demo checkout` runs the MCP scenario (`checkout.rs`).

mod branches;
mod checkout;
mod mandate;
mod person;
mod processes;
mod report;

use std::path::{Path, PathBuf};
use std::time::Instant;

use agent_host::sdk::{StreamResponse, TaskState};
use clap::ValueEnum;
use futures::StreamExt;
use serde_json::{Value, json};
use shared_types::SigningIdentity;

use self::processes::{Process, binaries};
use self::report::{Expected, print_ledgers, verdict};
use crate::a2a::{client, message_text, state_name, stopped};
use crate::failure::Failure;

/// Which demo.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Scenario {
    SupplierOnboarding,
    Checkout,
}

/// Where the supplier saga goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailAt {
    None,
    /// The compliance registry times out: vendor, budget and sandbox are unwound.
    Compliance,
    /// The payment is declined at the pivot: a clean failure, unwound.
    CaptureDecline,
    /// The payment is captured but its answer is lost at the pivot: the payments agent's
    /// status skill says it was, and the saga completes.
    CaptureUnknown,
    /// The payment times out at the pivot before anything is captured: the status skill
    /// says so, and the saga unwinds.
    CaptureLost,
    /// The payment's answer is lost and its status skill is down too: escalated to a
    /// person, nothing unwound.
    CaptureUnverified,
    /// The email keeps failing after the pivot: escalated.
    Email,
    /// A compensation keeps failing: dead-lettered and escalated.
    Release,
    /// The principal's mandate covers one saga: the first completes, the second goal's
    /// plan is refused MANDATE_EXHAUSTED before anything runs.
    OverBudget,
}

impl FailAt {
    fn wire(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Compliance => "compliance",
            Self::CaptureDecline => "capture-decline",
            Self::CaptureUnknown => "capture-unknown",
            Self::CaptureLost => "capture-lost",
            Self::CaptureUnverified => "capture-unverified",
            Self::Email => "email",
            Self::Release => "release",
            Self::OverBudget => "over-budget",
        }
    }

    /// The fault the tool agents are started with (`over-budget` is the mandate's).
    fn tool_fault(self) -> &'static str {
        match self {
            Self::OverBudget => Self::None.wire(),
            other => other.wire(),
        }
    }
}

pub const GOAL: &str = "Onboard supplier ACME GmbH, contact ops@acme.example, setup fee 120 EUR";

/// What the demo prints as it goes: elapsed time, then the line.
struct Clock(Instant);

impl Clock {
    /// Prints a task's status update as a line of the timeline; returns its text.
    pub(super) fn show(&self, update: &agent_host::sdk::TaskStatusUpdateEvent) -> String {
        let status = &update.status;
        let text = status
            .message
            .as_ref()
            .map(message_text)
            .unwrap_or_default();
        self.say(&format!("{:<15} {text}", state_name(&status.state)));
        text
    }

    fn say(&self, line: &str) {
        let at = self.0.elapsed().as_secs_f64();
        println!("{at:>6.2}s  {}", line.replace('\n', "\n         "));
    }
}

fn random_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The file in a run's folder holding the bearer token the planner's callers present.
pub const PLANNER_TOKEN_FILE: &str = "planner-token";

/// The file in a run's folder holding the executor's admin token.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// The file in a run's folder holding the operator token (the console, read only).
pub const OPERATOR_TOKEN_FILE: &str = "operator-token";

/// Creates `work` readable by its owner only (0700, as it is created; it must not exist
/// yet, so nobody else's folder is used), and its parents if missing.
fn private_folder(work: &Path) -> Result<(), Failure> {
    let cannot =
        |e: std::io::Error| Failure::unusable(format!("cannot create {}: {e}", work.display()));
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    if let Some(parent) = work.parent() {
        builder.recursive(true).create(parent).map_err(cannot)?;
    }
    builder.recursive(false).create(work).map_err(cannot)
}

/// The keys of one demo run (docs/security.md): the platform signs the cards, the planner
/// signs and submits plans, the approver (a person) answers the sagas that wait for one.
struct DemoKeys {
    platform: SigningIdentity,
    planner: SigningIdentity,
    approver: SigningIdentity,
}

/// The approver's issuer name in the demo (its key's kid).
const DEMO_APPROVER: &str = "demo-approver";

/// Creates a run's work folder (0700) with fresh platform, planner and approver keys in
/// it (private and public JWKs, 0600): the keys the demo's agents are started with.
fn demo_keys(work: &Path) -> Result<DemoKeys, Failure> {
    private_folder(work)?;
    let generate = |kid: &str| {
        SigningIdentity::generate(Some(kid.into()))
            .map_err(|e| Failure::unusable(format!("cannot generate a key: {e}")))
    };
    let platform = generate("demo-platform")?;
    let planner_key = generate("demo-planner")?;
    write(&work.join("platform.jwk"), &platform.private_jwk())?;
    write(&work.join("platform.pub.jwk"), &platform.public_jwk())?;
    write(&work.join("planner.jwk"), &planner_key.private_jwk())?;
    write(&work.join("planner.pub.jwk"), &planner_key.public_jwk())?;
    let approver = generate(DEMO_APPROVER)?;
    write(&work.join("approver.jwk"), &approver.private_jwk())?;
    write(&work.join("approver.pub.jwk"), &approver.public_jwk())?;
    Ok(DemoKeys {
        platform,
        planner: planner_key,
        approver,
    })
}

/// Writes `value` as JSON to a file readable by its owner only (0600 as it is created:
/// the demo's files are keys, tokens and credentials, or hold what the agents did).
fn write(path: &Path, value: &impl serde::Serialize) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::unusable(format!("cannot encode {}: {e}", path.display())))?;
    write_private(path, &text)
}

fn write_private(path: &Path, text: &str) -> Result<(), Failure> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|e| Failure::unusable(format!("cannot write {}: {e}", path.display())))
}

/// Everything one demo run started.
struct Running {
    work: PathBuf,
    tools: Process,
    executor: Option<Process>,
    executor_args: Vec<String>,
    executor_env: Vec<(String, String)>,
    executor_bin: PathBuf,
    planner: Process,
    planner_key: SigningIdentity,
    /// The person who answers a saga that waits for one.
    approver_key: SigningIdentity,
    tool_token: String,
    /// The executor's admin token (reads the mandate's account).
    admin_token: String,
    /// The mandate the principal granted the planner.
    granted: shared_types::Mandate,
    /// With `--replicas`: the replicas after the first (`executor`), by number from 2,
    /// and the database they all share.
    others: Vec<(usize, Process)>,
    database: Option<sagaplane_storage::postgres::Cluster>,
    /// How many executor replicas were started.
    replicas: usize,
}

impl Running {
    fn executor_url(&self) -> String {
        self.executor
            .as_ref()
            .map(|p| p.url().to_owned())
            .unwrap_or_default()
    }

    /// A call to the executor as the planner (a fresh JWT each time).
    fn as_planner(&self) -> Result<agent_host::OutboundCall, Failure> {
        executor_call(&self.planner_key)
    }

    /// A call to the executor as the approver: only an approver answers a saga, and it
    /// sees every saga's task.
    fn as_approver(&self) -> Result<agent_host::OutboundCall, Failure> {
        executor_call(&self.approver_key)
    }

    async fn restart_executor(&mut self) -> Result<(), Failure> {
        let url = self.executor_url();
        if let Some(old) = self.executor.take() {
            old.kill().await;
        }
        // Same address, so the planner finds it again.
        let mut args = self.executor_args.clone();
        if let Some(i) = args.iter().position(|a| a == "--listen") {
            args[i + 1] = url.trim_start_matches("http://").to_owned();
        }
        let log = self.work.join("executor.log");
        self.executor = Some(
            Process::start(
                "executor",
                &self.executor_bin,
                &args,
                &self.executor_env,
                &log,
                1,
            )
            .await?,
        );
        Ok(())
    }

    /// Kills the first replica (the one the planner sends its plans to, which drives
    /// them) with SIGKILL; the next one takes its place in the demo's calls.
    async fn kill_first_replica(&mut self) {
        if let Some(first) = self.executor.take() {
            first.kill().await;
        }
        if !self.others.is_empty() {
            self.executor = Some(self.others.remove(0).1);
        }
    }

    async fn stop(self) {
        if let Some(executor) = self.executor {
            executor.stop().await;
        }
        for (_, replica) in self.others {
            replica.stop().await;
        }
        self.planner.stop().await;
        self.tools.stop().await;
        // After the replicas: they would only log that it went away.
        drop(self.database);
    }
}

/// A call to the executor with a fresh JWT of `key` (its kid is the issuer).
fn executor_call(key: &SigningIdentity) -> Result<agent_host::OutboundCall, Failure> {
    let jwt = agent_host::mint_jwt(key, key.kid(), "executor", 120)
        .map_err(|e| Failure::unusable(e.to_string()))?;
    Ok(agent_host::OutboundCall {
        bearer: Some(jwt),
        ..agent_host::OutboundCall::default()
    })
}

/// The executor's arguments: its data, the platform, planner, approver and principal keys and the
/// tools' credentials, all in the run's folder `work`.
fn executor_args(work: &Path) -> Vec<String> {
    let path = |name: &str| work.join(name).display().to_string();
    vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--data".into(),
        path("executor"),
        "--platform-key".into(),
        path("platform.pub.jwk"),
        "--planner".into(),
        path("planner.pub.jwk"),
        "--principal".into(),
        path(mandate::PRINCIPAL_PUB_FILE),
        "--approver".into(),
        path("approver.pub.jwk"),
        "--credentials".into(),
        path("credentials.json"),
    ]
}

/// Starts the planner (key `work/planner.jwk`, no tool credentials) for `executor_url`,
/// with a fresh caller token in `work/planner-token` (0600) and the principal's mandate
/// (`work/mandate.json`), planning a goal whose saga unwound again at most `max_replans`
/// times. The process presents that token when the demo calls it (`Process::call`).
async fn start_planner(
    bin: &Path,
    work: &Path,
    executor_urls: &[String],
    max_replans: u32,
) -> Result<Process, Failure> {
    let path = |name: &str| work.join(name).display().to_string();
    let token = random_token();
    write_private(&work.join(PLANNER_TOKEN_FILE), &format!("{token}\n"))?;
    let mut args: Vec<String> = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--data".into(),
        path("planner"),
        "--key".into(),
        path("planner.jwk"),
        "--caller-token-file".into(),
        path(PLANNER_TOKEN_FILE),
        "--mandate".into(),
        path(mandate::MANDATE_FILE),
        "--max-replans".into(),
        max_replans.to_string(),
    ];
    for url in executor_urls {
        args.extend(["--executor".into(), url.clone()]);
    }
    let planner = Process::start("planner", bin, &args, &[], &work.join("planner.log"), 1).await?;
    Ok(planner.with_bearer(token))
}

/// Starts the tool agents, the executor and the planner; registers the tools' cards.
async fn start(
    fail_at: FailAt,
    build: bool,
    replicas: usize,
    replan: bool,
    clock: &Clock,
) -> Result<Running, Failure> {
    let bins = binaries(build, &|line| clock.say(line))?;
    let (executor_bin, planner_bin, tool_bin) = (&bins[0], &bins[1], &bins[2]);
    let work = std::env::temp_dir().join(format!(
        "sagaplane-demo-{}-{}",
        std::process::id(),
        chrono::Utc::now().format("%H%M%S")
    ));
    let keys = demo_keys(&work)?;
    let granted = mandate::grant(
        &work,
        keys.planner.kid(),
        mandate::supplier_budget(fail_at),
        mandate::SUPPLIER_SCOPE,
    )?;
    let tool_token = random_token();
    let admin_token = random_token();
    // For `mandate show` by hand with `--serve`.
    write_private(&work.join(ADMIN_TOKEN_FILE), &format!("{admin_token}\n"))?;
    // For the console with `--serve`.
    let operator_token = random_token();
    write_private(
        &work.join(OPERATOR_TOKEN_FILE),
        &format!("{operator_token}\n"),
    )?;
    let path = |name: &str| work.join(name).display().to_string();

    let tools = Process::start(
        "tool agents",
        tool_bin,
        &[
            "--agent".into(),
            "all".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data".into(),
            path("tools"),
            "--sign-card-with".into(),
            path("platform.jwk"),
            "--fail-at".into(),
            fail_at.tool_fault().into(),
        ],
        &[("SUPPLIER_TOOL_TOKEN".into(), tool_token.clone())],
        &work.join("tools.log"),
        6,
    )
    .await?;
    clock.say(&format!(
        "started 6 tool agents ({})",
        tools
            .urls
            .iter()
            .map(|(name, url)| format!("{name} {}", url.trim_start_matches("http://127.0.0.1")))
            .collect::<Vec<_>>()
            .join(", ")
    ));

    let credentials: serde_json::Map<String, Value> = tools
        .urls
        .iter()
        .map(|(name, _)| (name.clone(), json!(tool_token)))
        .collect();
    write(&work.join("credentials.json"), &credentials)?;
    let database = if replicas > 1 {
        let database = sagaplane_storage::postgres::Cluster::start()
            .map_err(|e| Failure::unusable(format!("--replicas needs a PostgreSQL: {e}")))?;
        clock.say(&format!(
            "started a throwaway PostgreSQL at {} for {replicas} executor replicas",
            database.place()
        ));
        Some(database)
    } else {
        None
    };
    let mut executor_args = executor_args(&work);
    if let Some(database) = &database
        && let Some(at) = executor_args.iter().position(|a| a == "--data")
    {
        executor_args[at] = "--store".into();
        executor_args[at + 1] = database.url();
    }
    let executor_env = vec![
        ("SAGAPLANE_ADMIN_TOKEN".into(), admin_token.clone()),
        ("SAGAPLANE_OPERATOR_TOKEN".into(), operator_token),
    ];
    let mut started = Vec::new();
    for number in 1..=replicas.max(1) {
        let log = if replicas > 1 {
            format!("executor-{number}.log")
        } else {
            "executor.log".to_owned()
        };
        let process = Process::start(
            "executor",
            executor_bin,
            &executor_args,
            &executor_env,
            &work.join(log),
            1,
        )
        .await?;
        if replicas > 1 {
            clock.say(&format!(
                "started executor replica {number} at {} (on the shared database; it alone, with the other replicas, holds the tools' credentials)",
                process.url()
            ));
        } else {
            clock.say(&format!(
                "started the executor at {} (it alone holds the tools' credentials)",
                process.url()
            ));
        }
        started.push((number, process));
    }
    let (_, executor) = started.remove(0);
    for (name, url) in &tools.urls {
        crate::executor_api::register_card(executor.url(), &admin_token, &json!({ "url": url }))
            .await
            .map_err(|e| Failure::unusable(format!("registering {name}: {e}")))?;
    }
    if replicas > 1 {
        clock.say(
            "registered the 6 platform-signed agent cards with replica 1; every replica uses them from its next plan",
        );
    } else {
        clock.say("registered the 6 platform-signed agent cards with the executor");
    }

    clock.say(&mandate::summary(&granted));
    let executor_urls: Vec<String> = std::iter::once(executor.url().to_owned())
        .chain(started.iter().map(|(_, p)| p.url().to_owned()))
        .collect();
    let planner = start_planner(planner_bin, &work, &executor_urls, u32::from(replan)).await?;
    clock.say(&format!(
        "started the planner at {} (no tool credentials, no principal key: it embeds the signed mandate)",
        planner.url()
    ));
    Ok(Running {
        work,
        tools,
        executor: Some(executor),
        executor_args,
        executor_env,
        executor_bin: executor_bin.clone(),
        planner,
        planner_key: keys.planner,
        approver_key: keys.approver,
        tool_token,
        admin_token,
        granted,
        others: started,
        database,
        replicas,
    })
}

/// How to run a demo.
#[derive(Debug, Clone)]
pub struct Options {
    pub scenario: Scenario,
    pub fail_at: FailAt,
    /// Kill the executor when this step starts, then restart it.
    pub crash_executor_at: Option<String>,
    /// How many executor replicas, on a throwaway PostgreSQL when more than one.
    pub replicas: usize,
    /// With replicas: kill the one driving the saga when this step starts.
    pub kill_replica_at: Option<String>,
    /// Build the agents' binaries first (cargo; a no-op when up to date).
    pub build: bool,
    /// Also write the outcome as JSON here (tasks, ledgers, problems).
    pub summary: Option<PathBuf>,
    /// Start everything, send nothing, and keep serving until interrupted.
    pub serve: bool,
    /// The planner plans a goal whose saga unwound again, once.
    pub replan: bool,
}

/// `sagaplane demo`.
pub fn run(options: Options) -> Result<(), Failure> {
    let Options {
        scenario,
        fail_at,
        crash_executor_at,
        replicas,
        kill_replica_at,
        build,
        summary,
        serve,
        replan,
    } = options;
    if let Scenario::Checkout = scenario {
        if fail_at != FailAt::None
            || crash_executor_at.is_some()
            || serve
            || replan
            || replicas > 1
            || kill_replica_at.is_some()
        {
            return Err(Failure::unusable(
                "--fail-at, --crash-executor-at, --replicas, --kill-replica-at, --replan and --serve belong to the supplier-onboarding demo",
            ));
        }
        return crate::a2a::block_on(async move {
            checkout::run(build, summary.as_deref(), &Clock(Instant::now())).await
        });
    }
    if let Some(step) = &kill_replica_at
        && skill_of_step(step).is_none()
    {
        return Err(Failure::unusable(format!(
            "--kill-replica-at {step:?}: the supplier plan's steps are s0 to s5"
        )));
    }
    if kill_replica_at.is_some() && replicas < 2 {
        return Err(Failure::unusable(
            "--kill-replica-at needs --replicas 2 or more: another replica takes the saga over",
        ));
    }
    if crash_executor_at.is_some() && replicas > 1 {
        return Err(Failure::unusable(
            "--crash-executor-at restarts the one executor; with --replicas, use --kill-replica-at",
        ));
    }
    let crash = match (crash_executor_at, kill_replica_at) {
        (Some(step), _) => Some(Crash::Restart(step)),
        (None, Some(step)) => Some(Crash::KillReplica(step)),
        (None, None) => None,
    };
    crate::a2a::block_on(async move {
        let clock = Clock(Instant::now());
        let mut running = start(fail_at, build, replicas, replan, &clock).await?;
        if serve {
            print!("{}", serving_help(&running));
            agent_host::process::interrupted().await;
            let work = running.work.clone();
            running.stop().await;
            println!("logs and data: {}", work.display());
            return Ok(());
        }
        let outcome = tokio::select! {
            outcome = saga(&mut running, fail_at, replan, crash.as_ref(), summary.as_deref(), &clock) => outcome,
            _ = agent_host::process::interrupted() => Err(Failure::rejected("interrupted")),
        };
        let work = running.work.clone();
        running.stop().await;
        println!("logs and data: {}", work.display());
        outcome
    })
}

/// What `demo --serve` prints once every agent is up: the run's folder and the commands
/// that use its keys and tokens.
fn serving_help(running: &Running) -> String {
    let work = running.work.display();
    let planner = running.planner.url();
    let executor = running.executor_url();
    let token = format!("--token-file {work}/{PLANNER_TOKEN_FILE}");
    let principal = format!("{work}/{}", mandate::PRINCIPAL_KEY_FILE);
    let granted = format!("{work}/{}", mandate::MANDATE_FILE);
    let mandate_id = mandate::MANDATE_ID;
    let as_planner = format!("--jwt-key {work}/planner.jwk --audience executor");
    let approver = format!("--jwt-key {work}/approver.jwk --audience executor");
    let resolver = format!("--approver-key {work}/approver.jwk");
    format!(
        "planner listening on {planner}\n\
         executor listening on {executor}\n\
         demo folder: {work}   (mode 0700: keys, tokens, credentials, data and logs)\n\
         \n\
         principal key: {principal} (signs mandates; the executor trusts its public half)\n\
         mandate granted to the planner: {granted}\n\
         \n\
         send a goal (planned under that mandate: 1000.00 EUR in all, at most 250.00 EUR a saga):\n  \
         sagaplane send --planner {planner} {token} --watch \"{GOAL}\"\n\
         follow the planner's task:\n  \
         sagaplane task watch --agent {planner} {token} PLANNER_TASK\n\
         the executor's task (its id is the planner task's executorTaskId):\n  \
         sagaplane task get --agent {executor} {as_planner} EXECUTOR_TASK\n  \
         sagaplane task watch --agent {executor} {as_planner} EXECUTOR_TASK\n\
         every saga waiting for a person, as the approver (who sees every saga):\n  \
         sagaplane task list --agent {executor} {approver} --state input-required\n\
         answer one, as the approver (a planner never decides; approve shows the step and its arguments, and binds the answer to them):\n  \
         sagaplane task resolve --agent {executor} {resolver} EXECUTOR_TASK approve|retry|resolved-manually|compensate\n\
         the mandate's budget as the executor holds it (reserved, spent, remaining):\n  \
         sagaplane mandate show --executor {executor} --admin-token-file {work}/{ADMIN_TOKEN_FILE} {mandate_id}\n\
         revoke it (new plans refused, sagas before their pivot unwind):\n  \
         sagaplane mandate revoke --key {principal} --executor {executor} {granted}\n\
         the console (sagas, timelines, undo deadlines, answers): {executor}/console/\n  \
         log in as the operator (reads) with the token in {work}/{OPERATOR_TOKEN_FILE}:\n  \
         cat {work}/{OPERATOR_TOKEN_FILE}\n  \
         or as the approver (reads and answers), with a JWT valid for two minutes:\n  \
         sagaplane token --key {work}/approver.jwk --audience executor\n\
         logs: {work}/planner.log, {work}/executor.log, {work}/tools.log\n\
         agents up; Ctrl-C stops everything\n"
    )
}

/// The supplier plan's steps and their skills (`examples/plans/supplier-onboarding.json`).
const SUPPLIER_STEPS: [(&str, &str); 6] = [
    ("s0", "vendor.create"),
    ("s1", "budget.reserve"),
    ("s2", "sandbox.provision"),
    ("s3", "compliance.check"),
    ("s4", "payments.capture"),
    ("s5", "email.send"),
];

fn skill_of_step(step: &str) -> Option<&'static str> {
    SUPPLIER_STEPS
        .iter()
        .find(|(id, _)| *id == step)
        .map(|(_, skill)| *skill)
}

/// Switches the fault of the tool agent that serves `skill`: `ApplyThenHang` holds the
/// step's call out (its effect applied, no answer) until the replica driving it is
/// killed; `None` clears it, so that the call made again is answered from the ledger.
async fn hold_calls(running: &Running, skill: &str, hold: bool) -> Result<(), Failure> {
    use sagaplane_examples::supplier::{FaultMode, ToolClient, agent_of};
    let agent = agent_of(skill).unwrap_or_default();
    let Some((_, url)) = running.tools.urls.iter().find(|(name, _)| name == agent) else {
        return Err(Failure::unusable(format!("no tool agent serves {skill}")));
    };
    let faults = if hold {
        [(skill.to_owned(), FaultMode::ApplyThenHang)].into()
    } else {
        std::collections::BTreeMap::new()
    };
    ToolClient::new(url, Some(&running.tool_token))
        .map_err(|e| Failure::unusable(e.to_string()))?
        .set_faults(&faults)
        .await
        .map_err(|e| Failure::unusable(format!("cannot set the faults of {agent}: {e}")))?;
    Ok(())
}

/// What the demo kills when a step starts.
enum Crash {
    /// The one executor, restarted on the same journal.
    Restart(String),
    /// The replica driving the saga; another takes it over.
    KillReplica(String),
}

impl Crash {
    fn step(&self) -> &str {
        match self {
            Self::Restart(step) | Self::KillReplica(step) => step,
        }
    }
}

/// Sends the goal, shows the saga, answers an escalation, prints the ledgers.
async fn saga(
    running: &mut Running,
    fail_at: FailAt,
    replan: bool,
    crash: Option<&Crash>,
    summary: Option<&Path>,
    clock: &Clock,
) -> Result<(), Failure> {
    let before = mandate::show(running, "before the saga", clock).await?;
    // The step's call is held out, so that the replica dies with it in flight.
    let held = match crash {
        Some(Crash::KillReplica(step)) => skill_of_step(step),
        _ => None,
    };
    if let Some(skill) = held {
        hold_calls(running, skill, true).await?;
    }
    clock.say(&format!("goal → planner: \"{GOAL}\""));
    let planner = client(running.planner.url())?;
    let request = crate::commands::goal_message(GOAL, None);
    let mut events = planner
        .stream(&running.planner.call(), &request)
        .await
        .map_err(|e| crate::a2a::failure("the planner refused the goal", e))?;
    let mut planner_task = None;
    let mut crashed = false;
    let mut said = branches::StepEvents::default();
    while let Some(event) = events.next().await {
        let Ok(event) = event else { break };
        match &event {
            StreamResponse::Task(task) => planner_task = Some(task.id.clone()),
            StreamResponse::StatusUpdate(update) => {
                let text = clock.show(update);
                said.record(&text);
                if let Some(crash) = crash
                    && !crashed
                    && text.contains(&format!("{}: started", crash.step()))
                {
                    crashed = true;
                    let step = crash.step();
                    if let Crash::KillReplica(_) = crash {
                        running.kill_first_replica().await;
                        if let Some(skill) = held {
                            hold_calls(running, skill, false).await?;
                        }
                        clock.say(&format!(
                            "✗ replica 1, which drives the saga, killed with SIGKILL while {step} was in flight (its call applied, unanswered); another replica takes the saga over once its lease lapses (--lease-ms, 4 s) and makes the call again under the same key"
                        ));
                    } else {
                        running.restart_executor().await?;
                        clock.say(&format!(
                            "✗ executor killed with SIGKILL while {step} was in flight; restarted on the same journal"
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    let Some(planner_task) = planner_task else {
        return Err(Failure::unusable("the planner answered without a task"));
    };
    let planned = planner
        .get_task(&running.planner.call(), &planner_task)
        .await
        .map_err(|e| crate::a2a::failure("cannot read the planner's task", e))?;
    let executor_task = planned
        .metadata
        .as_ref()
        .and_then(|m| m.get("executorTaskId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let Some(executor_task) = executor_task else {
        return Err(Failure::rejected(format!(
            "the planner's task ended {} without reaching the executor: {}",
            state_name(&planned.status.state),
            planned
                .status
                .message
                .as_ref()
                .map(message_text)
                .unwrap_or_default()
        )));
    };
    let executor = client(&running.executor_url())?;
    let mut task = executor
        .get_task(&running.as_planner()?, &executor_task)
        .await
        .map_err(|e| crate::a2a::failure("cannot read the executor's task", e))?;
    if task.status.state == TaskState::InputRequired {
        let (answer, said_as) = person::answer(&task);
        clock.say(&format!(
            "{:<15} the executor's task {executor_task} waits for a person; a person answers there, as the approver {DEMO_APPROVER}: {said_as}",
            state_name(&task.status.state)
        ));
        // Followed from before the answer, so that every status after it is shown (the
        // rest of an unwinding may be over before a subscription made after it).
        let followed = executor
            .subscribe(&running.as_planner()?, &executor_task)
            .await
            .ok();
        let answer = crate::commands::data_message_on(&executor_task, answer);
        executor
            .send(&running.as_approver()?, &answer)
            .await
            .map_err(|e| crate::a2a::failure("the executor refused the answer", e))?;
        if let Some(mut updates) = followed {
            while let Some(Ok(update)) = updates.next().await {
                if let StreamResponse::StatusUpdate(update) = update {
                    said.record(&clock.show(&update));
                }
            }
        }
        task = executor
            .get_task(&running.as_planner()?, &executor_task)
            .await
            .map_err(|e| crate::a2a::failure("cannot read the executor's task", e))?;
        while !stopped(&task.status.state) {
            let Ok(mut updates) = executor
                .subscribe(&running.as_planner()?, &executor_task)
                .await
            else {
                break;
            };
            while let Some(Ok(update)) = updates.next().await {
                if let StreamResponse::StatusUpdate(update) = update {
                    said.record(&clock.show(&update));
                }
            }
            task = executor
                .get_task(&running.as_planner()?, &executor_task)
                .await
                .map_err(|e| crate::a2a::failure("cannot read the executor's task", e))?;
        }
    }
    // The planner follows the executor's task on its own: wait for it to see the end.
    let open = running.planner.call();
    let mut planned = planner
        .get_task(&open, &planner_task)
        .await
        .map_err(|e| crate::a2a::failure("cannot read the planner's task", e))?;
    if !planned.status.state.is_terminal() && task.status.state.is_terminal() {
        if let Ok(mut updates) = planner.subscribe(&open, &planner_task).await {
            while let Some(Ok(update)) = updates.next().await {
                if let StreamResponse::StatusUpdate(update) = update
                    && update.status.state.is_terminal()
                {
                    break;
                }
            }
        }
        planned = planner
            .get_task(&open, &planner_task)
            .await
            .map_err(|e| crate::a2a::failure("cannot read the planner's task", e))?;
    }
    println!();
    println!(
        "planner's task {}  {}",
        planned.id,
        state_name(&planned.status.state)
    );
    println!(
        "executor's {}",
        crate::commands::describe(&task, Some(&running.executor_url()))
    );
    for line in branches::describe(executor_waits(&task).as_deref(), &said) {
        println!("{line}");
    }
    let after = mandate::show(running, "after the saga", clock).await?;
    let (second, mut refused) = if fail_at == FailAt::OverBudget {
        let (second, problems) = mandate::second_saga(running, clock).await?;
        mandate::show(running, "after the refused second saga", clock).await?;
        (Some(second), problems)
    } else {
        (None, Vec::new())
    };
    let ledgers = print_ledgers(&running.tools.urls, &running.tool_token).await?;
    let mut problems = Expected::of(fail_at, replan).problems(&task, &ledgers);
    problems.append(&mut refused);
    if let Some(Crash::KillReplica(_)) = crash {
        match took_over(running) {
            Some((number, line)) => clock.say(&format!(
                "replica {number} took the saga over; its log says: {line}"
            )),
            None => problems.push("no replica says it took the killed replica's saga over".into()),
        }
    }
    if let Some(path) = summary {
        let outcome = json!({
            "failAt": fail_at.wire(),
            "plannerTask": planned,
            "executorTask": task,
            "secondPlannerTask": second,
            "mandate": {"before": before, "after": after},
            "ledgers": ledgers,
            "problems": problems,
        });
        write(path, &outcome)?;
    }
    if problems.is_empty()
        && let Some(second) = &second
    {
        println!(
            "as expected: the second saga's plan was refused {} (planner task {} {}); no tool was called for it",
            mandate::EXHAUSTED,
            second.id,
            state_name(&second.status.state)
        );
    }
    verdict(&task, &problems)
}

/// What each step of the executor's task waits for, from its `saga-ledger` artifact
/// (`None`: the plan is a sequence, or the task has no ledger).
fn executor_waits(task: &agent_host::sdk::Task) -> Option<Vec<(String, String, Vec<String>)>> {
    let ledger = task
        .artifacts
        .iter()
        .flatten()
        .find(|a| a.artifact_id == "saga-ledger")
        .and_then(crate::a2a::artifact_data)?;
    crate::commands::ledger_waits(ledger)
}

/// The surviving replica that says it took sagas over, and its line (the message part).
fn took_over(running: &Running) -> Option<(usize, String)> {
    const TOOK: &str = "took over sagas whose owner's lease lapsed";
    // Replica 1 was killed.
    for number in 2..=running.replicas {
        let log = running.work.join(format!("executor-{number}.log"));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(line) = text.lines().find(|line| line.contains(TOOK)) {
            let said = line.find(TOOK).map_or(line, |at| &line[at..]);
            return Some((number, said.to_owned()));
        }
    }
    None
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    /// Finding 13 of issue 19: the run's folder is 0700 and every secret in it 0600 from
    /// the moment it exists, and a folder that already exists is not used.
    #[test]
    fn the_run_folder_and_its_secrets_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("runs").join("run-1");
        demo_keys(&work).unwrap();
        write(&work.join("credentials.json"), &json!({"payments": "t"})).unwrap();
        write_private(&work.join(PLANNER_TOKEN_FILE), "token\n").unwrap();
        assert_eq!(mode(&work), 0o700);
        assert_eq!(mode(&dir.path().join("runs")), 0o700);
        for secret in [
            "platform.jwk",
            "planner.jwk",
            "approver.jwk",
            "credentials.json",
            PLANNER_TOKEN_FILE,
        ] {
            assert_eq!(mode(&work.join(secret)), 0o600, "{secret}");
        }
        assert!(demo_keys(&work).is_err(), "an existing folder is refused");
    }
}
