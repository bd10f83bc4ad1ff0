//! What the console's pages show, as JSON: the overview (read from the same text
//! `/metrics` serves, so the two always agree, and the task store's counts), the list of
//! sagas (the task store's listing, by key), one saga (its task, its plan as an audit
//! record with the steps each step waits for, its timeline from the journal) and the
//! sagas waiting for a person.

use agent_host::sdk::{PartContent, Task, TaskState};
use agent_host::store::{PageKey, TaskQuery};
use serde_json::{Value, json};

use super::timeline::timeline;
use crate::agent::Executor;
use crate::error::Result;

/// The states the console shows, by their wire name in the console's API.
pub const STATES: [&str; 8] = [
    "running",
    "waitingForASlot",
    "waitingForAPerson",
    "completed",
    "compensated",
    "canceled",
    "rejected",
    "failed",
];

/// The task state that holds sagas in the console's `state`.
pub fn task_state(state: &str) -> Option<TaskState> {
    Some(match state {
        "running" => TaskState::Working,
        "waitingForASlot" => TaskState::Submitted,
        "waitingForAPerson" => TaskState::InputRequired,
        "completed" => TaskState::Completed,
        "compensated" | "failed" => TaskState::Failed,
        "canceled" => TaskState::Canceled,
        "rejected" => TaskState::Rejected,
        _ => return None,
    })
}

/// The console's name of a saga's state: a failed task whose saga was unwound is
/// `compensated` (its metadata says so); one that failed before its saga began, `failed`.
pub fn state_of(task: &Task) -> &'static str {
    match task.status.state {
        TaskState::Submitted => "waitingForASlot",
        TaskState::Working => "running",
        TaskState::InputRequired | TaskState::AuthRequired => "waitingForAPerson",
        TaskState::Completed => "completed",
        TaskState::Failed
            if task
                .metadata
                .as_ref()
                .and_then(|m| m.get("outcome"))
                .and_then(Value::as_str)
                == Some("compensated") =>
        {
            "compensated"
        }
        TaskState::Canceled => "canceled",
        TaskState::Rejected => "rejected",
        _ => "failed",
    }
}

/// Whether a saga in console state `state` can change no more.
pub fn is_final(state: &str) -> bool {
    matches!(
        state,
        "completed" | "compensated" | "canceled" | "rejected" | "failed"
    )
}

/// The signed plan a saga's task was created with.
pub fn plan_of(task: &Task) -> Option<&Value> {
    crate::agent::plan_in(task.history.as_deref()?.first()?)
}

fn str_of<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

/// The text of a task's status message.
fn status_text(task: &Task) -> Option<String> {
    let message = task.status.message.as_ref()?;
    message
        .parts
        .iter()
        .find_map(|p| p.as_text().map(str::to_owned))
}

fn ms(task: &Task) -> Option<i64> {
    task.status.timestamp.map(|t| t.timestamp_millis())
}

/// The agents a plan's steps call, each once, in the plan's order.
fn agents_of(plan: &Value) -> Vec<String> {
    let mut agents: Vec<String> = Vec::new();
    for step in plan
        .get("steps")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(agent) = step.get("agent").and_then(Value::as_str)
            && !agents.iter().any(|a| a == agent)
        {
            agents.push(agent.to_owned());
        }
    }
    agents
}

/// A saga's line in the list.
pub fn summary(task: &Task) -> Value {
    let plan = plan_of(task).unwrap_or(&Value::Null);
    json!({
        "sagaId": str_of(plan, "/sagaId"),
        "taskId": task.id,
        "goal": str_of(plan, "/goal").unwrap_or_default(),
        "state": state_of(task),
        "updatedMs": ms(task),
        "agents": agents_of(plan),
        "planner": task.metadata.as_ref().and_then(|m| m.get(agent_host::agent::OWNER_METADATA)).and_then(Value::as_str),
    })
}

/// What one `GET api/sagas` asks for.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    pub state: Option<String>,
    pub agent: Option<String>,
    pub q: Option<String>,
    /// Only sagas whose plan supersedes this saga (the planner planned a goal again).
    pub supersedes: Option<String>,
    pub page_size: Option<usize>,
    pub page_token: Option<String>,
}

/// Lines per page unless asked otherwise, and at most.
pub const PAGE_SIZE: usize = 50;
pub const MAX_PAGE_SIZE: usize = 200;
/// Tasks read from the store for one page at most: a filter that matches few tasks
/// answers with fewer lines and a token to read on from, never a scan of the store.
pub const SCAN_BUDGET: usize = 2_000;

/// Whether `task` passes the list's filters.
fn matches(task: &Task, query: &ListQuery) -> bool {
    if let Some(state) = query.state.as_deref().filter(|s| !s.is_empty())
        && state_of(task) != state
    {
        return false;
    }
    let plan = plan_of(task).unwrap_or(&Value::Null);
    if let Some(agent) = query.agent.as_deref().filter(|a| !a.is_empty())
        && !agents_of(plan).iter().any(|a| a == agent)
    {
        return false;
    }
    if let Some(superseded) = query.supersedes.as_deref().filter(|s| !s.is_empty())
        && str_of(plan, "/supersedes/sagaId") != Some(superseded)
    {
        return false;
    }
    if let Some(q) = query.q.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
        let q = q.to_lowercase();
        let in_text = |text: Option<&str>| text.is_some_and(|t| t.to_lowercase().contains(&q));
        let key_of_step = plan
            .get("steps")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|s| s.get("id").and_then(Value::as_str))
            .any(|step| {
                let key = shared_types::plan::idempotency_key(
                    str_of(plan, "/sagaId").unwrap_or_default(),
                    step,
                )
                .to_lowercase();
                key == q || format!("{key}:undo") == q
            });
        return key_of_step
            || in_text(str_of(plan, "/sagaId"))
            || in_text(str_of(plan, "/goal"))
            || task.id.to_lowercase() == q;
    }
    true
}

/// A page of the list: newest first, by the store's keys.
pub async fn list(executor: &Executor, query: &ListQuery) -> Result<Value> {
    let want = query.page_size.unwrap_or(PAGE_SIZE).clamp(1, MAX_PAGE_SIZE);
    let store = executor.tasks().store();
    // A state alone is the store's own filter; the others are read off each task.
    let stored_state = query
        .state
        .as_deref()
        .filter(|s| !s.is_empty())
        .and_then(task_state);
    if query.page_token.is_none()
        && let Some(found) = exact(executor, query).await?
    {
        return Ok(json!({"sagas": [summary(&found)], "nextPageToken": null, "scanned": 1}));
    }
    let mut after = query.page_token.as_deref().and_then(PageKey::from_token);
    let mut shown = Vec::new();
    let mut scanned = 0;
    // Each read asks for no more tasks than lines are still wanted, so that a page never
    // stops inside a read: where the last read ended is where the next page starts.
    let next = loop {
        let limit = (want - shown.len()).min(SCAN_BUDGET - scanned);
        let page = store
            .list(&TaskQuery {
                state: stored_state.clone(),
                after,
                limit,
                ..TaskQuery::default()
            })
            .await?;
        scanned += page.tasks.len();
        shown.extend(
            page.tasks
                .iter()
                .filter(|task| matches(task, query))
                .map(summary),
        );
        match page.next {
            Some(key) if shown.len() < want && scanned < SCAN_BUDGET => after = Some(key),
            next => break next,
        }
    };
    Ok(json!({
        "sagas": shown,
        "nextPageToken": next.map(|k| k.token()),
        "scanned": scanned,
    }))
}

/// The saga that `q` names exactly (a saga id, an idempotency key, a task id), when it
/// passes the other filters: found by its id, not by reading the list.
async fn exact(executor: &Executor, query: &ListQuery) -> Result<Option<Task>> {
    let Some(q) = query.q.as_deref().map(str::trim).filter(|q| !q.is_empty()) else {
        return Ok(None);
    };
    let store = executor.tasks().store();
    if let Some(task) = store.get(q).await?
        && matches(&task, query)
    {
        return Ok(Some(task));
    }
    // `<sagaId>`, `<sagaId>:<stepId>` or `<sagaId>:<stepId>:undo`.
    let key = q.strip_suffix(":undo").unwrap_or(q);
    let mut candidates = vec![q];
    if let Some((saga_id, _)) = key.rsplit_once(':') {
        candidates.push(saga_id);
    }
    for saga_id in candidates {
        if let Some(header) = executor.config().journal.header(saga_id).await?
            && let Some(task) = store.get(&header.task_id).await?
            && matches(&task, query)
        {
            return Ok(Some(task));
        }
    }
    Ok(None)
}

/// The numbers the overview shows first: the compensation rate and the undo handles,
/// then sagas by state and tool calls by agent.
pub async fn overview(executor: &Executor, window: Option<std::time::Duration>) -> Result<Value> {
    let metrics = executor.metrics();
    let now_ms = chrono::Utc::now().timestamp_millis();
    // Over the window asked for, from the outcomes of the last day; or since the start,
    // from the counters `/metrics` shows.
    let (compensations, since) = match window {
        Some(window) => (
            executor
                .metrics()
                .compensations_since(now_ms - window.as_millis() as i64),
            format!("the last {}", shown_window(window)),
        ),
        None => (metrics.compensations(), "this executor's start".to_owned()),
    };
    // As the PromQL in docs/running-the-executor.md: of the compensations that ended, those that succeeded. A
    // failed attempt is retried; dead_lettered and unavailable were put to a person.
    let mut by_agent = Vec::new();
    let (mut succeeded, mut gave_up, mut failed_attempts) = (0.0, 0.0, 0.0);
    for (agent, outcomes) in &compensations {
        let ok = outcomes.get("succeeded").copied().unwrap_or(0.0);
        let failed = outcomes.get("failed").copied().unwrap_or(0.0);
        let given_up = outcomes.values().sum::<f64>() - ok - failed;
        succeeded += ok;
        gave_up += given_up;
        failed_attempts += failed;
        by_agent.push(json!({
            "agent": agent, "succeeded": ok, "gaveUp": given_up, "failedAttempts": failed,
            "outcomes": outcomes,
            "rate": (ok + given_up > 0.0).then(|| ok / (ok + given_up)),
        }));
    }
    let calls: Vec<Value> = metrics
        .calls()
        .into_iter()
        .flat_map(|(agent, outcomes)| {
            outcomes.into_iter().map(
                move |(outcome, count)| json!({"agent": agent, "outcome": outcome, "count": count}),
            )
        })
        .collect();
    let (open, expiring) = metrics
        .undo_handle_counts(now_ms)
        .values()
        .fold((0, 0), |(open, expiring), (o, e)| (open + o, expiring + e));
    let journal = &executor.config().journal;
    let mut soonest = Vec::new();
    for (saga_id, handle) in executor.metrics().open_undo_handles().into_iter().take(20) {
        let task_id = journal.header(&saga_id).await?.map(|h| h.task_id);
        soonest.push(json!({
            "sagaId": saga_id, "taskId": task_id, "step": handle.step,
            "agent": handle.agent, "deadlineMs": handle.deadline_ms,
        }));
    }
    let store = executor.tasks().store();
    let mut sagas = serde_json::Map::new();
    for state in STATES {
        // `failed` shares the store's state with `compensated`, shown there.
        if state == "failed" {
            continue;
        }
        let Some(task_state) = task_state(state) else {
            continue;
        };
        let total = store
            .list(&TaskQuery {
                state: Some(task_state),
                limit: 0,
                ..TaskQuery::default()
            })
            .await?
            .total;
        sagas.insert(state.to_owned(), json!(total));
    }
    Ok(json!({
        "atMs": now_ms,
        "since": since,
        "windowSecs": window.map(|w| w.as_secs()),
        "sagas": sagas,
        "compensations": {
            "succeeded": succeeded, "gaveUp": gave_up, "failedAttempts": failed_attempts,
            "rate": (succeeded + gave_up > 0.0).then(|| succeeded / (succeeded + gave_up)),
            "byAgent": by_agent,
        },
        "undoHandles": {
            "open": open, "expiring": expiring,
            "expiringWithinSecs": executor.metrics().expiring_within_secs(),
            "soonest": soonest,
        },
        "calls": calls,
    }))
}

/// `3600 s` as `60 min`, `86400 s` as `24 h`.
fn shown_window(window: std::time::Duration) -> String {
    let secs = window.as_secs();
    match secs {
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// The task of saga (or task) `id`, as callers read it (`Executor::shown`): a task id
/// first, else the journal's saga.
pub async fn find_task(executor: &Executor, id: &str) -> Result<Option<Task>> {
    let store = executor.tasks().store();
    let stored = match store.get(id).await? {
        Some(task) => Some(task),
        None => match executor.config().journal.header(id).await? {
            Some(header) => store.get(&header.task_id).await?,
            None => None,
        },
    };
    Ok(match stored {
        Some(task) => Some(executor.shown(task).await.task),
        None => None,
    })
}

/// One saga: its task, its plan as an audit record, its timeline, its ledger.
pub async fn saga(executor: &Executor, task: &Task) -> Result<Value> {
    let plan = plan_of(task).unwrap_or(&Value::Null);
    let saga_id = str_of(plan, "/sagaId").unwrap_or_default();
    let state = state_of(task);
    let ledger = task
        .artifacts
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|a| a.artifact_id == "saga-ledger")
        .and_then(|a| {
            a.parts.iter().find_map(|p| match &p.content {
                PartContent::Data(v) => Some(v.clone()),
                _ => None,
            })
        });
    let signer = executor.config().planner_keys.verify(plan).ok();
    let mandate = plan.get("mandate").map(|m| {
        json!({
            "mandateId": m.get("mandateId"), "principal": m.get("principal"),
            "budget": m.get("budget"), "perSaga": m.get("perSaga"),
            "notAfter": m.get("notAfter"),
        })
    });
    let steps: Vec<Value> = plan
        .get("steps")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|s| {
            let id = s.get("id").and_then(Value::as_str).unwrap_or_default();
            // The steps it waits for, when the plan names them (parallel branches);
            // absent, the step before it.
            let after: Option<Vec<&str>> = s
                .get("after")
                .and_then(Value::as_array)
                .map(|ids| ids.iter().filter_map(Value::as_str).collect());
            json!({"step": id, "agent": s.get("agent"), "skill": s.get("skill"),
                "class": s.get("class"), "after": after,
                "idempotencyKey": shared_types::plan::idempotency_key(saga_id, id)})
        })
        .collect();
    let pivot = plan
        .get("pivotIndex")
        .and_then(Value::as_u64)
        .and_then(|i| steps.get(i as usize))
        .and_then(|s| s.get("step").cloned());
    let journaled = if saga_id.is_empty() {
        None
    } else {
        executor.config().journal.load(saga_id).await?
    };
    let (bars, waits, from) = match &journaled {
        Some((header, entries)) if header.task_id == task.id => {
            let (bars, waits) = timeline(&header.spec, entries, state == "waitingForAPerson");
            (bars, waits, "journal")
        }
        // Forgotten by retention, or never begun: the ledger alone is left.
        _ => (Vec::new(), Vec::new(), "ledger"),
    };
    let deadlines: Vec<Value> = ledger
        .as_ref()
        .and_then(|l| l.get("steps"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        // Only while the undo may still be run: once it ran, or the saga ended or passed
        // its point of no return, the deadline bounds nothing.
        .filter(|s| s.pointer("/undoDeadline/open") == Some(&Value::Bool(true)))
        .filter_map(|s| {
            let at = s.pointer("/undoDeadline/at").and_then(Value::as_str)?;
            let at = chrono::DateTime::parse_from_rfc3339(at).ok()?;
            let step = s.get("step").and_then(Value::as_str)?;
            let agent = steps
                .iter()
                .find(|x| x.get("step").and_then(Value::as_str) == Some(step))
                .and_then(|x| x.get("agent").cloned());
            Some(json!({"step": step, "agent": agent, "deadlineMs": at.timestamp_millis()}))
        })
        .collect();
    let why = match state {
        "running" | "waitingForASlot" => None,
        _ => question(task).or_else(|| status_text(task)),
    };
    let point_of_no_return = ledger
        .as_ref()
        .and_then(|l| l.get("pointOfNoReturn"))
        .cloned()
        .unwrap_or(Value::Null);
    Ok(json!({
        "sagaId": saga_id,
        "taskId": task.id,
        "state": state,
        "status": {"state": task.status.state, "message": status_text(task), "atMs": ms(task)},
        "audit": {
            "goal": str_of(plan, "/goal"),
            "planner": str_of(plan, "/authoredBy/agent"),
            "submittedBy": task.metadata.as_ref().and_then(|m| m.get(agent_host::agent::OWNER_METADATA)),
            "modelId": str_of(plan, "/authoredBy/model"),
            "promptHash": str_of(plan, "/authoredBy/promptSha256"),
            "rejectedAlternatives": plan.pointer("/authoredBy/rejectedAlternatives").cloned().unwrap_or(json!([])),
            "signerKeyId": signer,
            "createdAt": plan.get("createdAt"),
            "mandate": mandate,
            // The saga this plan replaces after it unwound, as the signed plan names it.
            "supersedes": plan.get("supersedes"),
        },
        "traceId": crate::invoke::trace_id(saga_id),
        "pivot": pivot,
        "pointOfNoReturn": point_of_no_return,
        "steps": steps,
        "timeline": bars,
        "waits": waits,
        "undoDeadlines": deadlines,
        "ledger": ledger,
        "why": why,
        "timelineFrom": from,
    }))
}

/// What each answer does, for the person choosing.
fn does(resolution: &str, about: &Value) -> String {
    let skill = str_of(about, "/skill").unwrap_or("the call");
    let agent = str_of(about, "/agent").unwrap_or("its agent");
    let step = str_of(about, "/stepId").unwrap_or("the step");
    match resolution {
        "approve" => format!(
            "runs {skill} on {agent} with exactly the arguments shown (SHA-256 {}), within 10 minutes",
            str_of(about, "/argsSha256").unwrap_or("?")
        ),
        "retry" => format!("calls {skill} on {agent} again, under the same idempotency key"),
        "resolved-manually" => {
            format!("records that a person settled {step} by hand; the saga goes on from there")
        }
        "compensate" => {
            "unwinds the saga: undoes the steps done so far, in reverse order".to_owned()
        }
        other => other.to_owned(),
    }
}

/// The sagas waiting for a person, newest first, with what each answer would do.
pub async fn waiting(executor: &Executor) -> Result<Value> {
    let store = executor.tasks().store();
    let mut after = None;
    let mut shown = Vec::new();
    loop {
        let page = store
            .list(&TaskQuery {
                state: Some(TaskState::InputRequired),
                after,
                limit: MAX_PAGE_SIZE,
                ..TaskQuery::default()
            })
            .await?;
        for task in &page.tasks {
            shown.push(waiting_one(task));
        }
        match page.next {
            Some(key) if shown.len() < SCAN_BUDGET => after = Some(key),
            _ => break,
        }
    }
    Ok(json!({ "sagas": shown }))
}

/// What a waiting saga asks, in words for people: the `question` of its status's data
/// part (`Saga::awaiting`).
fn question(task: &Task) -> Option<String> {
    let message = task.status.message.as_ref()?;
    message.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(Value::Object(members)) => members
            .values()
            .next()?
            .get("question")?
            .as_str()
            .map(str::to_owned),
        _ => None,
    })
}

fn waiting_one(task: &Task) -> Value {
    let plan = plan_of(task).unwrap_or(&Value::Null);
    let data = task.status.message.as_ref().and_then(|m| {
        m.parts.iter().find_map(|p| match &p.content {
            PartContent::Data(v) => Some(v),
            _ => None,
        })
    });
    let (on, about) = data
        .and_then(Value::as_object)
        .and_then(|o| o.iter().next())
        .map(|(k, v)| (k.as_str(), v))
        .unwrap_or(("escalation", &Value::Null));
    let choices: Vec<Value> = about
        .get("resolutions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|r| json!({"resolution": r, "does": does(r, about)}))
        .collect();
    let approval = (on == "approval").then(|| {
        json!({"sagaId": about.get("sagaId"), "stepId": about.get("stepId"),
            "argsSha256": about.get("argsSha256")})
    });
    json!({
        "sagaId": str_of(plan, "/sagaId"),
        "taskId": task.id,
        "goal": str_of(plan, "/goal").unwrap_or_default(),
        "on": on,
        "step": about.get("stepId"),
        "agent": about.get("agent"),
        "skill": about.get("skill"),
        "reason": status_text(task).unwrap_or_default(),
        "question": about.get("question"),
        "sinceMs": ms(task),
        "choices": choices,
        "approval": approval,
        "args": about.get("args"),
    })
}
