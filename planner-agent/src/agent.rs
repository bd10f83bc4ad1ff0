//! The planner as an A2A agent (skill `plan-and-execute`): reads the goal, reads the
//! executor's catalog, has its backend compose a plan, signs it, checks it against the
//! same catalog, reports it as the `plan` artifact, submits it to the executor and
//! follows the executor's task (see `follow`), cancels through the executor, and picks
//! up unfinished tasks after a restart.

pub(crate) use agent_host::agent_message;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_host::sdk::{
    A2AError, Artifact, Message, Part, PartContent, StreamResponse, Task, TaskState,
};
use agent_host::store::TaskQuery;
use agent_host::{Agent, Reply, RequestContext, TaskHandle, TaskManager};
use async_trait::async_trait;
use chrono::Utc;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use shared_types::{Mandate, PlanValidator, SigningIdentity, TrustStore, ViolationCode};
use tokio_util::sync::CancellationToken;

use crate::backend::{PlanBackend, PlanRequest, describe_violations};
use crate::compose::{PlanContext, new_saga_id};
use crate::error::{Error, Result};
use crate::executor::{ExecutorLink, leaves_outcome_unknown};
use crate::follow::{final_state, follow};
use crate::goal::Goal;
use crate::mandate::Grant;
use crate::replan::Replan;
use crate::retry::Tries;
use crate::templates::Templates;

/// The artifact that carries the signed plan.
pub const PLAN_ARTIFACT: &str = "plan";
/// Task metadata: the plan's saga id.
pub const META_SAGA_ID: &str = "sagaId";
/// Task metadata: the executor's task id, once the executor took the plan.
pub const META_EXECUTOR_TASK_ID: &str = "executorTaskId";
/// Task metadata: the executor's base URL (where an approver answers while this task is AUTH_REQUIRED).
pub const META_EXECUTOR_URL: &str = "executorUrl";
/// Task metadata: the executor task's last state, as on the wire.
pub const META_EXECUTOR_STATE: &str = "executorState";
/// Task metadata: copied from the executor's task (`compensated`, …).
pub const META_OUTCOME: &str = "outcome";
/// Task metadata: true when the plan was only composed (`dryRun`).
pub const META_DRY_RUN: &str = "dryRun";

/// What the planner needs.
pub struct PlannerConfig {
    /// Signs plans and JWTs; its kid is the planner's id.
    pub identity: Arc<SigningIdentity>,
    pub executor: ExecutorLink,
    pub backend: Arc<dyn PlanBackend>,
    /// For reading intent phrases in goal texts.
    pub templates: Templates,
    /// Stops following executor tasks (they are picked up again by `recover`).
    pub shutdown: CancellationToken,
    /// The principal's mandate this planner plans under when a goal brings none; without
    /// one, every goal must carry its own (data part `mandate`).
    pub mandate: Option<Grant>,
    /// How long reading the catalog, or submitting a plan, is tried again while the
    /// executor is unreachable or its answer is unknown (`retry::DEFAULT_EXECUTOR_RETRY`
    /// by default).
    pub executor_retry: Duration,
    /// How long relayed progress gathers before one write of the planner's task.
    pub gather_progress: Duration,
    /// How many times a goal whose saga unwound, or whose plan was refused for a reason a
    /// new plan may avoid, is planned again (`replan`); 0: never.
    pub max_replans: u32,
    /// Where the planning spans go (`--otlp-endpoint`); `None` sends none.
    pub traces: Option<Arc<agent_host::telemetry::Exporter>>,
}

/// Where one of the planner's tasks stands, for cancellation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Phase {
    Planning,
    Submitted(String),
    Canceled,
}

pub(crate) type PhaseLock = Arc<tokio::sync::Mutex<Phase>>;

pub struct Planner {
    config: PlannerConfig,
    tasks: Arc<TaskManager>,
    live: Mutex<HashMap<String, PhaseLock>>,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("id", &self.config.identity.kid())
            .field("executor", &self.config.executor)
            .field("backend", &self.config.backend.name())
            .finish_non_exhaustive()
    }
}

/// The planning of `plan` as a span in its saga's trace, under the saga's span (whose id
/// every agent derives from the saga id): from the catalog's reading to the signed plan,
/// for a first plan and for each plan made when the goal is planned again.
fn planning_span(
    traces: &agent_host::telemetry::Exporter,
    planner: &str,
    plan: &Value,
    started: std::time::SystemTime,
) {
    use opentelemetry::KeyValue;
    use opentelemetry::trace::{Span, SpanKind};
    let saga_id = plan
        .get("sagaId")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let text = |pointer: &str| {
        plan.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let steps = plan["steps"].as_array().map_or(0, Vec::len) as i64;
    let builder = traces
        .span(format!("invoke_agent {planner}"))
        .with_kind(SpanKind::Internal)
        .with_start_time(started)
        .with_attributes(vec![
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            KeyValue::new("gen_ai.agent.name", planner.to_owned()),
            KeyValue::new("gen_ai.request.model", text("/authoredBy/model")),
            KeyValue::new("sagaplane.saga.id", saga_id.to_owned()),
            KeyValue::new("sagaplane.plan.steps", steps),
            KeyValue::new("sagaplane.mandate.id", text("/mandate/mandateId")),
        ]);
    let mut span = traces.build(
        builder,
        &agent_host::telemetry::under_saga(saga_id),
        None,
        agent_host::telemetry::new_span_id(),
    );
    span.end();
}

/// Logs a failed report: the task store is the only place a report can go.
pub(crate) fn logged<T>(task: &TaskHandle, result: agent_host::Result<T>) {
    if let Err(e) = result {
        tracing::warn!(task = task.id(), error = %e, "cannot update the planner's task");
    }
}

/// The goal in a message: its text parts (joined by line breaks) and first data part.
fn goal_parts(message: &Message) -> (String, Option<Value>) {
    let text = message
        .parts
        .iter()
        .filter_map(|p| match &p.content {
            PartContent::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let data = message.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(v) => Some(v.clone()),
        _ => None,
    });
    (text, data)
}

/// The artifact that carries signed plan `plan`.
pub(crate) fn plan_artifact(plan: &Value) -> Artifact {
    Artifact {
        artifact_id: PLAN_ARTIFACT.into(),
        name: Some(PLAN_ARTIFACT.into()),
        description: Some("The signed plan (docs/plans-and-mandates.md)".into()),
        parts: vec![Part::data(plan.clone())],
        metadata: None,
        extensions: None,
    }
}

/// The signed plan a task carries, if it got that far.
fn plan_of(task: &Task) -> Option<Value> {
    let artifact = task
        .artifacts
        .as_deref()?
        .iter()
        .find(|a| a.artifact_id == PLAN_ARTIFACT)?;
    artifact.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(v) => Some(v.clone()),
        _ => None,
    })
}

fn metadata_str(task: &Task, key: &str) -> Option<String> {
    task.metadata
        .as_ref()?
        .get(key)?
        .as_str()
        .map(str::to_owned)
}

impl Planner {
    pub fn new(config: PlannerConfig, tasks: Arc<TaskManager>) -> Arc<Self> {
        Arc::new(Self {
            config,
            tasks,
            live: Mutex::new(HashMap::new()),
        })
    }

    /// The planner's id (its key's kid).
    pub fn id(&self) -> &str {
        self.config.identity.kid()
    }

    pub(crate) fn executor(&self) -> &ExecutorLink {
        &self.config.executor
    }

    pub(crate) fn shutdown(&self) -> &CancellationToken {
        &self.config.shutdown
    }

    pub(crate) fn gather_progress(&self) -> Duration {
        self.config.gather_progress
    }

    fn register(&self, task_id: &str, phase: Phase) -> PhaseLock {
        let lock = Arc::new(tokio::sync::Mutex::new(phase));
        if let Ok(mut live) = self.live.lock() {
            live.insert(task_id.to_owned(), lock.clone());
        }
        lock
    }

    fn unregister(&self, task_id: &str) {
        if let Ok(mut live) = self.live.lock() {
            live.remove(task_id);
        }
    }

    fn phase_of(&self, task_id: &str) -> Option<PhaseLock> {
        self.live.lock().ok()?.get(task_id).cloned()
    }

    /// The backend's name (`rules-v1`, `llm:<model>`).
    pub(crate) fn backend_name(&self) -> String {
        self.config.backend.name()
    }

    /// How many times a goal whose saga unwound is planned again.
    pub(crate) fn max_replans(&self) -> u32 {
        self.config.max_replans
    }

    /// The goal of task `snapshot` (its first message from the client) and the mandate
    /// it is planned under, read again as when it arrived.
    pub(crate) fn goal_and_grant(&self, snapshot: &Task) -> Result<(Goal, Grant)> {
        let message = crate::replan::goal_message(snapshot).ok_or_else(|| {
            Error::Defect("the goal's message is not in the task's history".into())
        })?;
        let (text, data) = goal_parts(message);
        let goal = Goal::parse(&text, data.as_ref(), &self.config.templates)
            .map_err(Error::Unsatisfiable)?;
        let grant = self.grant_for(&goal)?;
        Ok((goal, grant))
    }

    /// The mandate `goal` is planned under: its own (data part `mandate`), else the
    /// planner's (see `Grant::read` for what is refused).
    fn grant_for(&self, goal: &Goal) -> Result<Grant> {
        match &goal.mandate {
            Some(value) => {
                Grant::read(value, &self.config.identity).map_err(Error::Unsatisfiable)
            }
            None => self.config.mandate.clone().ok_or_else(|| {
                Error::Unsatisfiable(
                    "no mandate: this planner has none of its own, so the goal must carry a principal's signed mandate \
                     in its data part as \"mandate\""
                        .into(),
                )
            }),
        }
    }

    /// Refuses a goal whose `maxSpend` its mandate does not allow (checked before the
    /// catalog is read): in another currency, or above what one saga may spend.
    fn check_goal_spend(goal: &Goal, mandate: &Mandate) -> Result<()> {
        let cap = mandate.saga_cap();
        let Some(asked) = &goal.max_spend else {
            return Ok(());
        };
        if asked.currency != cap.currency {
            return Err(Error::Unsatisfiable(format!(
                "maxSpend is in {}, but mandate {:?} grants spending in {} only",
                asked.currency, mandate.mandate_id, cap.currency
            )));
        }
        if asked.amount_minor > cap.amount_minor {
            return Err(Error::Unsatisfiable(format!(
                "maxSpend {} is above what mandate {:?} allows one saga: {cap}",
                asked.amount_minor.get(),
                mandate.mandate_id
            )));
        }
        Ok(())
    }

    /// Composes, signs and checks a plan for `goal`; returns it as JSON.
    pub(crate) async fn compose(
        &self,
        task: &TaskHandle,
        goal: &Goal,
        grant: &Grant,
        replan: Option<&Replan>,
    ) -> Result<Value> {
        let started = std::time::SystemTime::now();
        let executor = &self.config.executor;
        let catalog = self
            .retrying(task, "read its catalog", || executor.catalog())
            .await?
            .ok_or_else(|| {
                Error::ExecutorUnavailable(
                    "the planner stopped while it waited for the executor".into(),
                )
            })?;
        let mut own_key = TrustStore::new();
        own_key
            .add_jwk(&self.config.identity.public_jwk())
            .map_err(|e| Error::Config(format!("the planner's own key: {e}")))?;
        let validator = PlanValidator::new(catalog.clone(), own_key)
            .map_err(|e| Error::Executor(format!("the executor's catalog cannot be used: {e}")))?;
        let ctx = PlanContext {
            saga_id: new_saga_id(),
            planner_id: self.id().to_owned(),
            now: Utc::now(),
            mandate: grant.mandate.clone(),
            supersedes: replan.map(|r| r.supersedes.clone()),
        };
        let plan = self
            .config
            .backend
            .plan(PlanRequest {
                goal,
                catalog: &catalog,
                validator: &validator,
                ctx: &ctx,
                replan,
            })
            .await?;
        let mut value = serde_json::to_value(&plan)
            .map_err(|e| Error::Defect(format!("the plan does not serialise: {e}")))?;
        // The principal's document as received, not its re-serialisation: the signature
        // is over what the principal signed.
        value["mandate"] = grant.signed.clone();
        self.config
            .identity
            .sign_in_place(&mut value)
            .map_err(|e| Error::Defect(format!("the plan cannot be signed: {e}")))?;
        // The planner holds no principal key: whether the principal's signature is
        // trusted is the executor's to decide (the grantee was checked in `grant_for`).
        let mut report = validator.validate(&value, Utc::now());
        report
            .violations
            .retain(|v| v.code != ViolationCode::MandateUntrusted);
        if !report.violations.is_empty() {
            return Err(Error::Defect(format!(
                "the signed plan does not validate (a planner bug; it was not submitted):\n{}",
                describe_violations(&report.violations)
            )));
        }
        if let Some(traces) = &self.config.traces {
            planning_span(traces, self.config.identity.kid(), &value, started);
        }
        Ok(value)
    }

    /// The whole run of one task, up to the point where it ends or is handed to `follow`.
    async fn work(&self, task: &TaskHandle, message: &Message, phase: &PhaseLock) -> Result<()> {
        let (text, data) = goal_parts(message);
        let goal = Goal::parse(&text, data.as_ref(), &self.config.templates)
            .map_err(Error::Unsatisfiable)?;
        let grant = self.grant_for(&goal)?;
        Self::check_goal_spend(&goal, &grant.mandate)?;
        logged(
            task,
            task.set_status(
                TaskState::Working,
                Some(agent_message(
                    format!(
                        "planning with {} under mandate {:?} of {:?}: {}",
                        self.config.backend.name(),
                        grant.mandate.mandate_id,
                        grant.mandate.principal,
                        goal.description()
                    ),
                    None,
                )),
            )
            .await,
        );
        if goal.dry_run {
            // Recorded before the plan exists, so a restart never submits a dry run.
            task.set_metadata(META_DRY_RUN, json!(true))
                .await
                .map_err(|e| Error::Config(format!("cannot record the dry run: {e}")))?;
        }
        let plan = self.compose(task, &goal, &grant, None).await?;
        let saga_id = plan
            .get("sagaId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        task.add_artifact(plan_artifact(&plan), false, true)
            .await
            .map_err(|e| Error::Config(format!("cannot record the plan: {e}")))?;
        logged(task, task.set_metadata(META_SAGA_ID, json!(saga_id)).await);
        if goal.dry_run {
            let steps = plan["steps"].as_array().map_or(0, Vec::len);
            logged(
                task,
                task.set_status(
                    TaskState::Completed,
                    Some(agent_message(
                        format!("dry run: plan {saga_id} ({steps} steps) is signed and valid against the executor's catalog; it was not submitted"),
                        None,
                    )),
                )
                .await,
            );
            return Ok(());
        }
        self.submit(task, &plan, phase).await
    }

    /// Submits the signed plan, follows the executor's task to its end, and ends the
    /// planner's task as it ended, or plans again (`replan`) and goes on with that plan.
    async fn submit(&self, task: &TaskHandle, plan: &Value, phase: &PhaseLock) -> Result<()> {
        let mut plan = plan.clone();
        loop {
            let Some(ended) = self.submit_once(task, &plan, phase).await? else {
                return Ok(());
            };
            match self.after_attempt(task, &plan, &ended, phase).await {
                Some(next) => plan = next,
                None => return Ok(()),
            }
        }
    }

    /// Submits the signed plan and follows the executor's task; returns it once it ended
    /// (`None`: the planner stops, a cancel came first, or contact was lost). Holds the
    /// phase lock until the executor's task id is known, so a cancel sees either "not
    /// submitted" or the executor's task.
    async fn submit_once(
        &self,
        task: &TaskHandle,
        plan: &Value,
        phase: &PhaseLock,
    ) -> Result<Option<Task>> {
        let mut guard = phase.lock().await;
        if *guard == Phase::Canceled {
            return Ok(None);
        }
        let executor = &self.config.executor;
        let saga_id = plan["sagaId"].as_str().unwrap_or_default();
        logged(
            task,
            task.set_status(
                TaskState::Working,
                Some(agent_message(
                    format!(
                        "submitting plan {saga_id} to the executor at {}",
                        executor.url()
                    ),
                    None,
                )),
            )
            .await,
        );
        // After an unknown outcome the same signed plan goes again (same saga id, same
        // bytes): the executor answers it with the task it already has, if any.
        let opened = match self
            .retrying(task, "submit the plan", || self.open_submission(plan))
            .await
        {
            Ok(opened) => opened,
            Err(e @ Error::ExecutorUnavailable(_)) => {
                // It may have reached the executor with the last try, or an earlier one.
                logged(
                    task,
                    task.set_metadata(META_OUTCOME, json!("unknown")).await,
                );
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let Some((first, stream)) = opened else {
            // Stopping: the restarted planner submits the plan again.
            return Ok(None);
        };
        *guard = Phase::Submitted(first.id.clone());
        drop(guard);
        let submitted = vec![
            (META_EXECUTOR_URL.to_owned(), json!(executor.url())),
            (META_EXECUTOR_TASK_ID.to_owned(), json!(first.id)),
        ];
        if final_state(&first.status.state) {
            for (key, value) in submitted {
                logged(task, task.set_metadata(&key, value).await);
            }
            return Ok(Some(first));
        }
        logged(
            task,
            task.set_metadata_and_status(
                submitted,
                TaskState::Working,
                Some(agent_message(
                    format!("the executor took plan {saga_id} as its task {}", first.id),
                    None,
                )),
            )
            .await,
        );
        Ok(follow(self, task, &first.id, Some(stream)).await)
    }

    /// Submits `plan` and reads the first event of the executor's stream, its task.
    async fn open_submission(
        &self,
        plan: &Value,
    ) -> Result<(Task, BoxStream<'static, Result<StreamResponse, A2AError>>)> {
        let mut stream = self.config.executor.submit(plan).await?;
        match stream.next().await {
            Some(Ok(StreamResponse::Task(first))) => Ok((first, stream)),
            Some(Ok(StreamResponse::Message(m))) => {
                let (text, _) = goal_parts(&m);
                Err(Error::Executor(format!(
                    "the executor answered the plan with a message instead of a task: {text}"
                )))
            }
            Some(Ok(_)) => Err(Error::Executor(
                "the executor's stream did not start with its task".into(),
            )),
            Some(Err(e)) if leaves_outcome_unknown(&e) => Err(Error::ExecutorUnavailable(format!(
                "the executor's answer was lost: {e}"
            ))),
            Some(Err(e)) => Err(Error::Executor(format!(
                "the executor refused the plan: {e}"
            ))),
            None => Err(Error::ExecutorUnavailable(
                "the executor closed the stream before naming its task".into(),
            )),
        }
    }

    /// Makes `call` until it succeeds or fails for good; after a failure whose outcome is
    /// unknown (`Error::ExecutorUnavailable`) it waits (capped exponential backoff with
    /// jitter) and makes it again, for up to `PlannerConfig::executor_retry`, saying so on
    /// `task`. `None` if the planner stops meanwhile.
    async fn retrying<T, F, Fut>(
        &self,
        task: &TaskHandle,
        what: &str,
        mut call: F,
    ) -> Result<Option<T>>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut tries = Tries::new(self.config.executor_retry);
        loop {
            let error = match call().await {
                Err(Error::ExecutorUnavailable(why)) => why,
                done => return done.map(Some),
            };
            let Some(wait) = tries.failed() else {
                return Err(Error::ExecutorUnavailable(format!(
                    "{error} (tried {} times in {} s)",
                    tries.made(),
                    self.config.executor_retry.as_secs()
                )));
            };
            let attempt = tries.made();
            tracing::info!(task = task.id(), attempt, error = ?error, "waiting for the executor");
            let text = format!(
                "waiting for the executor (attempt {attempt}): cannot {what} at {} yet; trying again",
                self.config.executor.url()
            );
            logged(
                task,
                task.set_status(TaskState::Working, Some(agent_message(text, None)))
                    .await,
            );
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.config.shutdown.cancelled() => return Ok(None),
            }
        }
    }

    /// Waits before retry `attempt` (capped exponential backoff); false on shutdown.
    pub(crate) async fn pause(&self, attempt: u32) -> bool {
        let ms = (250u64 << attempt.min(5)).min(5000);
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(ms)) => true,
            _ = self.config.shutdown.cancelled() => false,
        }
    }

    /// Ends a task that did not reach the executor: REJECTED for a goal that cannot be
    /// planned (with every refused draft of a model in a data part), FAILED for anything
    /// else.
    async fn end_with(&self, task: &TaskHandle, error: Error) {
        let (state, data) = match &error {
            Error::Unsatisfiable(_) => (TaskState::Rejected, None),
            Error::DraftsRefused { drafts, .. } => (
                TaskState::Rejected,
                Some(json!({"rejectedAlternatives": drafts})),
            ),
            _ => (TaskState::Failed, None),
        };
        let prefix = match &error {
            Error::Unsatisfiable(_) => "the goal cannot be planned: ",
            Error::DraftsRefused { .. } => "",
            Error::Backend(_) => "the planning model failed: ",
            Error::Executor(_) | Error::ExecutorUnavailable(_) => "",
            Error::Defect(_) => "",
            Error::Config(_) => "internal error: ",
        };
        logged(
            task,
            task.set_status(state, Some(agent_message(format!("{prefix}{error}"), data)))
                .await,
        );
    }

    /// Resumes every planner task a restart interrupted (call once at start): follows
    /// the executor's task again, resubmits a plan that was composed but perhaps not
    /// submitted (the executor answers an identical plan with the task it has), and
    /// fails tasks that had not got as far as a plan.
    pub async fn recover(self: &Arc<Self>) -> Result<usize> {
        let mut unfinished = Vec::new();
        for state in [
            TaskState::Submitted,
            TaskState::Working,
            TaskState::InputRequired,
            TaskState::AuthRequired,
        ] {
            let mut after = None;
            loop {
                let query = TaskQuery {
                    state: Some(state.clone()),
                    after,
                    limit: 100,
                    ..TaskQuery::default()
                };
                let page =
                    self.tasks.store().list(&query).await.map_err(|e| {
                        Error::Config(format!("cannot list the planner's tasks: {e}"))
                    })?;
                unfinished.extend(page.tasks);
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
        }
        let count = unfinished.len();
        for task in unfinished {
            let me = self.clone();
            tokio::spawn(async move { me.resume(task).await });
        }
        Ok(count)
    }

    async fn resume(self: Arc<Self>, snapshot: Task) {
        let task = self.tasks.handle(&snapshot.id, &snapshot.context_id);
        if let Some(executor_task) = metadata_str(&snapshot, META_EXECUTOR_TASK_ID) {
            let phase = self.register(task.id(), Phase::Submitted(executor_task.clone()));
            let ended = follow(&self, &task, &executor_task, None).await;
            let plan = plan_of(&snapshot).unwrap_or_default();
            if let Some(ended) = ended
                && let Some(next) = self.after_attempt(&task, &plan, &ended, &phase).await
                && let Err(e) = self.submit(&task, &next, &phase).await
            {
                self.end_with(&task, e).await;
            }
        } else if let Some(plan) = plan_of(&snapshot) {
            let dry_run = snapshot
                .metadata
                .as_ref()
                .is_some_and(|m| m.contains_key(META_DRY_RUN));
            if dry_run {
                logged(
                    &task,
                    task.set_status(
                        TaskState::Completed,
                        Some(agent_message(
                            "dry run: the signed plan is in artifact plan; it was not submitted",
                            None,
                        )),
                    )
                    .await,
                );
            } else {
                let phase = self.register(task.id(), Phase::Planning);
                if let Err(e) = self.submit(&task, &plan, &phase).await {
                    self.end_with(&task, e).await;
                }
            }
        } else {
            logged(
                &task,
                task.set_status(
                    TaskState::Failed,
                    Some(agent_message(
                        "the planner restarted before it had a plan for this goal; send the goal again",
                        None,
                    )),
                )
                .await,
            );
        }
        self.unregister(task.id());
    }
}

/// The planner as the hosting layer sees it.
#[derive(Debug, Clone)]
pub struct PlannerAgent(pub Arc<Planner>);

impl std::ops::Deref for PlannerAgent {
    type Target = Arc<Planner>;

    fn deref(&self) -> &Arc<Planner> {
        &self.0
    }
}

#[async_trait]
impl Agent for PlannerAgent {
    /// A goal's task is its sender's: another caller can neither see it nor cancel it
    /// (the planner would cancel the executor's task with its own authority).
    fn scopes_tasks_to_callers(&self) -> bool {
        true
    }

    async fn accept(
        &self,
        _: &RequestContext,
        message: &Message,
        task: Option<&Task>,
    ) -> Result<Reply, A2AError> {
        if let Some(task) = task {
            // Nothing is recorded on the task: the refusal comes before the message is.
            let hint = match metadata_str(task, META_EXECUTOR_TASK_ID) {
                Some(id) => format!(
                    "; a planner never decides: an approver answers on the executor's task {id} at {}",
                    self.config.executor.url()
                ),
                None => String::new(),
            };
            return Err(A2AError::unsupported_operation(format!(
                "planner task {} takes no further messages{hint}",
                task.id
            )));
        }
        let (text, data) = goal_parts(message);
        if text.trim().is_empty() && data.is_none() {
            return Err(A2AError::invalid_params(
                "plan-and-execute needs a goal: a text part, and optionally a data part of parameters",
            ));
        }
        Ok(Reply::Task)
    }

    async fn run(&self, _: RequestContext, task: TaskHandle, message: Message) {
        let phase = self.register(task.id(), Phase::Planning);
        if let Err(e) = self.work(&task, &message, &phase).await {
            if !matches!(e, Error::Unsatisfiable(_) | Error::DraftsRefused { .. }) {
                tracing::warn!(task = task.id(), error = %e, "planning failed");
            }
            self.end_with(&task, e).await;
        }
        self.unregister(task.id());
    }

    /// Before submission: the task is canceled and nothing is submitted. After: the
    /// executor's task is canceled (which compensates first; past the pivot the executor
    /// refuses, and so does the planner) and its end is mirrored.
    async fn cancel(&self, task: TaskHandle) -> Result<Task, A2AError> {
        let snapshot = task.snapshot().await.map_err(agent_host::Error::into_a2a)?;
        let executor_task = match self.phase_of(task.id()) {
            Some(lock) => {
                let mut phase = lock.lock().await;
                match &*phase {
                    Phase::Submitted(id) => Some(id.clone()),
                    Phase::Canceled => None,
                    Phase::Planning => {
                        *phase = Phase::Canceled;
                        None
                    }
                }
            }
            None => metadata_str(&snapshot, META_EXECUTOR_TASK_ID),
        };
        let Some(executor_task) = executor_task else {
            return task
                .set_status(
                    TaskState::Canceled,
                    Some(agent_message(
                        "canceled before the plan was submitted",
                        None,
                    )),
                )
                .await
                .map_err(agent_host::Error::into_a2a);
        };
        match self.config.executor.cancel_task(&executor_task).await {
            Ok(ended) if final_state(&ended.status.state) => {
                // Ended as the attempt it was: listed with any before it, nothing more planned.
                let plan = plan_of(&snapshot).unwrap_or_default();
                let phase = self
                    .phase_of(task.id())
                    .unwrap_or_else(|| Arc::new(tokio::sync::Mutex::new(Phase::Canceled)));
                self.after_attempt(&task, &plan, &ended, &phase).await;
                task.snapshot().await.map_err(agent_host::Error::into_a2a)
            }
            Ok(_) => task.snapshot().await.map_err(agent_host::Error::into_a2a),
            Err(agent_host::Error::Protocol(e))
                if e.code == A2AError::task_not_cancelable("").code =>
            {
                Err(A2AError::task_not_cancelable(task.id()))
            }
            Err(e) => {
                tracing::warn!(task = task.id(), error = %e, "cannot cancel the executor's task");
                Err(A2AError::internal(format!(
                    "the executor's task {executor_task} could not be canceled"
                )))
            }
        }
    }
}
