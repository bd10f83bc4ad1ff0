//! The optional model backend: an OpenAI-compatible chat-completions server (Ollama,
//! vLLM, llama.cpp's server, a hosted API; `endpoint` is how it is reached and asked)
//! asked for a plan draft as JSON. The draft is input like any other (`draft`): read
//! strictly, typed, checked against the catalog (an unknown skill, or a class or
//! compensation that differs from the catalog's, refuses it), assembled like a
//! deterministic plan and validated. Nothing is repaired silently: a refused draft goes
//! back to the model with its refusals, at most `LlmConfig::max_repairs` times, and every
//! refused draft is kept in the plan's `authoredBy.rejectedAlternatives` as
//! `{"draft", "refusals": [{"code", "step", "message"}]}`. When no draft passes, the
//! goal is refused (`Error::DraftsRefused`) with every draft.
//!
//! The model is shown the goal, its parameters, its `maxSpend`, and the declarations of
//! the catalog's skills that the mandate grants (agents and skills outside its scope are
//! left out); never a key, a token or a credential: the planner holds none of a tool's,
//! and its own (its signing key, its callers' tokens, the API key) are not in a request's
//! body.
//! `promptSha256` is the lower-case hex SHA-256 of the RFC 8785 canonical JSON of the
//! `messages` array of the request whose answer became the plan (the whole conversation,
//! refused drafts and refusals included); `model` is the model id that answer reports,
//! or the configured one when it reports none.

mod draft;
mod endpoint;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use shared_types::{AuthoredBy, Plan};

use crate::backend::{PlanBackend, PlanRequest};
use crate::error::{Error, Result};
use crate::replan::Replan;
pub use draft::{DRAFT_NOT_JSON, DRAFT_SHAPE, MAX_SPEND, Refusal, answer_json};
use draft::{Verdict, judge, record, repair_request};
pub use endpoint::{Endpoint, chat_url, lacks_json_mode};

/// How many times a refused draft goes back to the model unless configured.
pub const DEFAULT_MAX_REPAIRS: u32 = 2;
/// The most repairs that may be configured: every refused draft rides in the signed
/// plan, which the executor reads within a fixed size.
pub const MAX_REPAIRS_LIMIT: u32 = 10;

/// The instructions sent as the system message.
pub const SYSTEM_PROMPT: &str = "You are the planning component of Sagaplane. Turn the user's goal into a plan draft: an ordered list of calls of skills chosen only from the catalog you are given. Answer with one JSON object and nothing else, of this shape:
{\"steps\": [{\"id\": \"s0\", \"agent\": \"<agent>\", \"skill\": \"<skill>\", \"args\": {}, \"after\": []}], \"rejectedAlternatives\": []}
Rules:
- Step ids are s0, s1, ... in list order.
- \"after\" (optional) lists the ids of the steps a step waits for; without it a step waits for the step listed just before it, and [] waits for nothing. Steps that need nothing of each other may wait for the same step and run at the same time. List a step after every step it waits for; waits must never form a cycle. A step may read only the results of steps it waits for, directly or through others. The first step listed that is neither compensable nor read-only (the point of no return) must wait, directly or through others, for every step listed before it, and every step listed after it must wait for it.
- args must satisfy the skill's inputSchema. A value produced by an earlier step is written as the string \"$steps.<id>.response.body#/<property>\", naming a property of that step's outputSchema. Every other value is a literal taken from the goal and its parameters. No other string may start with '$'.
- Never write a class, a compensation or an idempotency key: the platform copies them from its curated catalog (shown to you so that you can order the steps), and a draft that writes a different one is refused.
- Put read-only checks as early as their inputs allow and irreversible steps as late as possible; after an irreversible step only retriable steps may follow.
- Call only what the goal needs. rejectedAlternatives may list, as short strings, plans you considered and rejected.
- If the platform refuses your draft, it tells you why: answer with the whole draft again, corrected.";

/// Where the model is, how long to wait for it, and how often a refused draft goes back.
#[derive(Clone)]
pub struct LlmConfig {
    /// The server's base URL: `http://host:port` (`/v1/chat/completions` is appended),
    /// or an API base with a path such as `…/v1` (`/chat/completions` is appended); see
    /// `chat_url`.
    pub base_url: String,
    pub model: String,
    /// Sent as `Authorization: Bearer …` when set; never logged.
    pub api_key: Option<String>,
    /// Each request, answer included.
    pub timeout: Duration,
    /// How many times a refused draft is sent back with its refusals (0: never); at
    /// most `MAX_REPAIRS_LIMIT`.
    pub max_repairs: u32,
    /// Certificates (PEM) trusted for an https:// server besides the system's roots: a
    /// model server behind a private certificate authority.
    pub extra_roots: Option<Vec<u8>>,
}

impl LlmConfig {
    /// A model at `base_url`, with the default timeout (120 s) and repairs, and no key.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Duration::from_secs(120),
            max_repairs: DEFAULT_MAX_REPAIRS,
            extra_roots: None,
        }
    }
}

impl std::fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "…"))
            .field("timeout", &self.timeout)
            .field("max_repairs", &self.max_repairs)
            .field("extra_roots", &self.extra_roots.as_ref().map(Vec::len))
            .finish()
    }
}

/// A model asked for drafts. Clones share the endpoint, and so what it learnt of the
/// server (JSON mode).
#[derive(Debug, Clone)]
pub struct LlmBackend {
    model: String,
    max_repairs: u32,
    endpoint: Arc<Endpoint>,
}

impl LlmBackend {
    pub fn new(config: LlmConfig) -> Result<Self> {
        if config.max_repairs > MAX_REPAIRS_LIMIT {
            return Err(Error::Config(format!(
                "at most {MAX_REPAIRS_LIMIT} repairs of a model's draft, not {}",
                config.max_repairs
            )));
        }
        let endpoint = Endpoint::trusting(
            &config.base_url,
            config.api_key,
            config.timeout,
            config.extra_roots.as_deref(),
        )?;
        Ok(Self {
            model: config.model,
            max_repairs: config.max_repairs,
            endpoint: Arc::new(endpoint),
        })
    }

    /// The chat-completions URL asked (without its query).
    pub fn url(&self) -> &str {
        self.endpoint.url()
    }

    /// Whether requests still ask for JSON mode (false once the server refused it).
    pub fn json_mode(&self) -> bool {
        self.endpoint.json_mode()
    }

    /// The first request's messages: the rules, then the goal, its parameters, its
    /// `maxSpend` and the catalog of the skills the mandate grants (their declarations:
    /// class, compensation, spend, schemas, timing), as a JSON array.
    pub fn messages(request: &PlanRequest<'_>) -> Value {
        let mut catalog = Map::new();
        for (agent, entry) in &request.catalog.agents {
            let mut skills = Map::new();
            for (skill, declaration) in &entry.skills {
                if !request.ctx.mandate.allows(agent, skill) {
                    continue;
                }
                // A declaration is what a signed card says of a skill; it holds no
                // credential (those stay in the executor's own files).
                if let Ok(shown) = serde_json::to_value(declaration) {
                    skills.insert(skill.clone(), shown);
                }
            }
            if skills.is_empty() {
                continue;
            }
            catalog.insert(
                agent.clone(),
                json!({"description": entry.description, "skills": skills}),
            );
        }
        let mut user = json!({
            "goal": request.goal.text,
            "parameters": request.goal.params,
            "catalog": catalog,
        });
        if let Some(max) = &request.goal.max_spend {
            user["maxSpend"] = json!(max);
        }
        if let Some(replan) = request.replan {
            user["replanning"] = replanning(replan);
        }
        json!([
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user.to_string()},
        ])
    }

    /// Lower-case hex SHA-256 of the canonical JSON of `messages`.
    pub fn prompt_sha256(messages: &Value) -> Result<String> {
        let bytes = shared_types::json::canonicalize(messages)
            .map_err(|e| Error::Backend(format!("cannot canonicalise the prompt: {e}")))?;
        Ok(Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect())
    }

    /// The error that ends a goal none of whose drafts passed.
    fn all_refused(&self, drafts: Vec<Value>, last: &[Refusal]) -> Error {
        // The status says why in a few lines; the data part has every refusal.
        const SHOWN: usize = 10;
        let more = last.len().saturating_sub(SHOWN);
        let mut last: Vec<String> = last.iter().take(SHOWN).map(Refusal::line).collect();
        if more > 0 {
            last.push(format!("… and {more} more"));
        }
        Error::DraftsRefused {
            summary: format!(
                "no plan: model {} wrote {} draft(s) for this goal and the planner refused each ({} repair(s) allowed, --llm-max-repairs); \
                 the last was refused for:\n{}\nEvery draft and its refusals are in this status's data part (rejectedAlternatives)",
                self.model,
                drafts.len(),
                self.max_repairs,
                last.join("\n")
            ),
            drafts,
        }
    }
}

/// What the model is told when the goal is planned again: which attempt this is, what
/// failed (the executor's words, which may quote a tool; for a refused plan, each
/// refusal too), and the steps of the plan that unwound or was refused, without what
/// changes from one plan to the next.
fn replanning(replan: &Replan) -> Value {
    let steps: Vec<Value> = replan.previous["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|step| {
            let mut shown = json!({"id": step["id"], "agent": step["agent"],
                "skill": step["skill"], "args": step["args"]});
            if let Some(after) = step.get("after") {
                shown["after"] = after.clone();
            }
            shown
        })
        .collect();
    let mut failure =
        json!({"failedStep": replan.supersedes.failed_step, "reason": replan.supersedes.reason});
    let instruction = if replan.refusals.is_empty() {
        "An earlier plan for this goal ran and unwound: every step it had completed was undone. \
            Draft a plan that avoids this failure (another skill, other arguments, or another order). \
            A plan that makes the same calls as the earlier one is not run again."
    } else {
        failure["refusals"] = json!(replan.refusals);
        "The executor refused an earlier plan for this goal before any of it ran, for the refusals listed: \
            its catalog (or a bound it holds to) differs from what that plan was checked against. \
            Draft a plan that the catalog given above allows \
            (another skill, other arguments, or another order). \
            A plan that makes the same calls as the earlier one is not run again."
    };
    json!({
        "attempt": replan.attempt,
        "instruction": instruction,
        "failure": failure,
        "previousPlan": {"steps": steps},
    })
}

#[async_trait]
impl PlanBackend for LlmBackend {
    fn name(&self) -> String {
        format!("llm:{}", self.model)
    }

    async fn plan(&self, request: PlanRequest<'_>) -> Result<Plan> {
        let mut messages = match Self::messages(&request) {
            Value::Array(messages) => messages,
            other => vec![other],
        };
        let mut refused: Vec<Value> = Vec::new();
        loop {
            let sent = Value::Array(messages.clone());
            let prompt_sha256 = Self::prompt_sha256(&sent)?;
            let answer = self.endpoint.ask(&self.model, &sent).await.map_err(|e| {
                match (e, refused.len()) {
                    (Error::Backend(why), n) if n > 0 => {
                        Error::Backend(format!("{why} (after {n} refused draft(s))"))
                    }
                    (e, _) => e,
                }
            })?;
            let authored_by = AuthoredBy {
                agent: request.ctx.planner_id.clone(),
                model: answer.model.clone().unwrap_or_else(|| self.model.clone()),
                prompt_sha256: Some(prompt_sha256),
                rejected_alternatives: refused.clone(),
            };
            let refusals = match judge(&answer.content, &request, authored_by)? {
                Verdict::Plan(plan) => return Ok(*plan),
                Verdict::Refused { json, refusals } => {
                    refused.push(record(&answer.content, json.as_ref(), &refusals));
                    refusals
                }
            };
            tracing::info!(
                model = %self.model,
                draft = refused.len(),
                refusals = refusals.len(),
                first = %refusals.first().map(Refusal::line).unwrap_or_default(),
                "the model's draft was refused"
            );
            if refused.len() > self.max_repairs as usize {
                return Err(self.all_refused(refused, &refusals));
            }
            messages.push(json!({"role": "assistant", "content": answer.content}));
            messages.push(json!({"role": "user", "content": repair_request(&refusals)}));
        }
    }
}
