//! The command tree and its dispatch.

mod cards;
mod keys;
mod mandate;
mod plan;
mod resolve;
mod task;
mod tools;

pub use mandate::describe as describe_mandate;
pub use resolve::{Answer, answer_for};
pub use task::{data_message_on, describe, goal_message, ledger_waits};

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::failure::Failure;

/// Sagaplane: signed plans, curated agent cards, and sagas that unwind safely.
#[derive(Debug, Parser)]
#[command(name = "sagaplane", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate an Ed25519 key pair: NAME.jwk (private, mode 0600) and NAME.pub.jwk.
    Keygen {
        /// Path prefix of the two files to write.
        #[arg(long, value_name = "NAME")]
        out: PathBuf,
        /// Key id (default: the RFC 7638 thumbprint of the public key).
        #[arg(long)]
        kid: Option<String>,
        /// Replace existing files.
        #[arg(long)]
        force: bool,
    },
    /// Print a short-lived JWT of a key (its kid is the issuer): an approver pastes one
    /// to log in to the executor's console.
    Token {
        /// The private JWK that signs it (an approver's key, say).
        #[arg(long, value_name = "KEY.jwk")]
        key: PathBuf,
        /// Who it is for: the executor's name (its --id).
        #[arg(long, default_value = "executor")]
        audience: String,
        /// How long it is valid, in seconds (at most 300; a login uses it at once).
        #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(i64).range(1..=300))]
        lifetime_secs: i64,
    },
    /// Validate, sign and verify plans.
    #[command(subcommand)]
    Plan(plan::PlanCommand),
    /// Sign, verify and register curated agent cards.
    #[command(subcommand)]
    Cards(cards::CardsCommand),
    /// Sign, verify and revoke a principal's mandates; show one as an executor holds it.
    #[command(subcommand)]
    Mandate(mandate::MandateCommand),
    /// Send a goal to a planner agent.
    Send {
        /// The planner's URL.
        #[arg(long)]
        planner: String,
        /// The goal, in words.
        goal: String,
        /// A goal parameter (NAME=VALUE; JSON values are sent as such). Repeatable.
        #[arg(long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
        /// Stream the task's progress until it ends or waits for a person.
        #[arg(long)]
        watch: bool,
        /// Only plan: print the signed plan, submit nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        credentials: crate::a2a::Credentials,
    },
    /// Inspect and steer any agent's tasks.
    #[command(subcommand)]
    Task(task::TaskCommand),
    /// Check a tool agent against the promises its card declares.
    #[command(subcommand)]
    Tools(tools::ToolsCommand),
    /// Run a demo end to end with real processes on loopback.
    Demo {
        #[arg(value_enum, default_value = "supplier-onboarding")]
        scenario: crate::demo::Scenario,
        /// Where the saga goes wrong.
        #[arg(long, value_enum, default_value = "none")]
        fail_at: crate::demo::FailAt,
        /// Kill the executor (SIGKILL) when this step starts, and restart it.
        #[arg(long, value_name = "STEP")]
        crash_executor_at: Option<String>,
        /// Run this many executor replicas on a throwaway PostgreSQL (its server binaries
        /// under /usr/lib/postgresql) instead of one executor on its state file.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=9))]
        replicas: u16,
        /// With --replicas: kill (SIGKILL) the replica driving the saga when this step
        /// starts; another takes it over.
        #[arg(long, value_name = "STEP")]
        kill_replica_at: Option<String>,
        /// Use the agents' binaries as built; do not run cargo first.
        #[arg(long)]
        no_build: bool,
        /// Also write the outcome as JSON to this file (tasks, ledgers, problems).
        #[arg(long, value_name = "FILE")]
        summary: Option<PathBuf>,
        /// Start the agents and keep them running (send your own goals) until Ctrl-C.
        #[arg(long)]
        serve: bool,
        /// Let the planner plan the goal again once its saga unwound (`--max-replans 1`;
        /// without it, 0): with `--fail-at compliance`, the second plan has the
        /// compliance check reviewed by a person, whom the demo plays as the approver.
        #[arg(long)]
        replan: bool,
    },
}

/// Runs one command.
pub fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Keygen { out, kid, force } => keys::keygen(&out, kid, force),
        Command::Token {
            key,
            audience,
            lifetime_secs,
        } => keys::token(&key, &audience, lifetime_secs),
        Command::Plan(command) => plan::run(command),
        Command::Cards(command) => cards::run(command),
        Command::Mandate(command) => mandate::run(command),
        Command::Send {
            planner,
            goal,
            params,
            watch,
            dry_run,
            credentials,
        } => task::send(&planner, &goal, &params, watch, dry_run, &credentials),
        Command::Task(command) => task::run(command),
        Command::Tools(command) => tools::run(command),
        Command::Demo {
            scenario,
            fail_at,
            crash_executor_at,
            replicas,
            kill_replica_at,
            no_build,
            summary,
            serve,
            replan,
        } => crate::demo::run(crate::demo::Options {
            serve,
            replan,
            scenario,
            fail_at,
            crash_executor_at,
            replicas: usize::from(replicas),
            kill_replica_at,
            build: !no_build,
            summary,
        }),
    }
}
