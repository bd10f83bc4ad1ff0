//! `sagaplane send` and `sagaplane task get|watch|list|cancel|resolve`: any A2A agent's
//! tasks from the command line, the saga ledger shown as a table.

use agent_host::sdk::{
    ListTasksRequest, SendMessageConfiguration, SendMessageRequest, SendMessageResponse, Task,
    TaskState,
};
use clap::{Subcommand, ValueEnum};
use futures::StreamExt;
use serde_json::{Map, Value, json};

use crate::a2a::{
    Credentials, artifact_data, block_on, client, event_line, failure, message_text, outcome,
    state_name, stopped,
};
use crate::failure::Failure;
use crate::output::pretty;

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Show a task: state, metadata, status message, and the saga ledger if it has one.
    Get {
        #[arg(long)]
        agent: String,
        task: String,
        #[command(flatten)]
        credentials: Credentials,
        /// Print the task as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Follow a task's updates until it ends or waits for a person.
    Watch {
        #[arg(long)]
        agent: String,
        task: String,
        #[command(flatten)]
        credentials: Credentials,
    },
    /// List an agent's tasks, the most recently updated first (every page of them).
    List {
        #[arg(long)]
        agent: String,
        #[command(flatten)]
        credentials: Credentials,
        /// Only tasks in this state (`input-required`: the sagas waiting for a person).
        #[arg(long, value_enum)]
        state: Option<StateFilter>,
        /// Only the tasks of this context.
        #[arg(long)]
        context: Option<String>,
        /// Show at most this many.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
    },
    /// Cancel a task (an executor compensates first, and refuses after the pivot).
    Cancel {
        #[arg(long)]
        agent: String,
        task: String,
        #[command(flatten)]
        credentials: Credentials,
    },
    /// Answer a saga that waits for a person, as an approver (`approve` prints the step
    /// and the arguments it approves, and binds the answer to them until it expires), or
    /// withdraw an approval whose step waits to be tried again (`withdraw --step ID`).
    Resolve {
        #[arg(long)]
        agent: String,
        task: String,
        resolution: Resolution,
        /// For `withdraw`: the step whose approval is withdrawn.
        #[arg(long, value_name = "ID", required_if_eq("resolution", "withdraw"))]
        step: Option<String>,
        #[command(flatten)]
        approver: super::resolve::Approver,
    },
}

/// A task state, as `task list --state` takes it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StateFilter {
    Submitted,
    Working,
    InputRequired,
    AuthRequired,
    Completed,
    Failed,
    Canceled,
    Rejected,
}

impl StateFilter {
    fn wire(self) -> TaskState {
        match self {
            Self::Submitted => TaskState::Submitted,
            Self::Working => TaskState::Working,
            Self::InputRequired => TaskState::InputRequired,
            Self::AuthRequired => TaskState::AuthRequired,
            Self::Completed => TaskState::Completed,
            Self::Failed => TaskState::Failed,
            Self::Canceled => TaskState::Canceled,
            Self::Rejected => TaskState::Rejected,
        }
    }
}

/// A person's answer to a paused saga.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Resolution {
    Approve,
    Retry,
    ResolvedManually,
    Compensate,
    Withdraw,
}

impl Resolution {
    fn wire(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Retry => "retry",
            Self::ResolvedManually => "resolved-manually",
            Self::Compensate => "compensate",
            Self::Withdraw => "withdraw",
        }
    }
}

pub fn run(command: TaskCommand) -> Result<(), Failure> {
    block_on(async move {
        match command {
            TaskCommand::Get {
                agent,
                task,
                credentials,
                json,
            } => {
                let task = client(&agent)?
                    .get_task(&credentials.call()?, &task)
                    .await
                    .map_err(|e| failure("cannot get the task", e))?;
                if json {
                    println!(
                        "{}",
                        pretty(&serde_json::to_value(&task).unwrap_or_default())
                    );
                } else {
                    print!("{}", describe(&task, Some(&agent)));
                }
                Ok(())
            }
            TaskCommand::Watch {
                agent,
                task,
                credentials,
            } => watch(&agent, &task, &credentials).await,
            TaskCommand::List {
                agent,
                credentials,
                state,
                context,
                limit,
            } => {
                let filter = ListFilter {
                    state,
                    context,
                    limit: limit.map_or(usize::MAX, |n| n as usize),
                };
                list(&agent, &credentials, &filter).await
            }
            TaskCommand::Cancel {
                agent,
                task,
                credentials,
            } => {
                let task = client(&agent)?
                    .cancel_task(&credentials.call()?, &task)
                    .await
                    .map_err(|e| failure("cannot cancel the task", e))?;
                print!("{}", describe(&task, Some(&agent)));
                Ok(())
            }
            TaskCommand::Resolve {
                agent,
                task,
                resolution,
                step,
                approver,
            } => {
                let answer = super::resolve::Answer {
                    resolution: resolution.wire(),
                    step: step.as_deref(),
                };
                let task = super::resolve::resolve(&agent, &task, answer, &approver).await?;
                print!("{}", describe(&task, Some(&agent)));
                outcome(&task)
            }
        }
    })
}

/// `sagaplane send`: a goal (text, and parameters as a data part) to a planner.
pub fn send(
    planner: &str,
    goal: &str,
    params: &[String],
    watch_it: bool,
    dry_run: bool,
    credentials: &Credentials,
) -> Result<(), Failure> {
    let mut data = Map::new();
    for param in params {
        let Some((name, value)) = param.split_once('=') else {
            return Err(Failure::unusable(format!(
                "--param {param}: expected NAME=VALUE"
            )));
        };
        // A value that reads as JSON (a number, true, an object) is sent as that.
        let value = serde_json::from_str(value).unwrap_or_else(|_| json!(value));
        data.insert(name.to_owned(), value);
    }
    if dry_run {
        data.insert("dryRun".into(), json!(true));
    }
    let data = (!data.is_empty()).then_some(Value::Object(data));
    block_on(async move {
        if watch_it && !dry_run {
            let request = message(Some(goal), data, None, false);
            let mut events = client(planner)?
                .stream(&credentials.call()?, &request)
                .await
                .map_err(|e| failure("cannot send the goal", e))?;
            let mut task_id = None;
            while let Some(event) = events.next().await {
                let event = event.map_err(|e| {
                    Failure::unusable(format!("the stream broke: {} ({})", e.message, e.code))
                })?;
                if let agent_host::sdk::StreamResponse::Task(task) = &event {
                    task_id = Some(task.id.clone());
                }
                if let Some(line) = event_line(&event) {
                    println!("{line}");
                }
            }
            let Some(task_id) = task_id else {
                return Err(Failure::unusable("the planner answered without a task"));
            };
            let task = client(planner)?
                .get_task(&credentials.call()?, &task_id)
                .await
                .map_err(|e| failure("cannot get the task", e))?;
            print!("{}", describe(&task, Some(planner)));
            return outcome(&task);
        }
        let request = message(Some(goal), data, None, !dry_run);
        let task = send_for_task(planner, credentials, &request).await?;
        if dry_run {
            let plan = task
                .artifacts
                .iter()
                .flatten()
                .find(|a| a.name.as_deref() == Some("plan") || a.artifact_id == "plan")
                .and_then(artifact_data);
            match plan {
                Some(plan) => println!("{}", pretty(plan)),
                None => print!("{}", describe(&task, Some(planner))),
            }
            return outcome(&task);
        }
        print!("{}", describe(&task, Some(planner)));
        println!(
            "follow it with: sagaplane task watch --agent {planner} {} (with the same credentials)",
            task.id
        );
        Ok(())
    })
}

/// `sagaplane plan submit`: a signed plan to an executor, sent as a planner sends it (a
/// data part, with a short-lived JWT from the planner's key). Prints the task once the
/// executor has taken the plan in or refused it (every violation with its code), or,
/// with `watch`, every change until the saga ends or waits for a person.
pub fn submit(
    executor: &str,
    plan: Value,
    watch_it: bool,
    credentials: &Credentials,
) -> Result<(), Failure> {
    block_on(async move {
        let request = message(None, Some(plan), None, false);
        let mut events = client(executor)?
            .stream(&credentials.call()?, &request)
            .await
            .map_err(|e| failure("the executor refused the plan", e))?;
        let mut task_id = None;
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| {
                Failure::unusable(format!("the stream broke: {} ({})", e.message, e.code))
            })?;
            let state = match &event {
                agent_host::sdk::StreamResponse::Task(task) => {
                    task_id = Some(task.id.clone());
                    Some(task.status.state.clone())
                }
                agent_host::sdk::StreamResponse::StatusUpdate(update) => {
                    Some(update.status.state.clone())
                }
                _ => None,
            };
            if watch_it && let Some(line) = event_line(&event) {
                println!("{line}");
            }
            // Without --watch: once the plan was taken in (or refused), not at its end.
            if !watch_it && state.is_some_and(|s| s != TaskState::Submitted) {
                break;
            }
        }
        let Some(task_id) = task_id else {
            return Err(Failure::unusable("the executor answered without a task"));
        };
        let task = client(executor)?
            .get_task(&credentials.call()?, &task_id)
            .await
            .map_err(|e| failure("cannot get the task", e))?;
        print!("{}", describe(&task, Some(executor)));
        if !watch_it && !stopped(&task.status.state) {
            println!(
                "follow it with: sagaplane task watch --agent {executor} {} (with the same credentials)",
                task.id
            );
            return Ok(());
        }
        outcome(&task)
    })
}

/// A goal for a planner: the text, and parameters as a data part.
pub fn goal_message(goal: &str, data: Option<Value>) -> SendMessageRequest {
    message(Some(goal), data, None, false)
}

/// A message on `task` with one data part.
pub fn data_message_on(task: &str, data: Value) -> SendMessageRequest {
    message(None, Some(data), Some(task), false)
}

fn message(
    text: Option<&str>,
    data: Option<Value>,
    task_id: Option<&str>,
    return_immediately: bool,
) -> SendMessageRequest {
    let mut request = agent_host::user_request(text, data, task_id);
    request.configuration = Some(SendMessageConfiguration {
        accepted_output_modes: None,
        task_push_notification_config: None,
        history_length: None,
        return_immediately: Some(return_immediately),
    });
    request
}

async fn send_for_task(
    agent: &str,
    credentials: &Credentials,
    request: &SendMessageRequest,
) -> Result<Task, Failure> {
    match client(agent)?
        .send(&credentials.call()?, request)
        .await
        .map_err(|e| failure("the agent refused the message", e))?
    {
        SendMessageResponse::Task(task) => Ok(task),
        SendMessageResponse::Message(m) => Err(Failure::rejected(format!(
            "the agent answered without a task: {}",
            message_text(&m)
        ))),
    }
}

async fn watch(agent: &str, id: &str, credentials: &Credentials) -> Result<(), Failure> {
    let client = client(agent)?;
    let current = client
        .get_task(&credentials.call()?, id)
        .await
        .map_err(|e| failure("cannot get the task", e))?;
    if !stopped(&current.status.state) {
        // A task that stops before the subscription starts cannot be subscribed to;
        // GetTask below shows it either way.
        if let Ok(mut events) = client.subscribe(&credentials.call()?, id).await {
            while let Some(Ok(event)) = events.next().await {
                if let Some(line) = event_line(&event) {
                    println!("{line}");
                }
            }
        }
    }
    let task = client
        .get_task(&credentials.call()?, id)
        .await
        .map_err(|e| failure("cannot get the task", e))?;
    print!("{}", describe(&task, Some(agent)));
    outcome(&task)
}

/// What `task list` shows.
struct ListFilter {
    state: Option<StateFilter>,
    context: Option<String>,
    limit: usize,
}

/// The most an agent is asked for in one page (A2A agents may refuse more).
const PAGE_SIZE: usize = 100;

/// Lists the tasks page by page until the agent has no more (or `limit` are shown). The
/// pages are read one after another, not at one instant: a task updated meanwhile moves
/// to the front and may be listed twice, so each is shown once.
async fn list(agent: &str, credentials: &Credentials, filter: &ListFilter) -> Result<(), Failure> {
    let client = client(agent)?;
    let mut shown = std::collections::HashSet::new();
    let mut total = 0;
    let mut page_token = None;
    loop {
        let request = ListTasksRequest {
            context_id: filter.context.clone(),
            status: filter.state.map(StateFilter::wire),
            page_size: Some(PAGE_SIZE.min(filter.limit - shown.len()) as i32),
            page_token: page_token.take(),
            history_length: Some(0),
            status_timestamp_after: None,
            include_artifacts: Some(false),
            tenant: None,
        };
        let page = client
            .list_tasks(&credentials.call()?, &request)
            .await
            .map_err(|e| failure("cannot list the tasks", e))?;
        total = total.max(page.total_size.max(0) as usize);
        for task in &page.tasks {
            if shown.len() < filter.limit && shown.insert(task.id.clone()) {
                println!("{}", list_line(task));
            }
        }
        if page.next_page_token.is_empty() || page.tasks.is_empty() || shown.len() >= filter.limit {
            break;
        }
        page_token = Some(page.next_page_token);
    }
    let tasks = |n: usize| {
        let noun = if n == 1 { "task" } else { "tasks" };
        match filter.state {
            Some(state) => format!(
                "{noun} in state {}",
                state_name(&state.wire()).to_lowercase().replace('_', "-")
            ),
            None => noun.to_owned(),
        }
    };
    match shown.len() {
        0 => println!("no {}", tasks(0)),
        n if n < total => println!("{n} of {total} {} shown", tasks(total)),
        n => println!("{n} {}", tasks(n)),
    }
    Ok(())
}

/// One task in a list: id, state, the first line of its status message.
fn list_line(task: &Task) -> String {
    let text = task
        .status
        .message
        .as_ref()
        .map(message_text)
        .unwrap_or_default();
    let first_line = text.lines().next().unwrap_or_default();
    format!(
        "{}  {:<15} {first_line}",
        task.id,
        state_name(&task.status.state)
    )
}

/// A task for people: state, metadata, the saga's page in the executor's console, the
/// status message, and the saga ledger as a table. `agent` is the URL the task was read
/// from (an executor's task links to its console there).
pub fn describe(task: &Task, agent: Option<&str>) -> String {
    let mut out = format!("task {}  {}\n", task.id, state_name(&task.status.state));
    if let Some(metadata) = &task.metadata {
        for (key, value) in metadata {
            if key == "attempts" && value.is_array() {
                continue;
            }
            let value = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            out.push_str(&format!("  {key}: {value}\n"));
        }
        if let Some(attempts) = metadata.get("attempts").and_then(Value::as_array) {
            out.push_str(&attempts_table(attempts));
        }
    }
    if let Some(link) = console_link(task, agent) {
        out.push_str(&format!("  console: {link}\n"));
    }
    match task.status.message.as_ref().map(|m| (m, question_of(m))) {
        // A waiting saga's question in words for people, and how to answer it here (the
        // status text beside it says it in the protocol's terms).
        Some((_, Some((question, resolutions)))) => {
            // Reasons in it come from tools: no control character reaches the terminal.
            let question: String = question
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            out.push_str(&format!("  ? {question}\n"));
            out.push_str(&format!(
                "  answer: sagaplane task resolve --agent {} {} {} --approver-key KEY.jwk\n",
                agent.unwrap_or("EXECUTOR"),
                task.id,
                resolutions.join("|")
            ));
        }
        Some((message, None)) => {
            for line in message_text(message).lines() {
                out.push_str(&format!("  | {line}\n"));
            }
        }
        None => {}
    }
    let ledger = task
        .artifacts
        .iter()
        .flatten()
        .find(|a| a.artifact_id == "saga-ledger")
        .and_then(artifact_data);
    if let Some(ledger) = ledger {
        let mut ledger = ledger.clone();
        // A2A data parts carry numbers as doubles.
        shared_types::json::normalize_integers(&mut ledger);
        out.push_str(&ledger_table(&ledger));
    }
    out
}

/// A planner task's attempts at its goal (metadata `attempts`), one line each: number,
/// saga, how the executor's task ended, and where and why it unwound (the executor's
/// words, which may quote a tool: made printable).
fn attempts_table(attempts: &[Value]) -> String {
    let mut out = String::from("  attempts:\n");
    for attempt in attempts {
        let text = |key: &str| printable(attempt[key].as_str().unwrap_or("-"));
        let state = text("state");
        let state = state
            .strip_prefix("TASK_STATE_")
            .unwrap_or(&state)
            .to_owned();
        let mut line = format!(
            "    {:<3} {}  {} (executor task {})",
            attempt["attempt"].to_string(),
            text("sagaId"),
            state,
            text("executorTaskId")
        );
        if let Some(outcome) = attempt["outcome"].as_str() {
            line.push_str(&format!(", {}", printable(outcome)));
        }
        if let Some(step) = attempt["failedStep"].as_str() {
            line.push_str(&format!(", at {}", printable(step)));
        }
        if state != "COMPLETED"
            && let Some(reason) = attempt["reason"].as_str()
        {
            let reason: String = printable(reason).chars().take(200).collect();
            line.push_str(&format!(": {reason:?}"));
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The question a waiting saga's status asks people, and the resolutions it takes: the
/// data part `{"approval" | "escalation" | "compensation": {"question", "resolutions"}}`.
fn question_of(message: &agent_host::sdk::Message) -> Option<(String, Vec<String>)> {
    message.parts.iter().find_map(|p| match &p.content {
        agent_host::sdk::PartContent::Data(Value::Object(members)) => {
            let about = members.values().next()?;
            let question = about.get("question")?.as_str()?.to_owned();
            let resolutions = about
                .get("resolutions")?
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .filter(|r| r.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
                .map(str::to_owned)
                .collect();
            Some((question, resolutions))
        }
        _ => None,
    })
}

/// The saga's page in its executor's console: a planner's task names the executor and
/// its task (`executorUrl`, `executorTaskId`); an executor's task carries its `sagaId`.
pub fn console_link(task: &Task, agent: Option<&str>) -> Option<String> {
    let metadata = task.metadata.as_ref()?;
    let text = |key: &str| metadata.get(key).and_then(serde_json::Value::as_str);
    let (base, id) = match (text("executorUrl"), text("executorTaskId"), text("sagaId")) {
        (Some(url), Some(task_id), _) => (url, task_id),
        (_, _, Some(saga_id)) => (agent?, saga_id),
        _ => return None,
    };
    // Ids are plain ([A-Za-z0-9_-] and UUIDs); anything else is escaped for the fragment.
    let id: String = id
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect();
    Some(format!(
        "{}/console/#/saga/{id}",
        base.trim_end_matches('/')
    ))
}

/// What each step of a saga ledger waits for, in the ledger's order, as `(step, skill,
/// waits)`: a step's `after` member, or, without one, the step before it (the plan's
/// reading of an absent `after`). `None` when no step has an `after` member: the plan is
/// a sequence. Ids and skills come from the executor and are made printable.
pub fn ledger_waits(ledger: &Value) -> Option<Vec<(String, String, Vec<String>)>> {
    let steps = ledger["steps"].as_array()?;
    if !steps.iter().any(|s| s.get("after").is_some()) {
        return None;
    }
    let mut out: Vec<(String, String, Vec<String>)> = Vec::with_capacity(steps.len());
    for step in steps {
        let text = |v: &Value| printable(v.as_str().unwrap_or("-"));
        let waits = match step["after"].as_array() {
            Some(ids) => ids.iter().map(text).collect(),
            None => out
                .last()
                .map(|(id, _, _)| id.clone())
                .into_iter()
                .collect(),
        };
        out.push((text(&step["step"]), text(&step["skill"]), waits));
    }
    Some(out)
}

/// `text` with any control character (a terminal escape, a line break) shown as `?`.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// The saga ledger: one row per step; with an `after` column (the steps each waits for,
/// `-` for none) when the plan has branches.
pub fn ledger_table(ledger: &Value) -> String {
    let done = ledger.pointer("/phase/phase").and_then(Value::as_str) == Some("done");
    let mut out = String::new();
    // The first step it cannot unwind past, said plainly when it is not a declared pivot.
    let point = &ledger["pointOfNoReturn"];
    if let (Some(step), Some(why)) = (point["step"].as_str(), point["why"].as_str()) {
        let passed = if point["passed"] == true {
            ", passed"
        } else {
            ""
        };
        out.push_str(&format!(
            "  point of no return: {step:?} ({:?}): {why}{passed}\n",
            point["skill"].as_str().unwrap_or("-")
        ));
    }
    let waits = ledger_waits(ledger);
    if waits.is_some() {
        out.push_str(
            "  step  skill                  forward          undo            attempts  after\n",
        );
    } else {
        out.push_str("  step  skill                  forward          undo            attempts\n");
    }
    for (i, step) in ledger["steps"].as_array().into_iter().flatten().enumerate() {
        let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
        // An undo still pending when the saga is over was never needed.
        let undo = match (text(&step["undo"]["state"]).as_str(), done) {
            ("pending", true) => "-".to_owned(),
            (state, _) => state.to_owned(),
        };
        let attempts = format!("{}/{}", step["attempts"], step["undoAttempts"]);
        let row = format!(
            "  {:<5} {:<22} {:<16} {:<15} {attempts}",
            text(&step["step"]),
            text(&step["skill"]),
            text(&step["forward"]["state"]),
            undo,
        );
        match waits.as_ref().and_then(|w| w.get(i)) {
            Some((_, _, after)) if after.is_empty() => {
                out.push_str(&format!("{row:<72}  -\n"));
            }
            Some((_, _, after)) => out.push_str(&format!("{row:<72}  {}\n", after.join(", "))),
            None => out.push_str(&format!("{row}\n")),
        }
    }
    // Why a step failed, and what each compensation was sent and answered (reasons
    // quoted and escaped: they come from the tools).
    for step in ledger["steps"].as_array().into_iter().flatten() {
        let id = step["step"].as_str().unwrap_or("-");
        for (what, record) in [("forward", &step["forward"]), ("undo", &step["undo"])] {
            if let Some(reason) = record["reason"].as_str() {
                let state = record["state"].as_str().unwrap_or("-");
                out.push_str(&format!("  {id} {what} {state}: {reason:?}\n"));
            }
        }
        if let Some(request) = step.get("undoRequest") {
            let skill = step["undoSkill"].as_str().unwrap_or("its compensation");
            let answered = step
                .get("undoResponse")
                .map_or_else(|| "no answer yet".to_owned(), |r| format!("answered {r}"));
            out.push_str(&format!(
                "  {id} compensation {skill:?} sent {request}, {answered}\n"
            ));
        }
    }
    // Undo deadlines, while the undo may still be run.
    for step in ledger["steps"].as_array().into_iter().flatten() {
        let deadline = &step["undoDeadline"];
        if deadline["open"] == true
            && let Some(at) = deadline["at"].as_str()
        {
            out.push_str(&format!(
                "  {} can be undone until {at:?}\n",
                step["step"].as_str().unwrap_or("-")
            ));
        }
    }
    // Who decided what, and when (escaped: the names come from the executor).
    for step in ledger["steps"].as_array().into_iter().flatten() {
        for decision in step["decisions"].as_array().into_iter().flatten() {
            let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
            let hash = decision["argsSha256"]
                .as_str()
                .map(|h| format!(" argsSha256 {h:?}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  decided at {}: {:?} on step {:?} by {:?}{hash}\n",
                text(&decision["at"]),
                text(&decision["resolution"]),
                text(&step["step"]),
                text(&decision["by"]),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{console_link, ledger_table};

    #[test]
    fn the_ledger_says_why_a_step_failed_and_what_each_compensation_was_sent() {
        let ledger = json!({"phase": {"phase": "done"}, "steps": [
            {"step": "s0", "skill": "vendor.create", "attempts": 1, "undoAttempts": 1,
             "forward": {"state": "succeeded"}, "undo": {"state": "done"},
             "undoSkill": "vendor.archive", "undoRequest": {"vendorId": "v_1"},
             "undoResponse": {"archived": true}},
            {"step": "s1", "skill": "compliance.check", "attempts": 3, "undoAttempts": 0,
             "forward": {"state": "failed", "reason": "registry down\u{1b}[31m"},
             "undo": {"state": "notNeeded"}},
        ]});
        let table = ledger_table(&ledger);
        assert!(
            table.contains(
                r#"s0 compensation "vendor.archive" sent {"vendorId":"v_1"}, answered {"archived":true}"#
            ),
            "{table}"
        );
        // A tool's text is quoted and escaped: no terminal control reaches the screen.
        assert!(
            table.contains(r#"s1 forward failed: "registry down\u{1b}[31m""#),
            "{table}"
        );
        assert!(!table.contains('\u{1b}'));
    }

    #[test]
    fn the_ledger_says_where_the_saga_can_no_longer_unwind_and_which_undos_are_open() {
        let ledger = json!({"phase": {"phase": "paused"},
            "pointOfNoReturn": {"step": "s5", "skill": "email.send", "pivot": false,
                "why": "a retriable step that changes something and has no undo", "passed": false},
            "steps": [
            {"step": "s0", "skill": "vendor.create", "attempts": 1, "undoAttempts": 0,
             "forward": {"state": "succeeded"}, "undo": {"state": "pending"},
             "undoDeadline": {"at": "2026-12-07T10:00:00Z", "open": true}},
            {"step": "s1", "skill": "budget.reserve", "attempts": 1, "undoAttempts": 1,
             "forward": {"state": "succeeded"}, "undo": {"state": "done"},
             "undoDeadline": {"at": "2026-12-07T11:00:00Z", "open": false}},
        ]});
        let table = ledger_table(&ledger);
        assert!(
            table.contains(r#"point of no return: "s5" ("email.send"): a retriable step that changes something and has no undo"#),
            "{table}"
        );
        assert!(
            table.contains(r#"s0 can be undone until "2026-12-07T10:00:00Z""#),
            "{table}"
        );
        assert!(!table.contains("s1 can be undone"), "{table}");
    }

    #[test]
    fn a_goal_planned_again_lists_its_attempts_one_line_each() {
        let task: agent_host::sdk::Task = serde_json::from_value(json!({
            "id": "t-goal", "contextId": "c",
            "status": {"state": "TASK_STATE_COMPLETED"},
            "metadata": {"sagaId": "sg_b", "attempts": [
                {"attempt": 1, "sagaId": "sg_a", "executorTaskId": "e-1",
                 "state": "TASK_STATE_FAILED", "outcome": "compensated", "failedStep": "s3",
                 "reason": "a step failed\u{1b}[2J: registry down", "planSha256": "00"},
                {"attempt": 2, "sagaId": "sg_b", "executorTaskId": "e-2",
                 "state": "TASK_STATE_COMPLETED", "reason": "every step succeeded",
                 "planSha256": "01"}]}
        }))
        .unwrap();
        let shown = super::describe(&task, None);
        assert!(!shown.contains("planSha256"), "{shown}");
        assert!(
            shown.contains(
                "  attempts:\n    1   sg_a  FAILED (executor task e-1), compensated, at s3: \"a step failed?[2J: registry down\"\n    2   sg_b  COMPLETED (executor task e-2)\n"
            ),
            "{shown}"
        );
    }

    #[test]
    fn a_ledger_with_branches_shows_what_each_step_waits_for() {
        let step = |id: &str, skill: &str, after: Option<serde_json::Value>| {
            let mut step = json!({"step": id, "skill": skill, "attempts": 1, "undoAttempts": 0,
                "forward": {"state": "succeeded"}, "undo": {"state": "notNeeded"}});
            if let Some(after) = after {
                step["after"] = after;
            }
            step
        };
        let ledger = json!({"phase": {"phase": "done"}, "steps": [
            step("s0", "vendor.create", Some(json!([]))),
            step("s1", "budget.reserve", Some(json!(["s0"]))),
            step("s2", "sandbox.provision", Some(json!(["s0"]))),
            step("s3", "compliance.check", Some(json!(["s1", "s2\u{1b}[2J"]))),
            // No `after`: the step before it.
            step("s4", "payments.capture", None),
        ]});
        let table = ledger_table(&ledger);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0],
            "  step  skill                  forward          undo            attempts  after"
        );
        assert_eq!(
            lines[1],
            "  s0    vendor.create          succeeded        notNeeded       1/0       -"
        );
        assert_eq!(
            lines[3],
            "  s2    sandbox.provision      succeeded        notNeeded       1/0       s0"
        );
        assert_eq!(
            lines[4],
            "  s3    compliance.check       succeeded        notNeeded       1/0       s1, s2?[2J"
        );
        assert_eq!(
            lines[5],
            "  s4    payments.capture       succeeded        notNeeded       1/0       s3"
        );
        assert!(!table.contains('\u{1b}'));
        // A ledger without `after` (a sequence) keeps the table it had.
        let sequence = json!({"phase": {"phase": "done"}, "steps": [
            step("s0", "vendor.create", None), step("s1", "budget.reserve", None)]});
        let table = ledger_table(&sequence);
        assert!(!table.contains("after"), "{table}");
        assert!(
            table.contains("  s1    budget.reserve         succeeded        notNeeded       1/0\n"),
            "{table}"
        );
        assert_eq!(super::ledger_waits(&sequence), None);
    }

    #[test]
    fn a_waiting_saga_is_shown_with_its_question_and_how_to_answer_it_here() {
        let task: agent_host::sdk::Task = serde_json::from_value(json!({
            "id": "t_1", "contextId": "c_1",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {
                "messageId": "m", "role": "ROLE_AGENT", "parts": [
                    {"text": "step s4: timed out. An approver answers with a data part {...}"},
                    {"data": {"escalation": {"question": "Did it\u{1b}[2J take effect?",
                        "resolutions": ["resolved-manually", "compensate"]}}}]}}}))
        .unwrap();
        let shown = super::describe(&task, Some("http://127.0.0.1:7300"));
        assert!(shown.contains("  ? Did it [2J take effect?\n"), "{shown}");
        assert!(
            shown.contains("answer: sagaplane task resolve --agent http://127.0.0.1:7300 t_1 resolved-manually|compensate --approver-key KEY.jwk"),
            "{shown}"
        );
        assert!(
            !shown.contains("An approver answers with a data part"),
            "{shown}"
        );
    }

    #[test]
    fn a_saga_links_to_its_page_in_the_executors_console() {
        let task = |metadata: serde_json::Value| -> agent_host::sdk::Task {
            serde_json::from_value(json!({"id": "t_1", "contextId": "c_1",
                "status": {"state": "TASK_STATE_COMPLETED"}, "metadata": metadata}))
            .unwrap()
        };
        // An executor's task, read from the executor.
        let executor = task(json!({"sagaId": "sg_1", "owner": "planner-1"}));
        assert_eq!(
            console_link(&executor, Some("http://127.0.0.1:7300/")).as_deref(),
            Some("http://127.0.0.1:7300/console/#/saga/sg_1")
        );
        assert_eq!(console_link(&executor, None), None);
        // A planner's task names the executor and its task.
        let planner = task(json!({"executorUrl": "http://exec:7300",
            "executorTaskId": "01a2-3 b"}));
        assert_eq!(
            console_link(&planner, Some("http://planner:7400")).as_deref(),
            Some("http://exec:7300/console/#/saga/01a2-3%20b")
        );
        assert_eq!(console_link(&task(json!({})), Some("http://x")), None);
    }
}
