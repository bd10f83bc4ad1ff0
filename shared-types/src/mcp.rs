//! MCP tools in the catalog: SEP-3172 recovery declarations and the curated manifest that
//! decides which of a server's tools the executor may call, with which class, and which
//! recovery declarations it accepts.
//!
//! A server's own metadata is never trusted by itself: the manifest is signed by a
//! platform key and pins each accepted declaration, so a server that changes its declared
//! compensation is refused until a curator signs the new one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::CatalogAgent;
use crate::error::{Error, Result};
use crate::expr::{self, Source};
use crate::reversibility::{
    Compensation, RetryPolicy, ReversibilityClass, SkillDeclaration, SpendDeclaration, Verification,
};

/// Where a tool declares its recovery in `_meta` (SDKs keep `_meta`; several drop unknown
/// annotation keys).
pub const RECOVERY_META_KEY: &str = "dev.sagaplane/recovery";

/// Where every call carries its saga context in `_meta`.
pub const SAGA_META_KEY: &str = "dev.sagaplane/saga";

/// The only recovery strategy SEP-3172 drafts.
pub const COMPENSATION_STRATEGY: &str = "compensation";

/// A SEP-3172 recovery declaration:
/// `{strategy: "compensation", compensatingOperation: {operationId, parameters}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Recovery {
    pub strategy: String,
    pub compensating_operation: CompensatingOperation,
}

/// The tool that undoes a call, and its arguments as runtime expressions over that call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompensatingOperation {
    pub operation_id: String,
    #[serde(default)]
    pub parameters: serde_json::Map<String, Value>,
}

impl Recovery {
    /// Reads a declaration and checks what SEP-3172 and the curated manifests allow: the
    /// `compensation` strategy, and parameters that read only `$response.body` (the
    /// call's `structuredContent`) or `$request.body` (its `arguments`).
    pub fn parse(value: &Value) -> Result<Self, String> {
        let recovery = Self::deserialize(value)
            .map_err(|e| format!("the recovery declaration does not type: {e}"))?;
        if recovery.strategy != COMPENSATION_STRATEGY {
            return Err(format!(
                "recovery strategy {:?} is not supported; only {COMPENSATION_STRATEGY:?} is",
                recovery.strategy
            ));
        }
        if recovery.compensating_operation.operation_id.is_empty() {
            return Err("the compensating operation has an empty operationId".into());
        }
        let mut problems = Vec::new();
        let parameters = Value::Object(recovery.compensating_operation.parameters.clone());
        let walked = expr::for_each_expr(&parameters, &mut |at, e| {
            if !matches!(e.source, Source::ResponseBody(_) | Source::RequestBody(_)) {
                problems.push(format!(
                    "parameter '{at}' uses {e}; an MCP recovery may only read $response.body (structuredContent) or $request.body (arguments)"
                ));
            }
        });
        if let Err((at, e)) = walked {
            problems.push(format!("parameter '{at}': {e}"));
        }
        if problems.is_empty() {
            Ok(recovery)
        } else {
            Err(problems.join("; "))
        }
    }

    /// The equivalent compensation in the catalog's terms.
    pub fn to_compensation(&self, args_when_unknown: Option<Value>) -> Compensation {
        Compensation {
            skill: self.compensating_operation.operation_id.clone(),
            args: Value::Object(self.compensating_operation.parameters.clone()),
            args_when_unknown,
        }
    }
}

/// What a server declares for one tool, from its raw `tools/list` entry: the object under
/// `annotations.recovery` (SEP-3172) or `_meta["dev.sagaplane/recovery"]`. Both present and
/// different is an error; `Ok(None)` means no declaration.
pub fn declared_recovery(tool: &Value) -> Result<Option<Value>, String> {
    let annotated = tool
        .pointer("/annotations/recovery")
        .filter(|v| !v.is_null());
    let in_meta = tool
        .get("_meta")
        .and_then(|m| m.get(RECOVERY_META_KEY))
        .filter(|v| !v.is_null());
    match (annotated, in_meta) {
        (Some(a), Some(m)) if a != m => Err(
            "annotations.recovery and _meta[\"dev.sagaplane/recovery\"] declare different recoveries"
                .into(),
        ),
        (Some(v), _) | (None, Some(v)) => Ok(Some(v.clone())),
        (None, None) => Ok(None),
    }
}

/// The server a manifest is for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManifestServer {
    /// The server's `serverInfo.name`, checked when the executor connects.
    pub name: String,
    /// The server's MCP endpoint. Signed with the rest, because it is the one address the
    /// executor sends the tool's credential to; the executor refuses a manifest without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// One curated tool: its class and timing (as an agent card's skill declaration has
/// them, without a compensation), and the recovery declaration the curator accepts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManifestTool {
    pub class: ReversibilityClass,
    #[serde(default)]
    pub idempotent: bool,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub pivot: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::reversibility::retry"
    )]
    pub retry: Option<RetryPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_ttl_seconds: Option<u64>,
    /// Where the tool's `structuredContent` states its undo deadline (as an agent card's
    /// `undoExpiresAt`: `"$response.body#/holdExpiresAt"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_expires_at: Option<String>,
    #[serde(default)]
    pub requires_approval: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_timeout_seconds: Option<u64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::reversibility::spend"
    )]
    pub spend: Option<SpendDeclaration>,
    /// The server's recovery declaration, pinned exactly. `None`: the curator accepts no
    /// recovery for this tool, and a server that declares one is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Value>,
    /// Curated addition: how to find the work when the forward call's outcome is unknown
    /// (SEP-3172 has no such binding; without it such a step escalates). A JSON object,
    /// as a compensation's `argsWhenUnknown` is; null reads as absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::strict::optional_any_object"
    )]
    pub args_when_unknown: Option<Value>,
    /// Curated addition: the read-only tool of the same server that says whether a call
    /// of this one took effect (as an agent card's skill declares it).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::reversibility::verify"
    )]
    pub verify: Option<Verification>,
}

/// A curated MCP manifest, signed by a platform key like an agent card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpManifest {
    /// The agent id plans use for this server's tools.
    pub agent: String,
    #[serde(default)]
    pub description: String,
    pub server: ManifestServer,
    pub tools: BTreeMap<String, ManifestTool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<Value>,
}

impl McpManifest {
    pub fn parse(value: &Value) -> Result<Self> {
        let manifest = Self::deserialize(value)
            .map_err(|e| Error::Card(format!("the MCP manifest does not type: {e}")))?;
        if !crate::expr::is_valid_id(&manifest.agent) {
            return Err(Error::Card(format!(
                "the MCP manifest's agent id {:?} is not a valid id",
                manifest.agent
            )));
        }
        if manifest.tools.is_empty() {
            return Err(Error::Card("the MCP manifest names no tools".into()));
        }
        Ok(manifest)
    }

    /// The catalog entry for this server: each curated tool's class from the manifest,
    /// its compensation from the pinned recovery, its schemas from the server. `tools`
    /// are the raw entries of the server's `tools/list` result. Every problem is reported
    /// at once, each as a sentence.
    pub fn catalog_agent(&self, tools: &[Value]) -> Result<CatalogAgent> {
        let by_name: BTreeMap<&str, &Value> = tools
            .iter()
            .filter_map(|t| Some((t.get("name")?.as_str()?, t)))
            .collect();
        let mut problems = Vec::new();
        let mut skills = BTreeMap::new();
        for (name, curated) in &self.tools {
            let Some(tool) = by_name.get(name.as_str()) else {
                problems.push(format!("the server has no tool {name}"));
                continue;
            };
            let declared = match declared_recovery(tool) {
                Ok(declared) => declared,
                Err(e) => {
                    problems.push(format!("{name}: {e}"));
                    continue;
                }
            };
            let compensation = match (&curated.recovery, declared) {
                (None, None) => None,
                (None, Some(_)) => {
                    problems.push(format!(
                        "the server declares a recovery for {name} that the manifest does not accept; a curator must re-sign the manifest"
                    ));
                    continue;
                }
                (Some(_), None) => {
                    problems.push(format!(
                        "the server no longer declares the recovery the manifest pins for {name}"
                    ));
                    continue;
                }
                (Some(pinned), Some(declared)) if *pinned != declared => {
                    problems.push(format!(
                        "the server's recovery declaration for {name} differs from the one the manifest pins (changed after signing); a curator must re-sign the manifest"
                    ));
                    continue;
                }
                (Some(pinned), Some(_)) => match Recovery::parse(pinned) {
                    Ok(recovery) => {
                        Some(recovery.to_compensation(curated.args_when_unknown.clone()))
                    }
                    Err(e) => {
                        problems.push(format!("{name}: {e}"));
                        continue;
                    }
                },
            };
            let schema = |key: &str| tool.get(key).filter(|v| v.is_object()).cloned();
            skills.insert(
                name.clone(),
                SkillDeclaration {
                    class: curated.class,
                    compensation,
                    verify: curated.verify.clone(),
                    idempotent: curated.idempotent,
                    read_only: curated.read_only,
                    pivot: curated.pivot,
                    timeout_ms: curated.timeout_ms,
                    retry: curated.retry,
                    undo_ttl_seconds: curated.undo_ttl_seconds,
                    undo_expires_at: curated.undo_expires_at.clone(),
                    requires_approval: curated.requires_approval,
                    approval_timeout_seconds: curated.approval_timeout_seconds,
                    spend: curated.spend.clone(),
                    input_schema: schema("inputSchema"),
                    output_schema: schema("outputSchema"),
                },
            );
        }
        let curated = |s: &str| self.tools.contains_key(s);
        for (name, declaration) in &skills {
            problems.extend(declaration.problems(name, &curated));
        }
        problems.extend(crate::reversibility::verification_problems(&skills));
        if !problems.is_empty() {
            return Err(Error::Card(format!(
                "MCP server for {:?}: {}",
                self.agent,
                problems.join("; ")
            )));
        }
        Ok(CatalogAgent {
            description: self.description.clone(),
            skills,
        })
    }
}

#[cfg(test)]
mod tests;
