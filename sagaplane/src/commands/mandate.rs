//! `sagaplane mandate sign|verify|revoke|show`: a principal's grants to planners
//! (docs/security.md). Signing and revoking need the principal's private key; nothing here
//! needs a planner's.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::Value;
use shared_types::mandate::{Revocation, verify_grant};
use shared_types::{Mandate, SigningIdentity, TrustStore};

use crate::executor_api;
use crate::failure::Failure;
use crate::input::{read_json, read_jwk, read_trust};
use crate::output::{emit, pretty};

#[derive(Debug, Subcommand)]
pub enum MandateCommand {
    /// Sign a mandate (replacing any signatures) with a principal's private key, after
    /// checking its content.
    Sign {
        mandate: PathBuf,
        #[arg(long, value_name = "PRINCIPAL.jwk")]
        key: PathBuf,
        /// Write here instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Verify a mandate's signature against trusted principal keys, and its content.
    Verify {
        mandate: PathBuf,
        #[arg(long = "principal", value_name = "PUB.jwk", required = true)]
        principals: Vec<PathBuf>,
    },
    /// Revoke a mandate: sign a revocation with the principal's key and send it to an
    /// executor. New plans under it are refused; its sagas before their pivot unwind.
    Revoke {
        /// The signed mandate file (its id is revoked).
        mandate: PathBuf,
        #[arg(long, value_name = "PRINCIPAL.jwk")]
        key: PathBuf,
        /// Why (shown to operators).
        #[arg(long)]
        reason: Option<String>,
        /// The executor's base URL; without it, the signed revocation is printed.
        #[arg(long)]
        executor: Option<String>,
    },
    /// Show what an executor holds of a mandate: budget, reserved, spent, remaining, and
    /// the sagas under it (admin token from SAGAPLANE_ADMIN_TOKEN or --admin-token-file).
    Show {
        /// The mandate's id.
        mandate_id: String,
        #[arg(long)]
        executor: String,
        #[arg(long, value_name = "FILE")]
        admin_token_file: Option<PathBuf>,
        /// Print the executor's answer as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(command: MandateCommand) -> Result<(), Failure> {
    match command {
        MandateCommand::Sign { mandate, key, out } => {
            let principal = identity(&key)?;
            let typed = typed(&mandate)?;
            let signed = typed
                .signed_by(&principal)
                .map_err(|e| Failure::unusable(format!("{}: {e}", mandate.display())))?;
            emit(&pretty(&signed), out.as_deref())
        }
        MandateCommand::Verify {
            mandate,
            principals,
        } => {
            let value = read_json(&mandate)?;
            let typed = typed(&mandate)?;
            let signer = verify_grant(&value, &read_trust(&principals)?, &TrustStore::new())
                .map_err(|why| Failure::rejected(format!("{}: {why}", mandate.display())))?;
            println!(
                "verified: mandate {} by {} (key {signer}): {} to {}, {} to {}",
                typed.mandate_id,
                typed.principal,
                typed.budget,
                typed.grantees.join(", "),
                typed.not_before.to_rfc3339(),
                typed.not_after.to_rfc3339()
            );
            Ok(())
        }
        MandateCommand::Revoke {
            mandate,
            key,
            reason,
            executor,
        } => {
            let principal = identity(&key)?;
            let typed = typed(&mandate)?;
            let revocation = Revocation {
                revoked_mandate_id: typed.mandate_id.clone(),
                revoked_at: chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 0),
                reason,
                signatures: Vec::new(),
            }
            .signed_by(&principal)
            .map_err(|e| Failure::unusable(e.to_string()))?;
            let Some(executor) = executor else {
                return emit(&pretty(&revocation), None);
            };
            let answer = executor_api::revoke_mandate(&executor, &revocation)?;
            let count = |member: &str| answer[member].as_u64().unwrap_or(0);
            println!(
                "revoked: mandate {}; of the sagas under it on this executor, {} unwinding, {} \
                 held at their pivot (its call out or in doubt: no attempt starts again; its \
                 answer or a person decides), {} past their pivot and finishing",
                typed.mandate_id,
                count("unwinding"),
                count("heldAtPivot"),
                count("finishing"),
            );
            if count("notYetHeard") > 0 {
                println!(
                    "  {} saga(s) could not journal it in time; they act on nothing meanwhile \
                     and hear it when they resume",
                    count("notYetHeard")
                );
            }
            Ok(())
        }
        MandateCommand::Show {
            mandate_id,
            executor,
            admin_token_file,
            json,
        } => {
            let token = executor_api::admin_token(admin_token_file.as_deref())?;
            let shown = executor_api::mandate(&executor, &token, &mandate_id)?;
            if json {
                return emit(&pretty(&shown), None);
            }
            print!("{}", describe(&shown));
            Ok(())
        }
    }
}

fn identity(key: &Path) -> Result<SigningIdentity, Failure> {
    SigningIdentity::from_jwk(&read_jwk(key)?)
        .map_err(|e| Failure::unusable(format!("{}: {e}", key.display())))
}

/// The mandate in `path`, typed, with nothing wrong in its content.
fn typed(path: &Path) -> Result<Mandate, Failure> {
    let value = read_json(path)?;
    let mandate = Mandate::from_value(&value)
        .map_err(|e| Failure::unusable(format!("{}: not a mandate: {e}", path.display())))?;
    let problems = mandate.problems();
    if !problems.is_empty() {
        return Err(Failure::unusable(format!(
            "{}: {}",
            path.display(),
            problems.join("; ")
        )));
    }
    Ok(mandate)
}

/// The executor's account of a mandate, for people: one block per principal that
/// granted a mandate under that id.
pub fn describe(shown: &Value) -> String {
    let mut out = String::new();
    for m in shown["mandates"].as_array().into_iter().flatten() {
        let currency = m["currency"].as_str().unwrap_or("?");
        let amount = |name: &str| minor(&m[name]);
        out.push_str(&format!(
            "mandate {} of {} (key {}){}\n  in {currency} minor units: budget {}  reserved {}  spent {}  remaining {}\n  sagas: {}\n",
            m["mandateId"].as_str().unwrap_or("?"),
            m["principal"].as_str().unwrap_or("?"),
            m["principalKey"].as_str().unwrap_or("?"),
            if m["revoked"].as_bool() == Some(true) {
                " REVOKED"
            } else {
                ""
            },
            amount("budgetMinor"),
            amount("reservedMinor"),
            amount("spentMinor"),
            amount("remainingMinor"),
            m["sagas"].as_array().map_or(0, Vec::len),
        ));
        for saga in m["sagas"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "    {} {}: reserved {}, spent {}\n",
                saga["sagaId"].as_str().unwrap_or("?"),
                saga["state"].as_str().unwrap_or("?"),
                minor(&saga["reservedMinor"]),
                saga["spentMinor"]
                    .as_u64()
                    .map_or("-".to_owned(), |s| s.to_string()),
            ));
        }
    }
    if out.is_empty() {
        out.push_str("the executor holds no mandate by that id\n");
    }
    out
}

fn minor(value: &Value) -> String {
    value.as_u64().map_or("?".to_owned(), |v| v.to_string())
}
