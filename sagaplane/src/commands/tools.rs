//! `sagaplane tools check`: the platform team's check of a tool agent before it signs the
//! tool's card. It calls a staging instance of the tool the way a saga would (the same
//! request as the executor's, `agent_host::tool_call`) and reports, per declared skill,
//! each promise of the reversibility extension (spec/reversibility-v1.md §5) that holds
//! and each that does not, with the evidence. Every call is a real effect on that
//! instance, under idempotency keys of a saga id of its own (`check_…`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agent_host::{AgentClient, OutboundCall, SagaContext, ToolAnswer};
use clap::Subcommand;
use serde_json::{Value, json};
use shared_types::catalog::agent_from_card;
use shared_types::expr::{EvalContext, bind};
use shared_types::reversibility::{REVERSIBILITY_EXTENSION_URI, SkillDeclaration};

use crate::a2a::{Credentials, block_on};
use crate::failure::Failure;
use crate::input::read_json;

#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// Exercise each skill a tool agent's card declares against a staging instance of
    /// it, and report each promise that holds and each that does not (exit 0: none
    /// broken; 1: a declaration is contradicted; 2: unusable input).
    Check {
        /// The tool agent's base URL (a staging instance: the check makes real calls).
        #[arg(long, value_name = "URL")]
        url: String,
        /// Its card, with the reversibility declarations to check (signed or not).
        #[arg(long, value_name = "CARD.json")]
        card: PathBuf,
        #[command(flatten)]
        credentials: Credentials,
        /// Arguments for a skill (`SKILL=JSON`); without them, the first of its
        /// `inputSchema`'s `examples`. Repeatable.
        #[arg(long = "args", value_name = "SKILL=JSON")]
        args: Vec<String>,
        /// Check only these skills (repeatable; default: every skill that is not only
        /// another's compensation).
        #[arg(long = "skill", value_name = "SKILL")]
        skills: Vec<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// What one check found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Holds,
    Broken,
    NotChecked,
}

impl Verdict {
    fn as_str(&self) -> &'static str {
        match self {
            Self::Holds => "holds",
            Self::Broken => "broken",
            Self::NotChecked => "not-checked",
        }
    }
}

/// One promise of one skill, and the evidence.
#[derive(Debug)]
struct Finding {
    promise: &'static str,
    verdict: Verdict,
    evidence: String,
}

/// How a call ended, in words: what the tool answered and how a saga reads it.
fn describe(answer: &ToolAnswer) -> String {
    match answer {
        ToolAnswer::Completed(result) => format!("completed with {result}"),
        ToolAnswer::Failed { reason, marked } => {
            let class = marked.map_or("unmarked".to_owned(), |c| format!("{c:?}").to_lowercase());
            format!("failed definitely ({class}): {reason:?}")
        }
        ToolAnswer::Refused(why) => format!("was refused: {why:?}"),
        ToolAnswer::Unknown(why) => format!("gave no answer that settles it: {why:?}"),
    }
}

/// Whether it failed definitely (nothing took effect), and why.
fn definite_failure(answer: &ToolAnswer) -> Option<&str> {
    match answer {
        ToolAnswer::Failed { reason, .. } | ToolAnswer::Refused(reason) => Some(reason),
        _ => None,
    }
}

/// The tool under check: where it is, with which credential.
struct Tool {
    client: AgentClient,
    credentials: Credentials,
    /// The saga id the check's calls are made under.
    saga_id: String,
}

impl Tool {
    /// Calls `skill` as the executor would, under `key`; how it ended and how long it took.
    async fn call(
        &self,
        skill: &str,
        args: &Value,
        key: &str,
        compensation: bool,
        timeout_ms: u64,
    ) -> Result<(ToolAnswer, Duration), Failure> {
        let mut call: OutboundCall = self.credentials.call()?;
        call.idempotency_key = Some(key.to_owned());
        call.extensions = vec![REVERSIBILITY_EXTENSION_URI.to_owned()];
        // Room to see how late an answer past its timeout comes, within reason.
        call.timeout = Duration::from_millis(timeout_ms.saturating_mul(2).max(1_000));
        let context = SagaContext {
            saga_id: self.saga_id.clone(),
            step_id: key.rsplit(':').next().unwrap_or_default().to_owned(),
            idempotency_key: key.to_owned(),
            caused_by: None,
            compensation,
        };
        let request = agent_host::tool_call(skill, args, &context);
        let started = Instant::now();
        let mut answer = agent_host::tool_answer(self.client.send(&call, &request).await);
        // A data part's numbers travel as doubles: read integral ones as integers.
        if let ToolAnswer::Completed(result) = &mut answer {
            shared_types::json::normalize_integers(result);
        }
        Ok((answer, started.elapsed()))
    }
}

pub fn run(command: ToolsCommand) -> Result<(), Failure> {
    let ToolsCommand::Check {
        url,
        card,
        credentials,
        args,
        skills,
        json,
    } = command;
    let card_value = read_json(&card)?;
    let (agent, declared) = agent_from_card(&card_value)
        .map_err(|e| Failure::unusable(format!("{}: {e}", card.display())))?;
    let given = parse_args(&args)?;
    let compensations: Vec<&str> = declared
        .skills
        .values()
        .filter_map(|d| d.compensation.as_ref().map(|c| c.skill.as_str()))
        .collect();
    let chosen: Vec<(&String, &SkillDeclaration)> = declared
        .skills
        .iter()
        .filter(|(name, _)| {
            if skills.is_empty() {
                !compensations.contains(&name.as_str())
            } else {
                skills.contains(name)
            }
        })
        .collect();
    if let Some(unknown) = skills.iter().find(|s| !declared.skills.contains_key(*s)) {
        return Err(Failure::unusable(format!(
            "the card declares no skill {unknown:?}"
        )));
    }
    let tool = Tool {
        client: AgentClient::new(&url).map_err(|e| Failure::unusable(e.to_string()))?,
        credentials,
        saga_id: format!("check_{}", uuid::Uuid::new_v4().simple()),
    };
    let report = block_on(async {
        let mut report = Vec::new();
        for (skill, declaration) in chosen {
            let example = given
                .iter()
                .find(|(s, _)| s == skill)
                .map(|(_, a)| a.clone());
            let findings =
                check_skill(&tool, skill, declaration, &declared.skills, example).await?;
            report.push((skill.clone(), declaration.class.as_str(), findings));
        }
        Ok::<_, Failure>(report)
    })?;
    let broken = print_report(&agent, &url, &report, json);
    if broken > 0 {
        return Err(Failure::rejected(format!(
            "{broken} promise(s) of {agent}'s card are broken by the tool at {url}"
        )));
    }
    Ok(())
}

/// `--args SKILL=JSON`, each parsed.
fn parse_args(args: &[String]) -> Result<Vec<(String, Value)>, Failure> {
    args.iter()
        .map(|arg| {
            let (skill, text) = arg
                .split_once('=')
                .ok_or_else(|| Failure::unusable(format!("--args {arg:?}: expected SKILL=JSON")))?;
            let value = shared_types::json::parse_strict(text)
                .map_err(|e| Failure::unusable(format!("--args {skill}: {e}")))?;
            Ok((skill.to_owned(), value))
        })
        .collect()
}

/// The arguments to call `declaration`'s skill with: given, or its schema's first example.
fn example_args(declaration: &SkillDeclaration, given: Option<Value>) -> Option<Value> {
    given.or_else(|| {
        declaration
            .input_schema
            .as_ref()?
            .get("examples")?
            .as_array()?
            .first()
            .cloned()
    })
}

fn finding(promise: &'static str, verdict: Verdict, evidence: impl Into<String>) -> Finding {
    Finding {
        promise,
        verdict,
        evidence: evidence.into(),
    }
}

const TIMELY: &str = "answers within timeoutMs";
const COMPLETES: &str = "the forward call completes";
const OUTPUT: &str = "its result matches outputSchema";
const DEADLINE: &str = "its result reports the declared undoExpiresAt";
const SAME_KEY: &str = "the same Idempotency-Key twice gives the same answer";
const UNDOES: &str = "the compensation undoes it";
const UNDO_AGAIN: &str = "the compensation is idempotent";
const NEVER_HAPPENED: &str = "a compensation for a forward call that never happened succeeds";
const LATE_REFUSED: &str = "the forward call arriving after its compensation is refused";

/// Every check of one skill, in the order a saga would meet them.
async fn check_skill(
    tool: &Tool,
    skill: &str,
    declaration: &SkillDeclaration,
    all: &std::collections::BTreeMap<String, SkillDeclaration>,
    given: Option<Value>,
) -> Result<Vec<Finding>, Failure> {
    let mut out = Vec::new();
    let Some(args) = example_args(declaration, given) else {
        out.push(finding(
            COMPLETES,
            Verdict::NotChecked,
            format!("no arguments to call it with: give --args {skill}=JSON, or put `examples` in its inputSchema"),
        ));
        return Ok(out);
    };
    let timeout_ms = declaration.timeout_ms();
    let key = format!("{}:{}", tool.saga_id, step_of(skill));
    let (first, took) = tool.call(skill, &args, &key, false, timeout_ms).await?;
    let millis = took.as_millis();
    out.push(if millis <= u128::from(timeout_ms) {
        finding(
            TIMELY,
            Verdict::Holds,
            format!("{millis} ms of {timeout_ms}"),
        )
    } else {
        finding(
            TIMELY,
            Verdict::Broken,
            format!("{millis} ms, past its {timeout_ms} ms"),
        )
    });
    let ToolAnswer::Completed(response) = first else {
        out.push(finding(
            COMPLETES,
            Verdict::Broken,
            format!("called with {args}, it {}", describe(&first)),
        ));
        return Ok(out);
    };
    out.push(finding(
        COMPLETES,
        Verdict::Holds,
        format!("called with {args}, it completed"),
    ));
    out.push(check_output(declaration, &response));
    if let Some(pointer) = &declaration.undo_expires_at {
        out.push(check_deadline(pointer, &args, &response, &key));
    }
    if !declaration.read_only {
        let (again, _) = tool.call(skill, &args, &key, false, timeout_ms).await?;
        out.push(match again {
            ToolAnswer::Completed(same) if same == response => {
                finding(SAME_KEY, Verdict::Holds, "the stored result came back")
            }
            ToolAnswer::Completed(other) => finding(
                SAME_KEY,
                Verdict::Broken,
                format!("first {response}, then {other}: it was applied twice"),
            ),
            ref other if !declaration.idempotent && definite_failure(other).is_some() => finding(
                SAME_KEY,
                Verdict::Holds,
                format!(
                    "refused the second call ({:?}), as a skill that is not idempotent may",
                    definite_failure(other).unwrap_or_default()
                ),
            ),
            other => finding(
                SAME_KEY,
                Verdict::Broken,
                format!(
                    "the skill is declared idempotent, but the second call {}",
                    describe(&other)
                ),
            ),
        });
    }
    let Some(compensation) = &declaration.compensation else {
        return Ok(out);
    };
    let undo = &compensation.skill;
    let undo_timeout = all
        .get(undo)
        .map_or(timeout_ms, SkillDeclaration::timeout_ms);
    let ctx = EvalContext {
        saga_id: Some(&tool.saga_id),
        step_id: Some(step_of(skill)),
        idempotency_key: Some(&key),
        request_body: Some(&args),
        response_body: Some(&response),
        step_responses: None,
    };
    let undo_key = format!("{key}:undo");
    match bind(&compensation.args, &ctx) {
        Err(e) => out.push(finding(
            UNDOES,
            Verdict::Broken,
            format!("its compensation's arguments cannot be bound from this result: {e}"),
        )),
        Ok(undo_args) => {
            let (undone, _) = tool
                .call(undo, &undo_args, &undo_key, true, undo_timeout)
                .await?;
            match undone {
                ToolAnswer::Completed(result) => {
                    out.push(finding(
                        UNDOES,
                        Verdict::Holds,
                        format!("{undo} with {undo_args} completed with {result}"),
                    ));
                    let (again, _) = tool
                        .call(undo, &undo_args, &undo_key, true, undo_timeout)
                        .await?;
                    out.push(match again {
                        ToolAnswer::Completed(same) if same == result => {
                            finding(UNDO_AGAIN, Verdict::Holds, "the same answer again")
                        }
                        other => finding(
                            UNDO_AGAIN,
                            Verdict::Broken,
                            format!("called again under {undo_key}, it {}", describe(&other)),
                        ),
                    });
                }
                other => out.push(finding(
                    UNDOES,
                    Verdict::Broken,
                    format!("{undo} with {undo_args} {}", describe(&other)),
                )),
            }
        }
    }
    let Some(when_unknown) = &compensation.args_when_unknown else {
        out.push(finding(
            NEVER_HAPPENED,
            Verdict::NotChecked,
            "no argsWhenUnknown declared: an unknown outcome of this skill goes to a person",
        ));
        return Ok(out);
    };
    // A forward call that never arrived: its key was never sent.
    let never = format!("{}_never:{}", tool.saga_id, step_of(skill));
    let ctx = EvalContext {
        idempotency_key: Some(&never),
        request_body: Some(&args),
        response_body: None,
        ..ctx
    };
    let undo_args = match bind(when_unknown, &ctx) {
        Ok(bound) => bound,
        Err(e) => {
            out.push(finding(
                NEVER_HAPPENED,
                Verdict::Broken,
                format!("argsWhenUnknown cannot be bound: {e}"),
            ));
            return Ok(out);
        }
    };
    let (undone, _) = tool
        .call(
            undo,
            &undo_args,
            &format!("{never}:undo"),
            true,
            undo_timeout,
        )
        .await?;
    out.push(match &undone {
        ToolAnswer::Completed(result) => finding(
            NEVER_HAPPENED,
            Verdict::Holds,
            format!("{undo} with {undo_args} completed with {result}"),
        ),
        other => finding(
            NEVER_HAPPENED,
            Verdict::Broken,
            format!("{undo} with {undo_args} {}", describe(other)),
        ),
    });
    let (late, _) = tool.call(skill, &args, &never, false, timeout_ms).await?;
    out.push(match &late {
        other if definite_failure(other).is_some() => finding(
            LATE_REFUSED,
            Verdict::Holds,
            format!("refused: {:?}", definite_failure(other).unwrap_or_default()),
        ),
        other => finding(
            LATE_REFUSED,
            Verdict::Broken,
            format!(
                "after its compensation ran, the forward call under {never} {}",
                describe(other)
            ),
        ),
    });
    Ok(out)
}

/// A step id for a skill's checks (`vendor.create` → `vendor-create`).
fn step_of(skill: &str) -> &str {
    skill.rsplit('.').next().unwrap_or(skill)
}

fn check_output(declaration: &SkillDeclaration, response: &Value) -> Finding {
    let Some(schema) = &declaration.output_schema else {
        return finding(OUTPUT, Verdict::NotChecked, "no outputSchema declared");
    };
    match jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
    {
        Err(e) => finding(
            OUTPUT,
            Verdict::Broken,
            format!("the declared outputSchema is not a JSON Schema: {e}"),
        ),
        Ok(validator) => {
            let errors: Vec<String> = validator
                .iter_errors(response)
                .map(|e| format!("{e} at {:?}", e.instance_path().to_string()))
                .collect();
            if errors.is_empty() {
                finding(OUTPUT, Verdict::Holds, format!("{response}"))
            } else {
                finding(
                    OUTPUT,
                    Verdict::Broken,
                    format!("{response}: {}", errors.join("; ")),
                )
            }
        }
    }
}

fn check_deadline(pointer: &str, args: &Value, response: &Value, key: &str) -> Finding {
    let ctx = EvalContext {
        idempotency_key: Some(key),
        request_body: Some(args),
        response_body: Some(response),
        ..EvalContext::default()
    };
    match bind(&Value::String(pointer.to_owned()), &ctx) {
        Ok(Value::String(at)) => match chrono::DateTime::parse_from_rfc3339(&at) {
            Ok(deadline) if deadline > chrono::Utc::now() => {
                finding(DEADLINE, Verdict::Holds, format!("{pointer} is {at}"))
            }
            Ok(_) => finding(
                DEADLINE,
                Verdict::Broken,
                format!("{pointer} is {at}, already past when it answered"),
            ),
            Err(e) => finding(
                DEADLINE,
                Verdict::Broken,
                format!("{pointer} is {at:?}, not an RFC 3339 time: {e}"),
            ),
        },
        Ok(other) => finding(
            DEADLINE,
            Verdict::Broken,
            format!("{pointer} is {other}, not an RFC 3339 time"),
        ),
        Err(e) => finding(
            DEADLINE,
            Verdict::Broken,
            format!("{pointer} is not in the result: {e}"),
        ),
    }
}

/// Prints the report; how many promises are broken.
fn print_report(
    agent: &str,
    url: &str,
    report: &[(String, &str, Vec<Finding>)],
    json: bool,
) -> usize {
    let count = |verdict: Verdict| {
        report
            .iter()
            .flat_map(|(_, _, findings)| findings)
            .filter(|f| f.verdict == verdict)
            .count()
    };
    let broken = count(Verdict::Broken);
    if json {
        let skills: Vec<Value> = report
            .iter()
            .map(|(skill, class, findings)| {
                let checks: Vec<Value> = findings
                    .iter()
                    .map(|f| json!({"promise": f.promise, "result": f.verdict.as_str(), "evidence": f.evidence}))
                    .collect();
                json!({"skill": skill, "class": class, "checks": checks})
            })
            .collect();
        let shown = json!({"agent": agent, "url": url, "skills": skills, "broken": broken,
            "holds": count(Verdict::Holds), "notChecked": count(Verdict::NotChecked)});
        println!("{}", crate::output::pretty(&shown));
        return broken;
    }
    println!("tool {agent:?} at {url}");
    for (skill, class, findings) in report {
        println!("{skill} ({class})");
        for f in findings {
            let mark = match f.verdict {
                Verdict::Holds => "holds  ",
                Verdict::Broken => "BROKEN ",
                Verdict::NotChecked => "not checked",
            };
            // The evidence quotes the tool: no terminal control of its reaches the screen.
            let evidence: String = f
                .evidence
                .chars()
                .flat_map(|c| {
                    let escaped: Vec<char> = if c.is_control() {
                        c.escape_default().collect()
                    } else {
                        vec![c]
                    };
                    escaped
                })
                .collect();
            println!("  {mark} {}: {evidence}", f.promise);
        }
    }
    println!(
        "{} hold, {broken} broken, {} not checked",
        count(Verdict::Holds),
        count(Verdict::NotChecked)
    );
    broken
}
