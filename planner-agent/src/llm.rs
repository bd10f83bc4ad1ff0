//! The optional model backend: an OpenAI-compatible chat-completions endpoint
//! (`POST {base}/chat/completions`, bearer key) asked for a plan draft as JSON. The draft
//! is input like any other: parsed strictly, typed, checked against the catalog (an
//! unknown skill, or a class or compensation that differs from the catalog's, refuses
//! it: nothing is repaired silently), assembled like a deterministic plan and validated.
//! The plan records the model id and the SHA-256 of the prompt.
//!
//! The draft's shape (unknown members refused):
//! `{"steps": [{"id", "agent", "skill", "args", "class"?, "compensation"?}],
//!   "rejectedAlternatives"?: [...]}`.
//! `promptSha256` is the lower-case hex SHA-256 of the RFC 8785 canonical JSON of the
//! `messages` array sent; `model` is the model id the endpoint reports, or the
//! configured one when it reports none.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use shared_types::{AuthoredBy, Compensation, Plan, ReversibilityClass};

use crate::backend::{PlanBackend, PlanRequest, describe_violations};
use crate::compose::{Chosen, assemble};
use crate::error::{Error, Result};

/// Largest answer read from the model endpoint.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// The instructions sent as the system message.
pub const SYSTEM_PROMPT: &str = "You are the planning component of Sagaplane. Turn the user's goal into a plan draft: an ordered list of calls of skills chosen only from the catalog you are given. Answer with one JSON object and nothing else, of this shape:
{\"steps\": [{\"id\": \"s0\", \"agent\": \"<agent>\", \"skill\": \"<skill>\", \"args\": {}}], \"rejectedAlternatives\": []}
Rules:
- Step ids are s0, s1, ... in execution order.
- args must satisfy the skill's inputSchema. A value produced by an earlier step is written as the string \"$steps.<id>.response.body#/<property>\", naming a property of that step's outputSchema. Every other value is a literal taken from the goal and its parameters. No other string may start with '$'.
- Never write a class, a compensation or an idempotency key: the platform copies them from its curated catalog, and a draft that writes a different one is refused.
- Put read-only checks as early as their inputs allow and irreversible steps as late as possible; after an irreversible step only retriable steps may follow.
- Call only what the goal needs. rejectedAlternatives may list, briefly, plans you considered and rejected.";

/// Where the model is and how long to wait for it.
#[derive(Clone)]
pub struct LlmConfig {
    /// The API base, e.g. `https://api.example/v1` (`/chat/completions` is appended).
    pub base_url: String,
    pub model: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
    /// The whole request, answer included.
    pub timeout: Duration,
}

impl std::fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "…"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A model asked for drafts.
#[derive(Debug, Clone)]
pub struct LlmBackend {
    config: LlmConfig,
    http: reqwest::Client,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Draft {
    steps: Vec<DraftStep>,
    #[serde(default)]
    rejected_alternatives: Vec<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DraftStep {
    id: String,
    agent: String,
    skill: String,
    args: Map<String, Value>,
    #[serde(default)]
    class: Option<ReversibilityClass>,
    #[serde(default)]
    compensation: Option<Compensation>,
}

impl LlmBackend {
    pub fn new(config: LlmConfig) -> Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(config.timeout)
            .build()
            .map_err(|e| Error::Config(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self { config, http })
    }

    fn url(&self) -> String {
        format!(
            "{}/chat/completions",
            self.config.base_url.trim_end_matches('/')
        )
    }

    /// The chat messages for a request: the rules, then the goal, its parameters and the
    /// catalog (classes, spends and schemas; compensations stay with the platform), of
    /// the skills the mandate allows only.
    pub fn messages(request: &PlanRequest<'_>) -> Value {
        let mut catalog = Map::new();
        for (agent, entry) in &request.catalog.agents {
            let mut skills = Map::new();
            for (skill, d) in &entry.skills {
                if !request.ctx.mandate.allows(agent, skill) {
                    continue;
                }
                let mut s = Map::new();
                s.insert("class".into(), json!(d.class.as_str()));
                for (flag, on) in [
                    ("readOnly", d.read_only),
                    ("pivot", d.pivot),
                    ("requiresApproval", d.requires_approval),
                ] {
                    if on {
                        s.insert(flag.into(), json!(true));
                    }
                }
                if let Some(spend) = &d.spend {
                    s.insert("spend".into(), json!(spend));
                }
                for (name, schema) in [
                    ("inputSchema", &d.input_schema),
                    ("outputSchema", &d.output_schema),
                ] {
                    if let Some(schema) = schema {
                        s.insert(name.into(), schema.clone());
                    }
                }
                skills.insert(skill.clone(), Value::Object(s));
            }
            if skills.is_empty() {
                continue;
            }
            catalog.insert(
                agent.clone(),
                json!({"description": entry.description, "skills": skills}),
            );
        }
        let user = json!({
            "goal": request.goal.text,
            "parameters": request.goal.params,
            "catalog": catalog,
        });
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

    /// Asks the model; returns the text of its first choice and the model id it reports.
    async fn ask(&self, messages: &Value) -> Result<(String, Option<String>)> {
        let url = self.url();
        let body = json!({
            "model": self.config.model,
            "messages": messages,
            "temperature": 0,
            "response_format": {"type": "json_object"},
        });
        let mut call = self.http.post(&url).json(&body);
        if let Some(key) = &self.config.api_key {
            call = call.bearer_auth(key);
        }
        let failed = |e: reqwest::Error| {
            if e.is_timeout() {
                Error::Backend(format!(
                    "the model endpoint {url} did not answer within {} s",
                    self.config.timeout.as_secs_f64()
                ))
            } else {
                Error::Backend(format!("the model endpoint {url} failed: {e}"))
            }
        };
        let mut response = call.send().await.map_err(failed)?;
        let status = response.status();
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(Error::Backend(format!(
                    "the model endpoint {url} answered more than {MAX_ANSWER_BYTES} bytes"
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            let excerpt: String = text.chars().take(300).collect();
            return Err(Error::Backend(format!(
                "the model endpoint {url} answered {status}: {excerpt}"
            )));
        }
        let answer: Value = serde_json::from_slice(&bytes).map_err(|e| {
            Error::Backend(format!(
                "the model endpoint {url} did not answer with chat-completions JSON: {e}"
            ))
        })?;
        let content = answer
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::Backend(format!(
                    "the model endpoint {url} answered without choices[0].message.content"
                ))
            })?;
        let model = answer
            .get("model")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
            .map(str::to_owned);
        Ok((content.to_owned(), model))
    }
}

/// Reads a draft strictly and checks it against the catalog. Every problem is reported.
fn read_draft(content: &str, request: &PlanRequest<'_>) -> Result<(Vec<Chosen>, Vec<Value>)> {
    let value = shared_types::json::parse_strict(content)
        .map_err(|e| Error::DraftRefused(format!("the model's draft is not JSON: {e}")))?;
    let draft = Draft::deserialize(&value).map_err(|e| {
        Error::DraftRefused(format!(
            "the model's draft does not have the draft's shape ({{\"steps\": [{{\"id\", \"agent\", \"skill\", \"args\"}}]}}): {e}"
        ))
    })?;
    if draft.steps.is_empty() {
        return Err(Error::DraftRefused("the model's draft has no steps".into()));
    }
    let mut problems = Vec::new();
    for step in &draft.steps {
        let Some(declared) = request.catalog.declaration(&step.agent, &step.skill) else {
            problems.push(format!(
                "step {} names {} of agent {}, which is not in the executor's catalog",
                step.id, step.skill, step.agent
            ));
            continue;
        };
        if let Some(class) = step.class
            && class != declared.class
        {
            problems.push(format!(
                "step {} calls {} {}, but the catalog declares it {}",
                step.id,
                step.skill,
                class.as_str(),
                declared.class.as_str()
            ));
        }
        if let Some(compensation) = &step.compensation
            && Some(compensation) != declared.compensation.as_ref()
        {
            problems.push(format!(
                "step {} authors its own compensation for {} ({} with {}); compensations come only from the catalog",
                step.id, step.skill, compensation.skill, compensation.args
            ));
        }
    }
    if !problems.is_empty() {
        return Err(Error::DraftRefused(format!(
            "the model's draft was refused: {}",
            problems.join("; ")
        )));
    }
    let chosen = draft
        .steps
        .into_iter()
        .map(|s| Chosen {
            id: s.id,
            agent: s.agent,
            skill: s.skill,
            args: Value::Object(s.args),
        })
        .collect();
    Ok((chosen, draft.rejected_alternatives))
}

#[async_trait]
impl PlanBackend for LlmBackend {
    fn name(&self) -> String {
        format!("llm:{}", self.config.model)
    }

    async fn plan(&self, request: PlanRequest<'_>) -> Result<Plan> {
        let messages = Self::messages(&request);
        let prompt_sha256 = Self::prompt_sha256(&messages)?;
        let (content, reported_model) = self.ask(&messages).await?;
        let (chosen, rejected_alternatives) = read_draft(&content, &request)?;
        let authored_by = AuthoredBy {
            agent: request.ctx.planner_id.clone(),
            model: reported_model.unwrap_or_else(|| self.config.model.clone()),
            prompt_sha256: Some(prompt_sha256),
            rejected_alternatives,
        };
        let plan = assemble(
            request.ctx,
            request.goal,
            chosen,
            request.catalog,
            authored_by,
        )?;
        let violations = request.validator.check(&plan, request.ctx.now);
        if !violations.is_empty() {
            return Err(Error::DraftRefused(format!(
                "the model's draft was refused:\n{}",
                describe_violations(&violations)
            )));
        }
        Ok(plan)
    }
}
