//! `sagaplane plan validate|sign|verify`.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use clap::Subcommand;
use serde_json::json;
use shared_types::{Catalog, Error, PlanValidator, SigningIdentity, TrustStore, ViolationCode};

use crate::executor_api;
use crate::failure::Failure;
use crate::input::{read_catalog_dir, read_json, read_jwk, read_trust};
use crate::output::{emit, pretty};

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Check a plan statically and report every violation (exit 0 valid, 1 invalid, 2 unusable input).
    Validate {
        plan: PathBuf,
        /// Folder of agent cards (signed or not) to check against, or an executor's URL
        /// to check against its curated catalog (with --planner-key).
        #[arg(long, value_name = "DIR|URL")]
        catalog: String,
        /// Planner private key to authenticate to the executor's catalog (its kid is the
        /// JWT issuer).
        #[arg(long, value_name = "KEY.jwk")]
        planner_key: Option<PathBuf>,
        /// The executor's name, the audience of that JWT.
        #[arg(long, default_value = "executor")]
        audience: String,
        /// Public key of a trusted planner (repeatable).
        #[arg(long = "trust", value_name = "PUB.jwk", required = true)]
        trust: Vec<PathBuf>,
        /// Public key of a trusted principal, whose mandates are honoured (repeatable;
        /// without one, every plan's mandate is refused MANDATE_UNTRUSTED).
        #[arg(long = "principal", value_name = "PUB.jwk")]
        principals: Vec<PathBuf>,
        /// Validate as of this RFC 3339 time instead of now.
        #[arg(long, value_name = "TIME")]
        at: Option<DateTime<Utc>>,
        /// The executor's `--max-parallel-steps`: the undo deadlines are timed with at
        /// most this many steps under way at once.
        #[arg(long, default_value_t = shared_types::DEFAULT_MAX_PARALLEL_STEPS, value_name = "N",
              value_parser = clap::value_parser!(u32).range(1..=1024))]
        max_parallel_steps: u32,
        /// Print {"valid", "violations"} as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Sign a plan (replacing any signatures) with a private key.
    Sign {
        plan: PathBuf,
        #[arg(long, value_name = "NAME.jwk")]
        key: PathBuf,
        /// A principal's signed mandate to embed as the plan's `mandate` before signing.
        #[arg(long, value_name = "MANDATE.json")]
        mandate: Option<PathBuf>,
        /// Write here instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Send a signed plan to an executor, as a planner does: with a short-lived JWT
    /// signed by the planner's key (`--jwt-key`). Prints the task once the plan is taken
    /// in or refused (every violation with its code); `--watch` follows it to its end.
    /// Exit 0 completed (or taken in, without --watch), 1 refused, failed or canceled, 3
    /// waiting for a person.
    Submit {
        plan: PathBuf,
        /// The executor's base URL.
        #[arg(long, value_name = "URL")]
        executor: String,
        #[command(flatten)]
        credentials: crate::a2a::Credentials,
        /// Follow the saga until it ends or waits for a person.
        #[arg(long)]
        watch: bool,
    },
    /// Verify a plan's signature against trusted public keys.
    Verify {
        plan: PathBuf,
        #[arg(long = "trust", value_name = "PUB.jwk", required = true)]
        trust: Vec<PathBuf>,
    },
}

pub fn run(command: PlanCommand) -> Result<(), Failure> {
    match command {
        PlanCommand::Submit {
            plan,
            executor,
            credentials,
            watch,
        } => {
            if credentials.jwt_key.is_none() && credentials.token.is_none() {
                return Err(Failure::unusable(
                    "an executor takes plans from planners: give --jwt-key PLANNER.jwk (the planner's private key, whose kid the executor trusts)",
                ));
            }
            let plan = read_json(&plan)?;
            super::task::submit(&executor, plan, watch, &credentials)
        }
        PlanCommand::Validate {
            plan,
            catalog,
            planner_key,
            audience,
            trust,
            principals,
            at,
            max_parallel_steps,
            json,
        } => {
            let catalog = if catalog.starts_with("http://") || catalog.starts_with("https://") {
                let Some(key) = planner_key else {
                    return Err(Failure::unusable(
                        "reading an executor's catalog needs --planner-key KEY.jwk to authenticate",
                    ));
                };
                executor_api::catalog(&catalog, &key, &audience)?
            } else {
                read_catalog_dir(Path::new(&catalog))?
            };
            let trust = Trusted {
                planners: read_trust(&trust)?,
                principals: read_trust(&principals)?,
            };
            let at = at.unwrap_or_else(Utc::now);
            validate(&plan, catalog, trust, at, max_parallel_steps, json)
        }
        PlanCommand::Sign {
            plan,
            key,
            mandate,
            out,
        } => sign(&plan, &key, mandate.as_deref(), out.as_deref()),
        PlanCommand::Verify { plan, trust } => verify(&plan, &read_trust(&trust)?),
    }
}

/// The keys a plan is validated against.
struct Trusted {
    planners: TrustStore,
    principals: TrustStore,
}

fn validate(
    path: &Path,
    catalog: Catalog,
    trust: Trusted,
    at: DateTime<Utc>,
    max_parallel_steps: u32,
    as_json: bool,
) -> Result<(), Failure> {
    let validator = PlanValidator::new(catalog, trust.planners)
        .map_err(|e| Failure::unusable(e.to_string()))?
        .with_principals(trust.principals)
        .with_max_parallel_steps(max_parallel_steps);
    let plan = read_json(path)?;
    let report = validator.validate(&plan, at);
    if as_json {
        let out = json!({"valid": report.is_valid(), "violations": report.violations});
        emit(&pretty(&out), None)?;
    } else {
        let name = report.plan.as_ref().map_or_else(
            || path.display().to_string(),
            |p| format!("plan {} v{}", p.saga_id, p.plan_version),
        );
        let mut text = String::new();
        if report.is_valid() {
            let steps = report.plan.as_ref().map_or(0, |p| p.steps.len());
            text.push_str(&format!("valid: {name} ({steps} steps)\n"));
        } else {
            let n = report.violations.len();
            text.push_str(&format!(
                "invalid: {name} has {n} violation{}\n",
                if n == 1 { "" } else { "s" }
            ));
            let width = report
                .violations
                .iter()
                .map(|v| v.code.as_str().len())
                .max()
                .unwrap_or(0);
            for v in &report.violations {
                let step = v.step.as_deref().unwrap_or("-");
                text.push_str(&format!(
                    "  {:width$}  {step:<4}  {}\n",
                    v.code.as_str(),
                    v.message
                ));
            }
        }
        emit(&text, None)?;
    }
    if report.is_valid() {
        Ok(())
    } else {
        // The report is the output; the status says "invalid" without a second message.
        Err(Failure::rejected(format!(
            "{} violation(s)",
            report.violations.len()
        )))
    }
}

fn sign(
    path: &Path,
    key: &Path,
    mandate: Option<&Path>,
    out: Option<&Path>,
) -> Result<(), Failure> {
    let identity = SigningIdentity::from_jwk(&read_jwk(key)?)
        .map_err(|e| Failure::unusable(format!("{}: {e}", key.display())))?;
    let mut plan = read_json(path)?;
    if let Some(mandate) = mandate {
        let grant = read_json(mandate)?;
        if let Some(plan) = plan.as_object_mut() {
            plan.insert("mandate".into(), grant);
        }
    }
    shared_types::Plan::from_value(&plan).map_err(|e| {
        Failure::unusable(format!(
            "{}: {}: {e}",
            path.display(),
            ViolationCode::SchemaInvalid
        ))
    })?;
    identity
        .sign_in_place(&mut plan)
        .map_err(|e| Failure::unusable(format!("{}: {e}", path.display())))?;
    emit(&pretty(&plan), out)
}

/// Verifies a signed object, printing the signer; shared by plans and cards.
pub fn verify_signed(path: &Path, trust: &TrustStore) -> Result<String, Failure> {
    let value = read_json(path)?;
    trust.verify(&value).map_err(|e| {
        let code = match e {
            Error::SignerUntrusted { .. } => ViolationCode::SignerUntrusted,
            _ => ViolationCode::SignatureInvalid,
        };
        Failure::rejected(format!("{code}: {}: {e}", path.display()))
    })
}

fn verify(path: &Path, trust: &TrustStore) -> Result<(), Failure> {
    let kid = verify_signed(path, trust)?;
    println!(
        "verified: {} is signed by trusted key {kid}",
        path.display()
    );
    Ok(())
}
