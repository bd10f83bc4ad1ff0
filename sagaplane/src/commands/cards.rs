//! `sagaplane cards sign|verify|register`: agent cards, and the curated manifests that
//! stand for MCP servers.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::{Value, json};
use shared_types::SigningIdentity;
use shared_types::catalog::{agent_from_card, registration_warnings};
use shared_types::mcp::McpManifest;

use super::plan::verify_signed;
use crate::executor_api;
use crate::failure::Failure;
use crate::input::{read_json, read_jwk, read_trust};
use crate::output::{emit, pretty};

#[derive(Debug, Subcommand)]
pub enum CardsCommand {
    /// Sign an agent card or an MCP manifest (replacing any signatures) after checking its
    /// declarations.
    Sign {
        card: PathBuf,
        #[arg(long, value_name = "KEY.jwk")]
        key: PathBuf,
        /// Write here instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Verify an agent card's or MCP manifest's signature against trusted platform keys,
    /// and its declarations.
    Verify {
        card: PathBuf,
        #[arg(long = "trust", value_name = "PUB.jwk", required = true)]
        trust: Vec<PathBuf>,
    },
    /// Register a signed agent card, or an MCP server with its signed manifest, with an
    /// executor (admin token from SAGAPLANE_ADMIN_TOKEN or --admin-token-file).
    Register {
        /// The signed card file (or use --url, or --mcp with --manifest).
        #[arg(required_unless_present_any = ["url", "manifest"], conflicts_with_all = ["url", "manifest"])]
        card: Option<PathBuf>,
        /// The agent's base URL: the executor fetches its /.well-known/agent-card.json.
        #[arg(long, conflicts_with = "mcp")]
        url: Option<String>,
        /// An MCP server's endpoint (streamable HTTP); it must be the `server.url` the
        /// signed --manifest names, the only address the executor sends the tool's
        /// credential to. Optional: the manifest's own is used.
        #[arg(long, value_name = "URL", requires = "manifest")]
        mcp: Option<String>,
        /// The signed manifest curating an MCP server's tools: the executor lists the
        /// tools at the endpoint it names and checks them against it.
        #[arg(long, value_name = "FILE", conflicts_with = "url")]
        manifest: Option<PathBuf>,
        /// The executor's base URL.
        #[arg(long)]
        executor: String,
        /// File holding the admin token.
        #[arg(long, value_name = "FILE")]
        admin_token_file: Option<PathBuf>,
    },
}

pub fn run(command: CardsCommand) -> Result<(), Failure> {
    match command {
        CardsCommand::Sign { card, key, out } => sign(&card, &key, out.as_deref()),
        CardsCommand::Verify { card, trust } => {
            let kid = verify_signed(&card, &read_trust(&trust)?)?;
            let (what, warnings) = describe(&card)?;
            println!("verified: {what} is signed by trusted key {kid}");
            warn(warnings.iter().map(String::as_str));
            Ok(())
        }
        CardsCommand::Register {
            card,
            url,
            mcp,
            manifest,
            executor,
            admin_token_file,
        } => {
            let token = executor_api::admin_token(admin_token_file.as_deref())?;
            let registered = match (card, url, mcp, manifest) {
                (_, _, mcp, Some(manifest)) => {
                    let mut body = json!({"manifest": read_json(&manifest)?});
                    if let Some(mcp) = mcp {
                        body["url"] = json!(mcp);
                    }
                    executor_api::register_mcp(&executor, &token, &body)?
                }
                (Some(card), _, _, _) => {
                    executor_api::register(&executor, &token, &read_json(&card)?)?
                }
                (None, Some(url), _, _) => {
                    executor_api::register(&executor, &token, &json!({ "url": url }))?
                }
                _ => {
                    return Err(Failure::unusable("give a card file, --url, or --manifest"));
                }
            };
            let skills: Vec<&str> = registered["skills"]
                .as_array()
                .map(|s| s.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            println!(
                "registered: agent {} (signed by {}) at {}: {}",
                registered["name"].as_str().unwrap_or("?"),
                registered["signedBy"].as_str().unwrap_or("?"),
                registered["url"].as_str().unwrap_or("no URL"),
                skills.join(", ")
            );
            warn(
                registered["warnings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str),
            );
            Ok(())
        }
    }
}

/// Whether a document is an MCP manifest rather than an agent card.
fn is_manifest(document: &Value) -> bool {
    document.get("tools").is_some() && document.get("server").is_some()
}

/// Warnings go to stderr: stdout may be the signed card.
fn warn<'a>(warnings: impl Iterator<Item = &'a str>) {
    for warning in warnings {
        eprintln!("warning: {warning}");
    }
}

/// Checks a card's or manifest's declarations; says what it is, and what a curator should
/// know (a manifest's schemas come from its server, so its warnings come at registration).
fn describe(path: &Path) -> Result<(String, Vec<String>), Failure> {
    let document = read_json(path)?;
    let bad = |e: shared_types::Error| Failure::rejected(format!("{}: {e}", path.display()));
    if is_manifest(&document) {
        let manifest = McpManifest::parse(&document).map_err(bad)?;
        let Some(url) = &manifest.server.url else {
            return Err(Failure::rejected(format!(
                "{}: the MCP manifest names no server.url: the endpoint the executor sends the tool's credential to is signed with the manifest",
                path.display()
            )));
        };
        Ok((
            format!(
                "MCP manifest for {} (server {:?} at {url}, {} tools)",
                manifest.agent,
                manifest.server.name,
                manifest.tools.len()
            ),
            Vec::new(),
        ))
    } else {
        let (name, agent) = agent_from_card(&document).map_err(bad)?;
        Ok((
            format!("agent card {name} ({} skills)", agent.skills.len()),
            registration_warnings(&agent),
        ))
    }
}

fn sign(path: &Path, key: &Path, out: Option<&Path>) -> Result<(), Failure> {
    let identity = SigningIdentity::from_jwk(&read_jwk(key)?)
        .map_err(|e| Failure::unusable(format!("{}: {e}", key.display())))?;
    // Refuse to attest declarations that contradict themselves.
    let (_, warnings) = describe(path).map_err(|e| Failure::unusable(e.message))?;
    warn(warnings.iter().map(String::as_str));
    let mut card = read_json(path)?;
    identity
        .sign_in_place(&mut card)
        .map_err(|e| Failure::unusable(format!("{}: {e}", path.display())))?;
    emit(&pretty(&card), out)
}
