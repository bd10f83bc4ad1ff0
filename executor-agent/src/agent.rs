//! The executor as an A2A agent (skill `execute-plan`): the `Executor` and its A2A
//! adapter (`ExecutorAgent`: accepting a plan or a person's `resolution`, cancellation),
//! over `admission` (validation, one task per saga id, a slot, the accepting write),
//! `running` (the drivers of this process, and where a saga is), `resume` (recovery at
//! start) and `retention` (forgetting finished sagas). A stop lets the calls out answer
//! first.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_host::cpu;
use agent_host::sdk::{A2AError, Message, PartContent, Task, TaskState, TaskStatus};
use agent_host::store::TaskQuery;
use agent_host::{
    Agent, AgentClient, Reply, RequestContext, TaskHandle, TaskManager, Viewed, agent_message,
};
use async_trait::async_trait;
use serde_json::{Value, json};
use shared_types::validate::{Resubmission, compare_with_accepted};
use shared_types::{Plan, PlanValidator, TrustStore, Violation};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::answers::{self, answer_of};
use crate::driver::{Control, Driver, Start, begin_creating, first_step};
use crate::error::{Error, Result};
use crate::invoke::{A2aInvoker, Endpoint, Invoker, ToolInvoker};
use crate::journal::{Claim, Epoch, JOURNAL_FORMAT, Journal, SagaHeader};
use crate::mandates::{MandateBook, Revoked};
use crate::mcp::invoker::McpInvoker;
use crate::metrics::{CountedInvoker, MeteredReporter, Metrics, Now};
use crate::progress::{TaskProgress, Unwritten};
use crate::recovery::replay;
use crate::registry::AgentKind;
use crate::registry::Registry;
use crate::saga::model::Phase;
use crate::saga::spec::MandateHold;
use crate::saga::{Decider, MandateEndEffect, Saga, SagaSpec};
use crate::slots::{Permit, SlotHold, Slots};
use crate::sync;
use crate::taking_in::{Intake, TakingIn};
use crate::task_view::saga_metadata;

mod admission;
mod forwarded;
mod resume;
mod retention;
mod running;

use admission::TakenPlan;
use forwarded::Forwarded;
pub use running::RevocationHeard;
use running::{Driven, Live, NOT_DRIVEN_HERE};

/// What the executor needs.
pub struct ExecutorConfig {
    pub registry: Registry,
    pub planner_keys: TrustStore,
    /// Each planner's JWT issuer name and the key id its plans are signed with: a planner
    /// submits only the plans it signed (another's would spend that planner's mandate
    /// and take its saga's task).
    pub planner_key_ids: HashMap<String, String>,
    /// The principals' mandates: whose are honoured, what they reserved, which were
    /// revoked.
    pub mandates: MandateBook,
    /// The callers (JWT issuers) who answer sagas that wait for a person; they see
    /// every saga's task, and nobody else answers one.
    pub approvers: HashSet<String>,
    pub journal: Arc<dyn Journal>,
    /// Whether the task store keeps its tables in the journal's database (the state file,
    /// or the replicas' PostgreSQL), as the executor's stores always do: then a saga's
    /// end, its finish mark and its task's last write are one durable write
    /// (`SagaLog::end`). `false` only where tests or benchmarks keep tasks apart.
    pub tasks_beside_journal: bool,
    /// The executor's credential for each tool agent, by agent name.
    pub credentials: HashMap<String, String>,
    /// Sessions with registered MCP servers (holding the same credentials).
    pub mcp: Arc<McpInvoker>,
    /// How many sagas may make progress at once (`DEFAULT_MAX_RUNNING_SAGAS` by
    /// default); the others wait for a slot (see `slots`).
    pub max_running_sagas: usize,
    /// How many steps of one saga may be under way at once; a plan may ask for fewer.
    pub max_parallel_steps: u32,
    /// How near its deadline an open undo handle counts as expiring on `/metrics`
    /// (`metrics::DEFAULT_UNDO_EXPIRING_WITHIN` by default).
    pub undo_expiring_within: Duration,
    /// Where cancels and answers for sagas driven by another replica go (replicas on one
    /// PostgreSQL database); `None` for an executor alone on its state file.
    pub forwarding: Option<Arc<crate::forwarding::Forwarding>>,
    /// Where saga spans go (`--otlp-endpoint`); `None` sends none, and wraps nothing.
    pub traces: Option<Arc<crate::telemetry::Traces>>,
    /// Cancelled to stop: every driver then waits for the call it has out, journals the
    /// answer and returns (see `Executor::stopped`).
    pub shutdown: CancellationToken,
}

/// Saga slots unless configured otherwise: far more sagas than a two-core executor
/// drives at full speed, few enough that a burst of plans does not become a burst of
/// calls on every tool agent at once.
pub const DEFAULT_MAX_RUNNING_SAGAS: usize = 1024;

/// A running saga: how to reach its driver, and a signal that changes at every stop.
pub struct Executor {
    config: ExecutorConfig,
    tasks: Arc<TaskManager>,
    live: Mutex<HashMap<String, Live>>,
    slots: Arc<Slots>,
    /// Plans from their task's creation until their saga is live.
    taking_in: Arc<TakingIn>,
    /// The invoker, with its HTTP clients and their pooled connections, built for the
    /// registry generation it names: every saga shares it until a registration.
    invoker: Mutex<Option<(u64, Arc<dyn Invoker>)>>,
    /// The validator (the curated catalog, its input schemas compiled) for the registry
    /// generation it names: every plan shares it until a registration.
    validator: Mutex<Option<(u64, Arc<PlanValidator>)>>,
    /// Every saga's driver (and its reporting), so that a stop can wait for them.
    drivers: TaskTracker,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").finish_non_exhaustive()
    }
}

/// The plan in a message: a data part that is the plan, or `{"plan": …}`.
pub(crate) fn plan_in(message: &Message) -> Option<&Value> {
    message.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(v) if v.get("plan").is_some() => v.get("plan"),
        PartContent::Data(v) if v.get("sagaId").is_some() => Some(v),
        _ => None,
    })
}

fn plan_of(message: &Message) -> Option<Value> {
    plan_in(message).cloned()
}

impl Executor {
    pub fn new(config: ExecutorConfig, tasks: Arc<TaskManager>) -> Arc<Self> {
        Arc::new(Self {
            slots: Slots::new(config.max_running_sagas),
            tasks,
            live: Mutex::new(HashMap::new()),
            taking_in: Arc::default(),
            invoker: Mutex::new(None),
            validator: Mutex::new(None),
            drivers: TaskTracker::new(),
            metrics: Arc::new(Metrics::new(config.undo_expiring_within)),
            config,
        })
    }

    /// The executor's metrics as OpenMetrics text, the gauges read now.
    pub async fn metrics_text(&self) -> Result<String> {
        let store = self.tasks.store();
        let waiting = TaskQuery {
            state: Some(TaskState::InputRequired),
            limit: 0,
            ..TaskQuery::default()
        };
        let now = Now {
            live: self.running(),
            running: self.slots.in_use(),
            waiting_for_a_slot: self.slots.waiting(),
            slots: self.slots.limit(),
            waiting_for_a_person: store.list(&waiting).await?.total,
            state_file_writable: store.write_failure().is_none(),
            at_ms: chrono::Utc::now().timestamp_millis(),
        };
        self.metrics.encode(now).map_err(Error::Metrics)
    }

    /// After `ExecutorConfig::shutdown`: waits up to `within` for every driver to return
    /// (each once the call it had out has answered and the answer is journaled). Returns
    /// the ids of the sagas' tasks still running when it gave up: their calls are answered
    /// by nobody, and at the next start recovery repeats each one whose skill is
    /// idempotent, under the same key, and asks a person about the others.
    pub async fn stopped(&self, within: Duration) -> Vec<String> {
        if let Err(e) = self.config.journal.retire().await {
            // The others count it alive until its lease ends, and claim what it gives
            // up a lease later.
            tracing::warn!(error = %e.chain(), "cannot tell the other replicas that this one stops");
        }
        self.drivers.close();
        if tokio::time::timeout(within, self.drivers.wait())
            .await
            .is_ok()
        {
            return Vec::new();
        }
        let mut running: Vec<String> = sync::lock(&self.live).keys().cloned().collect();
        running.sort();
        running
    }

    /// How many sagas have a driver running now.
    pub fn running(&self) -> usize {
        sync::lock(&self.live).len()
    }

    /// The saga slots: how many are taken, and who waits for one.
    pub fn slots(&self) -> &Arc<Slots> {
        &self.slots
    }

    /// The plans being taken in.
    pub fn taking_in(&self) -> &Arc<TakingIn> {
        &self.taking_in
    }

    /// What the executor runs with (the console reads the journal and the approvers).
    pub(crate) fn config(&self) -> &ExecutorConfig {
        &self.config
    }

    /// The sagas' A2A tasks.
    pub(crate) fn tasks(&self) -> &Arc<TaskManager> {
        &self.tasks
    }

    /// The counters and gauges `/metrics` shows.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    fn invoker(&self) -> Arc<dyn Invoker> {
        // Read before building: a registration racing this build only causes a rebuild.
        let generation = self.config.registry.generation();
        if let Some((built_for, invoker)) = sync::lock(&self.invoker).as_ref()
            && *built_for == generation
        {
            return invoker.clone();
        }
        let invoker = self.build_invoker();
        *sync::lock(&self.invoker) = Some((generation, invoker.clone()));
        invoker
    }

    /// The validator of the curated catalog as it stands, built once per registry
    /// generation.
    fn validator(&self) -> Result<Arc<PlanValidator>> {
        // Read before building: a registration racing this build only causes a rebuild.
        let generation = self.config.registry.generation();
        if let Some((built_for, validator)) = sync::lock(&self.validator).as_ref()
            && *built_for == generation
        {
            return Ok(validator.clone());
        }
        let validator = Arc::new(
            PlanValidator::new(
                self.config.registry.catalog()?,
                self.config.planner_keys.clone(),
            )
            .map_err(|e| Error::Refused(e.to_string()))?
            .with_principals(self.config.mandates.principals().clone())
            .with_max_parallel_steps(self.config.max_parallel_steps),
        );
        *sync::lock(&self.validator) = Some((generation, validator.clone()));
        Ok(validator)
    }

    fn build_invoker(&self) -> Arc<dyn Invoker> {
        let mut invoker = A2aInvoker::new();
        if let Ok(catalog) = self.config.registry.catalog() {
            for name in catalog.agents.keys() {
                let Some(url) = self
                    .config
                    .registry
                    .agent(name)
                    .filter(|a| matches!(a.kind, AgentKind::A2a { .. }))
                    .and_then(|a| a.url.clone())
                else {
                    continue;
                };
                if let Ok(client) = AgentClient::new(&url) {
                    invoker.add(
                        name.clone(),
                        Endpoint {
                            client,
                            bearer: self.config.credentials.get(name).cloned(),
                        },
                    );
                }
            }
        }
        let tools = Arc::new(ToolInvoker {
            a2a: invoker,
            mcp: self.config.mcp.clone(),
            registry: self.config.registry.clone(),
        });
        let counted: Arc<dyn Invoker> = Arc::new(CountedInvoker {
            inner: tools,
            metrics: self.metrics.clone(),
        });
        match &self.config.traces {
            Some(traces) => Arc::new(crate::telemetry::TracedInvoker {
                inner: counted,
                traces: traces.clone(),
            }),
            None => counted,
        }
    }

    /// The executor's account of a mandate (see `MandateBook::show`).
    pub async fn mandate(&self, mandate_id: &str) -> Result<Value> {
        self.config.mandates.show(mandate_id).await
    }
}

/// The executor as the hosting layer sees it.
#[derive(Debug, Clone)]
pub struct ExecutorAgent(pub Arc<Executor>);

impl std::ops::Deref for ExecutorAgent {
    type Target = Arc<Executor>;

    fn deref(&self) -> &Arc<Executor> {
        &self.0
    }
}

impl ExecutorAgent {
    fn is_approver(&self, caller: &str) -> bool {
        self.config.approvers.contains(caller)
    }

    /// Who decides, when `ctx`'s answer on `task` may be taken (`answers::check`); the
    /// refusal otherwise, logged. Nothing is recorded on the task before this passes.
    fn decider(
        &self,
        ctx: &RequestContext,
        message: &Message,
        task: &Task,
    ) -> Result<Decider, A2AError> {
        let checked = match answer_of(message) {
            Some(Ok(answer)) => answers::check(
                &ctx.caller,
                self.is_approver(&ctx.caller),
                task,
                answer,
                chrono::Utc::now().timestamp_millis(),
            ),
            Some(Err(refused)) => Err(refused),
            None => Err(A2AError::invalid_params(format!(
                "{}: a message on a saga's task must carry a data part {{\"resolution\": …}}",
                answers::RESOLUTION_INVALID
            ))),
        };
        if let Err(refused) = &checked {
            tracing::info!(
                task = ?task.id, caller = ?ctx.caller, refusal = ?refused.message,
                "an answer on a saga's task was refused; the saga does not move"
            );
        }
        checked
    }
}

#[async_trait]
impl Agent for ExecutorAgent {
    /// A saga's task is its planner's (docs/security.md): another planner gets
    /// TaskNotFound for it; approvers see every saga's task.
    fn scopes_tasks_to_callers(&self) -> bool {
        true
    }

    fn sees_every_task(&self, caller: &str) -> bool {
        self.is_approver(caller)
    }

    async fn accept(
        &self,
        ctx: &RequestContext,
        message: &Message,
        task: Option<&Task>,
    ) -> Result<Reply, A2AError> {
        if let Some(task) = task {
            self.decider(ctx, message, task)?;
            let handle = self.tasks.handle(&task.id, &task.context_id);
            // The answer's message joins the task in the saga's journal write that takes
            // it, by the saga's driver (`run`; forwarded to the replica that drives it).
            return match self.driven(&handle).await? {
                Driven::Here(..) => Ok(Reply::RecordedByRun),
                Driven::Elsewhere if self.forwards() => Ok(Reply::RecordedByRun),
                _ => Err(A2AError::internal(format!(
                    "task {}: {NOT_DRIVEN_HERE}; the answer was not given to it",
                    task.id
                ))),
            };
        }
        if self.is_approver(&ctx.caller) {
            tracing::info!(caller = ?ctx.caller, "an approver's plan was refused");
            return Err(A2AError::invalid_params(format!(
                "{}: an approver answers sagas; plans come from planners",
                answers::NOT_A_PLANNER
            )));
        }
        let Some(plan) = plan_in(message) else {
            return Err(A2AError::invalid_params(
                "execute-plan needs the signed plan as a data part",
            ));
        };
        // Read and verified here, once; `run` takes it from the context.
        let taken = self.read_plan(plan.clone());
        if let Ok(signer) = &taken.signature
            && let Some(own) = self.config.planner_key_ids.get(&ctx.caller)
            && own != signer
        {
            tracing::info!(caller = ?ctx.caller, signer = ?signer, "a plan signed by another planner was refused");
            return Err(A2AError::invalid_params(format!(
                "PLANNER_MISMATCH: the plan is signed by planner key {signer:?}, not by the caller's; a planner submits only the plans it signed"
            )));
        }
        // Nothing is read before the plan is taken in: the same plan sent again finds its
        // saga id taken by the accepting write (the journal's one key), and the request is
        // then answered with the task the plan runs on (`Executor::point_to`). A plan no
        // trusted planner signed is compared with no saga: it gets a task of its own,
        // which validation then refuses.
        ctx.accepted.keep(taken);
        Ok(Reply::CreatedByRun)
    }

    async fn run(&self, ctx: RequestContext, task: TaskHandle, message: Message) {
        // `accept` checked the answer; the engine checks an approval's binding again.
        if let Some(Ok(answer)) = answer_of(&message) {
            let decider = answer.decider(ctx.caller, Some(message.message_id.clone()));
            // `accept` refused an answer for a saga not driven here, unless another
            // replica drives it; one that ended since shows its end.
            if !self
                .resolve_here(
                    task.id(),
                    answer.resolution,
                    decider.clone(),
                    message.clone(),
                )
                .await
                && self.forwards()
            {
                let request = crate::forwarding::Request::Resolve {
                    resolution: answer.resolution,
                    decider,
                    message: Box::new(message),
                };
                match self.forward(&task, request).await {
                    Ok(Forwarded::Answered(Err(refused))) => tracing::info!(
                        task = %task.id(), refusal = ?refused.message,
                        "the replica driving the saga refused a forwarded answer"
                    ),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(
                        task = %task.id(), error = ?e.message,
                        "an answer could not be forwarded to the replica driving the saga"
                    ),
                }
            }
            return;
        }
        // `accept` let no message without a plan through, and read it; a request
        // handed over otherwise is read here.
        let taken = ctx
            .accepted
            .take::<TakenPlan>()
            .or_else(|| plan_of(&message).map(|plan| self.read_plan(plan)));
        // Not held while the saga runs: its task holds the message, its header the plan.
        drop(message);
        if let Some(taken) = taken {
            self.take_in(task, Some(taken)).await;
        }
    }

    /// A saga's task brought up to date from its journal: what the reports have not
    /// written yet (they gather progress) is shown all the same. A task whose saga ended
    /// shows what its finishing write stored; one without a saga, as stored.
    async fn shown(&self, stored: Task) -> Viewed {
        self.0.shown(stored).await
    }

    async fn cancel(&self, task: TaskHandle) -> Result<Task, A2AError> {
        match self.cancel_here(&task).await {
            Some(done) => done,
            None if self.forwards() => {
                match self
                    .forward(&task, crate::forwarding::Request::Cancel)
                    .await?
                {
                    Forwarded::Answered(Ok(())) => {
                        task.snapshot().await.map_err(agent_host::Error::into_a2a)
                    }
                    Forwarded::Answered(Err(refused)) => Err(refused.into()),
                    Forwarded::Ended => Err(A2AError::task_not_cancelable(task.id())),
                }
            }
            None => Err(A2AError::new(
                agent_host::sdk::error_code::TASK_NOT_CANCELABLE,
                format!(
                    "task {}: {NOT_DRIVEN_HERE}; nothing was canceled",
                    task.id()
                ),
            )),
        }
    }
}

impl Executor {
    /// A saga's task brought up to date from its journal: what the reports have not
    /// written yet (they gather progress) is shown all the same. A task whose saga ended
    /// shows what its finishing write stored; one without a saga, as stored. The view
    /// says how many of the saga's events it shows, as the reports' events do.
    pub(crate) async fn shown(&self, stored: Task) -> Viewed {
        if stored.status.state.is_terminal() {
            return Viewed::stored(stored);
        }
        match self.journal_view(&stored).await {
            Ok(Some(view)) => Viewed {
                task: view.task,
                seq: Some(view.seq),
            },
            Ok(None) => Viewed::stored(stored),
            Err(e) => {
                // The stored task is what the reports wrote: behind, never wrong.
                tracing::debug!(task = %stored.id, error = %e.chain(), "the task is shown as stored");
                Viewed::stored(stored)
            }
        }
    }

    /// `stored`, the task of an unfinished saga, with what the saga's journal shows and
    /// it lacks; `None` for a task without one, or whose saga the journal marks finished
    /// (its finishing write stored the task as it ended), or journaled in another format.
    async fn journal_view(&self, stored: &Task) -> Result<Option<crate::task_view::View>> {
        let journal = &self.config.journal;
        let Some((saga_id, false)) = journal.saga_of_task(&stored.id).await? else {
            return Ok(None);
        };
        let Some((header, entries)) = journal.load(&saga_id).await? else {
            return Ok(None);
        };
        if header.format != JOURNAL_FORMAT || header.task_id != stored.id {
            return Ok(None);
        }
        crate::task_view::view(stored, &header, &entries).map(Some)
    }

    /// Cancels the saga of `task` if this process drives it (or it never began, or waits
    /// for a slot here); `None` when its saga is unfinished and another process drives it.
    async fn cancel_here(&self, task: &TaskHandle) -> Option<Result<Task, A2AError>> {
        let canceled_with = |text: &'static str| async move {
            task.set_status(TaskState::Canceled, Some(agent_message(text, None)))
                .await
                .map_err(agent_host::Error::into_a2a)
        };
        // A plan still waiting for a slot has done nothing: it is dropped, not unwound.
        // One being begun is canceled once its saga is live, below.
        if self.taking_in.cancel(task.id()).await {
            let text = "canceled before its saga was journaled: nothing ran";
            return Some(canceled_with(text).await);
        }
        let (control, mut stops) = match self.driven(task).await {
            Ok(Driven::Here(control, stops)) => (control, stops),
            Ok(Driven::Never) => {
                let text = "canceled before a saga began: nothing ran";
                return Some(canceled_with(text).await);
            }
            Ok(Driven::Ended) => {
                return Some(Err(A2AError::task_not_cancelable(task.id())));
            }
            Ok(Driven::Elsewhere) => return None,
            Err(e) => return Some(Err(e)),
        };
        let (reply, answer) = oneshot::channel();
        stops.borrow_and_update();
        if control.send(Control::Cancel(reply)).await.is_err() {
            return Some(Err(A2AError::task_not_cancelable(task.id())));
        }
        if let Ok(Err(_refused)) = answer.await {
            return Some(Err(A2AError::task_not_cancelable(task.id())));
        }
        tracing::info!(task = %task.id(), "the cancel was accepted and journaled: the saga unwinds once its calls out answer");
        // "Canceled" means compensated: wait for the unwind to end (or to stop for a
        // person, when a compensation cannot be done). A saga that waited for a person
        // when the cancel came shows that pause until its next stop.
        let mut paused_before = true;
        loop {
            match task.snapshot().await.map(|t| t.status.state) {
                Ok(s) if s.is_terminal() => break,
                Ok(TaskState::InputRequired) if !paused_before => break,
                Err(_) => break,
                _ => {}
            }
            if stops.changed().await.is_err() {
                break;
            }
            paused_before = false;
        }
        Some(task.snapshot().await.map_err(agent_host::Error::into_a2a))
    }
}
