//! The executor as an A2A agent (skill `execute-plan`): plan intake with full static
//! validation, one driver per accepted saga reporting on the saga's task (once it has a
//! saga slot), a person's `resolution` messages, cancellation, recovery of unfinished
//! sagas at start, and a stop that lets the calls out answer first.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_host::cpu;
use agent_host::sdk::{A2AError, Message, PartContent, Task, TaskState};
use agent_host::store::TaskQuery;
use agent_host::{
    Agent, AgentClient, Reply, RequestContext, TaskHandle, TaskManager, agent_message,
};
use async_trait::async_trait;
use serde_json::{Value, json};
use shared_types::validate::{Resubmission, compare_with_accepted};
use shared_types::{Plan, PlanValidator, TrustStore, Violation};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::answers::{self, answer_of};
use crate::driver::{Control, Start, begin, drive};
use crate::error::{Error, Result};
use crate::invoke::{A2aInvoker, Endpoint, Invoker, ToolInvoker};
use crate::journal::{JOURNAL_FORMAT, Journal, SagaHeader};
use crate::mandates::{MandateBook, MandateHold, Revoked};
use crate::mcp::invoker::McpInvoker;
use crate::metrics::{CountedInvoker, MeteredReporter, Metrics, Now};
use crate::recovery::replay;
use crate::registry::AgentKind;
use crate::registry::Registry;
use crate::report::{TaskReporter, saga_metadata, show_saga};
use crate::saga::model::Phase;
use crate::saga::{Decider, Saga, SagaSpec};
use crate::slots::{Permit, SlotHold, Slots};
use crate::sync;
use crate::taking_in::{Intake, TakingIn};

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
    /// The executor's credential for each tool agent, by agent name.
    pub credentials: HashMap<String, String>,
    /// Sessions with registered MCP servers (holding the same credentials).
    pub mcp: Arc<McpInvoker>,
    /// How long a saga's progress gathers before its task write (`report::GATHER_PROGRESS`
    /// by default).
    pub gather_progress: Duration,
    /// How many sagas may make progress at once (`DEFAULT_MAX_RUNNING_SAGAS` by
    /// default); the others wait for a slot (see `slots`).
    pub max_running_sagas: usize,
    /// How near its deadline an open undo handle counts as expiring on `/metrics`
    /// (`metrics::DEFAULT_UNDO_EXPIRING_WITHIN` by default).
    pub undo_expiring_within: Duration,
    /// Cancelled to stop: every driver then waits for the call it has out, journals the
    /// answer and returns (see `Executor::stopped`).
    pub shutdown: CancellationToken,
}

/// Saga slots unless configured otherwise: far more sagas than a two-core executor
/// drives at full speed, few enough that a burst of plans does not become a burst of
/// calls on every tool agent at once.
pub const DEFAULT_MAX_RUNNING_SAGAS: usize = 1024;

/// A running saga: how to reach its driver, and a signal that changes at every stop.
/// Said to a caller whose cancel or answer names a saga that is journaled, unfinished and
/// not driven by this process (its driver stopped on a journal it could not write).
const NOT_DRIVEN_HERE: &str = "its saga is journaled and not finished, but this executor \
     process does not drive it; it resumes when the executor next starts";

/// Where a task's saga is: read from the journal when this process does not drive it,
/// never assumed.
enum Driven {
    /// Driven here: its control and its stops.
    Here(mpsc::Sender<Control>, watch::Receiver<u64>),
    /// Begun for this task, not finished, and not driven by this process.
    Elsewhere,
    /// Begun for this task and finished.
    Ended,
    /// No saga was begun for this task: nothing ran.
    Never,
}

struct Live {
    control: mpsc::Sender<Control>,
    stops: watch::Receiver<u64>,
    /// The principal's key and the mandate's id the saga runs under.
    mandate: Option<(String, String)>,
}

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
fn plan_in(message: &Message) -> Option<&Value> {
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
        self.metrics
            .encode(now)
            .map_err(|e| Error::Journal(format!("cannot encode the metrics: {e}")))
    }

    /// After `ExecutorConfig::shutdown`: waits up to `within` for every driver to return
    /// (each once the call it had out has answered and the answer is journaled). Returns
    /// the ids of the sagas' tasks still running when it gave up: their calls are answered
    /// by nobody, and at the next start recovery repeats each one whose skill is
    /// idempotent, under the same key, and asks a person about the others.
    pub async fn stopped(&self, within: Duration) -> Vec<String> {
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

    /// Forgets the sagas that finished more than `keep` before `now_ms` and whose plans'
    /// mandates expired before it (a plan sent again is then refused, never run twice):
    /// their tasks first, then their journal, so that a crash in between leaves a saga
    /// to forget at the next sweep rather than a task nobody deletes. Returns how many.
    pub async fn forget_finished(&self, keep: Duration, now_ms: i64) -> Result<usize> {
        const BATCH: usize = 256;
        let keep_ms = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
        let finished_before = now_ms.saturating_sub(keep_ms);
        let journal = &self.config.journal;
        let mut forgotten = 0;
        loop {
            let batch = journal.forgettable(finished_before, now_ms, BATCH).await?;
            if batch.is_empty() {
                return Ok(forgotten);
            }
            let tasks: Vec<String> = batch.iter().map(|f| f.task_id.clone()).collect();
            self.tasks.store().delete(&tasks).await?;
            let sagas: Vec<String> = batch.into_iter().map(|f| f.saga_id).collect();
            journal.forget(&sagas).await?;
            forgotten += sagas.len();
        }
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
            .with_principals(self.config.mandates.principals().clone()),
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
        Arc::new(CountedInvoker {
            inner: tools,
            metrics: self.metrics.clone(),
        })
    }

    /// Starts a driver for `saga` reporting on `task` (`metadata` goes with the first
    /// report, again for a resumed saga), holding `permit` or waiting for a slot; returns
    /// once the saga first stops. `intake`, for a new plan, ends once the saga is live.
    async fn launch(
        self: &Arc<Self>,
        task: TaskHandle,
        saga: Saga,
        start: Start,
        metadata: Vec<(String, Value)>,
        permit: Option<Permit>,
        intake: Option<Intake>,
    ) {
        let mut first_stop = self.start_driver(task, saga, start, metadata, permit, intake);
        let _ = first_stop.changed().await;
    }

    /// Registers `saga` as live here and spawns its driver; returns the saga's stops. Once
    /// this returns, a cancel or an answer for the saga reaches its driver.
    fn start_driver(
        self: &Arc<Self>,
        task: TaskHandle,
        saga: Saga,
        start: Start,
        metadata: Vec<(String, Value)>,
        permit: Option<Permit>,
        intake: Option<Intake>,
    ) -> watch::Receiver<u64> {
        let (control, rx) = mpsc::channel(8);
        let (reporter, reporting) =
            TaskReporter::start(task.clone(), metadata, self.config.gather_progress);
        let reporter = Arc::new(MeteredReporter::new(reporter, self.metrics.clone(), &saga));
        let stops = reporting.stops();
        let first_stop = stops.clone();
        let mandate = saga
            .spec
            .mandate
            .as_ref()
            .map(|h| (h.principal_key.clone(), h.mandate_id.clone()));
        sync::lock(&self.live).insert(
            task.id().to_owned(),
            Live {
                control,
                stops,
                mandate,
            },
        );
        // A cancel that waited for the saga to start finds it live now.
        drop(intake);
        let (journal, invoker, me, task_id) = (
            self.config.journal.clone(),
            self.invoker(),
            self.clone(),
            task.id().to_owned(),
        );
        let saga_id = saga.spec.saga_id.clone();
        let stop = self.config.shutdown.clone();
        let slot = SlotHold::new(self.slots.clone(), permit);
        self.drivers.spawn(cpu::measured(cpu::Phase::Saga, async move {
            let driven = drive(
                saga_id, saga, start, journal, invoker, reporter, rx, stop, slot,
            )
            .await;
            // The saga's own reports reach its task before anything else is said on it,
            // and before it stops being live (a cancel then finds the task as it ends).
            reporting.finished().await;
            if let Ok(Phase::Done { ending }) = &driven {
                me.metrics.saga_ended(*ending);
            }
            if let Err(e) = driven {
                // Only a stop ends a driver whose journal cannot be written. The task
                // keeps what it showed: marking it failed would run ahead of the journal,
                // where the saga is unfinished and resumes at the next start.
                tracing::error!(
                    task = %task_id, error = %e,
                    "the saga stopped with its journal unwritable; it resumes from the journal at the next start"
                );
            }
            sync::lock(&me.live).remove(&task_id);
        }));
        first_stop
    }

    /// Records a principal's signed revocation; every running saga under that mandate
    /// then unwinds unless past its pivot (as on expiry). Returns what was revoked and
    /// how many running sagas were told.
    pub async fn revoke(&self, document: &Value) -> Result<(Revoked, usize)> {
        let revoked = self.config.mandates.revoke(document).await?;
        tracing::info!(
            principal_key = ?revoked.principal_key,
            mandate = ?revoked.mandate_id,
            "a principal revoked a mandate: new plans under it are refused, its sagas before their pivot unwind"
        );
        let key = (revoked.principal_key.clone(), revoked.mandate_id.clone());
        let told = self
            .tell_revoked_under(|mandate| mandate == Some(&key))
            .await;
        Ok((revoked, told))
    }

    /// Tells the running sagas whose task id passes `which` that their mandate was revoked.
    async fn tell_revoked(&self, which: impl Fn(&str) -> bool) -> usize {
        self.tell(|id, _| which(id)).await
    }

    async fn tell_revoked_under(&self, which: impl Fn(Option<&(String, String)>) -> bool) -> usize {
        self.tell(|_, mandate| which(mandate)).await
    }

    async fn tell(&self, which: impl Fn(&str, Option<&(String, String)>) -> bool) -> usize {
        let controls: Vec<mpsc::Sender<Control>> = sync::lock(&self.live)
            .iter()
            .filter(|(id, l)| which(id, l.mandate.as_ref()))
            .map(|(_, l)| l.control.clone())
            .collect();
        let mut told = 0;
        for control in controls {
            if control.send(Control::MandateRevoked).await.is_ok() {
                told += 1;
            }
        }
        told
    }

    fn live_control(&self, task_id: &str) -> Option<(mpsc::Sender<Control>, watch::Receiver<u64>)> {
        sync::lock(&self.live)
            .get(task_id)
            .map(|l| (l.control.clone(), l.stops.clone()))
    }

    /// Where the saga of `task` is. A saga that is not live here is looked up in the
    /// journal, by the saga id of the plan the task was created with.
    async fn driven(&self, task: &TaskHandle) -> Result<Driven, A2AError> {
        if let Some((control, stops)) = self.live_control(task.id()) {
            return Ok(Driven::Here(control, stops));
        }
        let unreadable = |e: &dyn std::fmt::Display| {
            tracing::error!(task = %task.id(), error = %e, "cannot tell where a task's saga is");
            A2AError::internal("the executor cannot read its journal now; try again")
        };
        let shown = task.snapshot().await.map_err(|e| unreadable(&e))?;
        if shown.status.state.is_terminal() {
            return Ok(Driven::Ended);
        }
        let saga_id = shown
            .history
            .as_deref()
            .unwrap_or_default()
            .first()
            .and_then(plan_in)
            .and_then(|plan| plan.get("sagaId"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let Some(saga_id) = saga_id else {
            return Ok(Driven::Never);
        };
        let journal = &self.config.journal;
        match journal.header(&saga_id).await.map_err(|e| unreadable(&e))? {
            Some(header) if header.task_id == task.id() => {}
            _ => return Ok(Driven::Never),
        }
        Ok(
            match journal
                .is_finished(&saga_id)
                .await
                .map_err(|e| unreadable(&e))?
            {
                Some(false) => Driven::Elsewhere,
                Some(true) => Driven::Ended,
                None => Driven::Never,
            },
        )
    }

    /// The executor's account of a mandate (see `MandateBook::show`).
    pub async fn mandate(&self, mandate_id: &str) -> Result<Value> {
        self.config.mandates.show(mandate_id).await
    }

    /// Resumes every unfinished saga from the journal, and takes in again every plan
    /// whose task was created but whose saga never reached the journal (call once at
    /// start). Returns how many sagas it resumed and how many plans it took in again.
    pub async fn recover(self: &Arc<Self>) -> Result<(usize, usize)> {
        let ids = self.config.journal.unfinished().await?;
        let now = chrono::Utc::now().timestamp_millis();
        let mut begun = HashSet::new();
        let mut resumed = Vec::new();
        for saga_id in &ids {
            let Some((header, entries)) = self.config.journal.load(saga_id).await? else {
                continue;
            };
            if header.format != JOURNAL_FORMAT {
                // Replayed under rules it was not written by, a saga could make other calls
                // under the keys it journaled: nothing is resumed.
                return Err(Error::Journal(format!(
                    "saga {saga_id} was journaled in format {}, and this executor reads journal \
                     format {JOURNAL_FORMAT} only; start the executor release that wrote it",
                    header.format
                )));
            }
            begun.insert(header.task_id.clone());
            let recovered = replay(header.spec.clone(), &entries, now);
            let task = self.tasks.handle(&header.task_id, &header.context_id);
            resumed.push((task, saga_metadata(&header), recovered));
        }
        // On the tasks before anyone can read them (the executor serves once this returns),
        // in writes that share commits: a saga may have died before its first report.
        futures::future::join_all(
            resumed
                .iter()
                .map(|(task, metadata, _)| show_saga(task, metadata)),
        )
        .await;
        for (task, metadata, recovered) in resumed {
            let saga = recovered.saga.clone();
            // A revocation recorded before the saga heard of it (the process stopped in
            // between) is told again.
            let revoked = match &recovered.saga.spec.mandate {
                Some(hold) => {
                    self.config
                        .mandates
                        .is_revoked(&hold.principal_key, &hold.mandate_id)
                        .await?
                }
                None => false,
            };
            self.metrics.saga_resumed();
            let task_id = task.id().to_owned();
            // Live before `recover` returns, and so before the executor serves: a cancel
            // or an answer that comes first finds the saga's driver.
            self.start_driver(
                task,
                saga,
                Start::Resumed(Box::new(recovered)),
                metadata,
                None,
                None,
            );
            if revoked {
                self.tell_revoked(|id| id == task_id).await;
            }
        }
        let orphans = self.submitted_but_not_begun(&begun).await?;
        for task in &orphans {
            let handle = self.tasks.handle(&task.id, &task.context_id);
            let plan = task
                .history
                .as_deref()
                .unwrap_or_default()
                .first()
                .and_then(plan_of);
            let me = self.clone();
            self.drivers
                .spawn(async move { me.take_in(handle, plan).await });
        }
        Ok((ids.len(), orphans.len()))
    }

    /// Tasks still `SUBMITTED` with no saga in the journal: the process stopped after the
    /// hosting layer created the task (the request was acknowledged) and before the plan's
    /// saga was begun. A task whose saga began is among `begun`, or has ended.
    async fn submitted_but_not_begun(&self, begun: &HashSet<String>) -> Result<Vec<Task>> {
        const PAGE: usize = 100;
        let mut orphans = Vec::new();
        let mut offset = 0;
        loop {
            let query = TaskQuery {
                state: Some(TaskState::Submitted),
                offset,
                limit: PAGE,
                ..TaskQuery::default()
            };
            let page = self.tasks.store().list(&query).await?;
            let listed = page.tasks.len();
            orphans.extend(page.tasks.into_iter().filter(|t| !begun.contains(&t.id)));
            if listed < PAGE {
                return Ok(orphans);
            }
            offset += PAGE;
        }
    }

    /// Takes in the plan of a new task (`None`: the message had none), ending the task
    /// `FAILED` when it cannot be run.
    async fn take_in(self: &Arc<Self>, task: TaskHandle, plan: Option<Value>) {
        let outcome = match plan {
            Some(plan) => self.intake(task.clone(), plan).await,
            None => Err(Error::Refused(
                "the task's first message has no plan".into(),
            )),
        };
        if let Err(Error::Mandate(violation)) = &outcome {
            self.reject(&task, std::slice::from_ref(violation)).await;
            return;
        }
        if let Err(e) = outcome {
            let text = match e {
                Error::Refused(_) | Error::Spec(_) | Error::Mandate(_) => {
                    format!("the plan could not be run: {e}")
                }
                // What the journal or the disk said is for the operator, not the caller.
                Error::Journal(_) => {
                    tracing::error!(task = ?task.id(), error = ?e.to_string(), "a plan could not be run");
                    "the plan could not be run: the executor failed to record it (its log has the reason, under this task's id)".to_owned()
                }
            };
            let _ = task
                .set_status(TaskState::Failed, Some(agent_message(text, None)))
                .await;
        }
    }

    async fn reject(&self, task: &TaskHandle, violations: &[Violation]) {
        let mut text = format!(
            "the plan was refused with {} violation(s):",
            violations.len()
        );
        for v in violations {
            text.push_str(&format!(
                "\n{} {}: {}",
                v.code,
                v.step.as_deref().unwrap_or("-"),
                v.message
            ));
        }
        let codes: Vec<&str> = violations.iter().map(|v| v.code.as_str()).collect();
        tracing::info!(task = task.id(), ?codes, "a plan was refused");
        let data = json!({"violations": violations});
        let _ = task
            .set_status(TaskState::Rejected, Some(agent_message(text, Some(data))))
            .await;
    }

    async fn intake(self: &Arc<Self>, task: TaskHandle, mut plan: Value) -> Result<()> {
        shared_types::json::normalize_integers(&mut plan);
        let saga_id = plan
            .get("sagaId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let intake = self.taking_in.start(task.id());
        let permit = match self.slots.try_take() {
            Some(permit) => permit,
            None => {
                // A plan that cannot run is refused now, not after the wait.
                if self.checked(&saga_id, &plan, &task).await?.is_none() {
                    return Ok(());
                }
                match self.slot_for(&saga_id, &plan, &task, &intake).await {
                    Some(permit) => permit,
                    None => return Ok(()),
                }
            }
        };
        // Checked again after a wait: the registry, or the clock, may have moved on.
        let Some((typed, spec)) = self.checked(&saga_id, &plan, &task).await? else {
            return Ok(());
        };
        let header = SagaHeader {
            format: JOURNAL_FORMAT,
            saga_id: typed.saga_id.clone(),
            plan_version: typed.plan_version,
            task_id: task.id().to_owned(),
            context_id: task.context_id().to_owned(),
            plan,
            spec: spec.clone(),
        };
        let (saga, start) =
            match begin(self.config.journal.as_ref(), &header, Saga::new(spec)).await {
                Ok(begun) => begun,
                // Its mandate cannot cover it, or was revoked: nothing was written.
                Err(Error::Mandate(violation)) => {
                    self.reject(&task, &[violation]).await;
                    return Ok(());
                }
                // The same plan, sent again, may have begun on another task meanwhile.
                Err(e) => match self.already_runs(&saga_id, &header.plan, &task).await? {
                    Some(Resubmission::Identical) => return Ok(()),
                    Some(Resubmission::Conflict(violation)) => {
                        self.reject(&task, &[violation]).await;
                        return Ok(());
                    }
                    _ => return Err(e),
                },
            };
        self.metrics.saga_begun();
        // The saga's id goes on its task with the first report, in the same write (a
        // write of its own before it cost every saga one more durable task write).
        let metadata = saga_metadata(&header);
        self.launch(task, saga, start, metadata, Some(permit), Some(intake))
            .await;
        Ok(())
    }

    /// The plan, typed, and its saga's spec, when it may run; `None` once `task` has been
    /// answered instead: refused with every violation, or pointed at the task on which
    /// the same plan already runs.
    async fn checked(
        &self,
        saga_id: &str,
        plan: &Value,
        task: &TaskHandle,
    ) -> Result<Option<(Plan, SagaSpec)>> {
        let validator = self.validator()?;
        let signature = cpu::measure(cpu::Phase::PlanVerification, || validator.verify(plan));
        let report = cpu::measure(cpu::Phase::Validation, || {
            validator.validate_verified(plan, signature, chrono::Utc::now())
        });
        let mut violations = report.violations;
        // Only a plan a trusted planner signed is compared with the sagas there are: an
        // unverified one learns nothing of them, and gets no task but its own.
        if report.plan_signer.is_some() {
            match self.already_runs(saga_id, plan, task).await? {
                Some(Resubmission::Identical) => return Ok(None),
                Some(Resubmission::Conflict(v)) => violations.push(v),
                _ => {}
            }
        }
        let Some(typed) = report.plan.filter(|_| violations.is_empty()) else {
            self.reject(task, &violations).await;
            return Ok(None);
        };
        let mut spec = SagaSpec::new(&typed, validator.catalog())?;
        // A valid plan's mandate verified: its principal's grant is what the saga holds.
        // (Whether it was revoked is read in the accepting write, with its reservation.)
        if let (Some(principal_key), Some(raw)) = (report.mandate_signer, plan.get("mandate")) {
            let spends = validator.step_spends(&typed);
            spec.mandate = Some(MandateHold::of(&typed, raw, &principal_key, spends));
        }
        Ok(Some((typed, spec)))
    }

    /// A slot for the accepted plan of `task`, once one is free; `None` if the task was
    /// canceled meanwhile (the cancel ended it) or the executor stops (the task stays
    /// `SUBMITTED`, and the next start takes its plan in again), or if the same saga
    /// already waits on another task (`task` was answered: pointed at that task when the
    /// plan is the same, refused with `PLAN_CONFLICT` when it differs).
    async fn slot_for(
        &self,
        saga_id: &str,
        plan: &Value,
        task: &TaskHandle,
        intake: &Intake,
    ) -> Option<Permit> {
        if let Err(held) = intake.hold(saga_id, plan) {
            match compare_with_accepted(&held.plan, plan) {
                Resubmission::Identical => {
                    let how = "already waits for a saga slot";
                    self.point_to(task, &held.task_id, how).await;
                    return None;
                }
                Resubmission::Conflict(violation) => {
                    self.reject(task, &[violation]).await;
                    return None;
                }
                Resubmission::Unrelated => {}
            }
        }
        let canceled = intake.waiting();
        let ahead = self.slots.waiting();
        // Whoever watches the task learns why nothing happens yet (a task canceled
        // meanwhile has ended, and keeps its end).
        let text = format!(
            "waiting for a saga slot: all {} are taken, {ahead} plan(s) waiting before this one",
            self.slots.limit()
        );
        let _ = task
            .set_status(TaskState::Submitted, Some(agent_message(text, None)))
            .await;
        if ahead == 0 {
            tracing::info!(
                task = task.id(),
                slots = self.slots.limit(),
                "every saga slot is taken: new sagas wait for one, their tasks SUBMITTED"
            );
        } else {
            tracing::debug!(task = task.id(), ahead, "the saga waits for a slot");
        }
        let permit = tokio::select! {
            biased;
            () = canceled.cancelled() => None,
            () = self.config.shutdown.cancelled() => None,
            permit = self.slots.take() => Some(permit),
        };
        permit.filter(|_| intake.slot_taken())
    }

    /// How `plan` compares with the saga already begun under `saga_id`, if any. When it is
    /// the same plan on another task (sent again while the first was being taken in, or
    /// left behind by a crash), `task` is ended pointing at that task: the plan runs once.
    async fn already_runs(
        &self,
        saga_id: &str,
        plan: &Value,
        task: &TaskHandle,
    ) -> Result<Option<Resubmission>> {
        let Some(accepted) = self.config.journal.header(saga_id).await? else {
            return Ok(None);
        };
        let compared = compare_with_accepted(&accepted.plan, plan);
        if compared == Resubmission::Identical && accepted.task_id != task.id() {
            self.point_to(task, &accepted.task_id, "already runs").await;
        }
        Ok(Some(compared))
    }

    /// Ends `task`, whose plan is the same as the one on `existing`, pointing at that
    /// task: the plan runs once. `how` says what the plan does there.
    async fn point_to(&self, task: &TaskHandle, existing: &str, how: &str) {
        let text = format!("the same plan {how} as task {existing}: follow that task");
        let data = json!({"existingTaskId": existing});
        let _ = task
            .set_status(TaskState::Rejected, Some(agent_message(text, Some(data))))
            .await;
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
    /// A saga's task is its planner's (DESIGN.md §12): another planner gets
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
            return match self.driven(&handle).await? {
                Driven::Here(..) => Ok(Reply::Task),
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
        // Copied only when a transport turned its integers into doubles.
        let plan = if shared_types::json::has_integral_doubles(plan) {
            let mut plan = plan.clone();
            shared_types::json::normalize_integers(&mut plan);
            std::borrow::Cow::Owned(plan)
        } else {
            std::borrow::Cow::Borrowed(plan)
        };
        let saga_id = plan
            .get("sagaId")
            .and_then(Value::as_str)
            .unwrap_or_default();
        // An existing task is answered only to a plan a trusted planner signed; anything
        // else gets a task of its own, which validation then refuses.
        let verified = cpu::measure(cpu::Phase::PlanVerification, || {
            self.config.planner_keys.verify(&plan)
        });
        let Ok(signer) = verified else {
            return Ok(Reply::Task);
        };
        if let Some(own) = self.config.planner_key_ids.get(&ctx.caller)
            && *own != signer
        {
            tracing::info!(caller = ?ctx.caller, signer = ?signer, "a plan signed by another planner was refused");
            return Err(A2AError::invalid_params(format!(
                "PLANNER_MISMATCH: the plan is signed by planner key {signer:?}, not by the caller's; a planner submits only the plans it signed"
            )));
        }
        if let Ok(Some(accepted)) = self.config.journal.header(saga_id).await
            && compare_with_accepted(&accepted.plan, &plan) == Resubmission::Identical
        {
            return Ok(Reply::Existing {
                task_id: accepted.task_id,
            });
        }
        // The same plan sent again while it waits for a slot, not begun yet.
        if let Some(held) = self.taking_in.held(saga_id)
            && compare_with_accepted(&held.plan, &plan) == Resubmission::Identical
        {
            return Ok(Reply::Existing {
                task_id: held.task_id,
            });
        }
        Ok(Reply::Task)
    }

    async fn run(&self, ctx: RequestContext, task: TaskHandle, message: Message) {
        // `accept` checked the answer; the engine checks an approval's binding again.
        if let Some(Ok(answer)) = answer_of(&message) {
            let decider = Decider {
                by: ctx.caller,
                approval: answer.approval,
            };
            // `accept` refused an answer for a saga not driven here; one that ended since
            // shows its end.
            if let Some((control, mut stops)) = self.live_control(task.id()) {
                stops.borrow_and_update();
                let resolve = Control::Resolve(answer.resolution, Some(decider));
                if control.send(resolve).await.is_ok() {
                    let _ = stops.changed().await;
                }
            }
            return;
        }
        // `accept` let no message without a plan through.
        if let Some(plan) = plan_of(&message) {
            self.take_in(task, Some(plan)).await;
        }
    }

    async fn cancel(&self, task: TaskHandle) -> Result<Task, A2AError> {
        // A plan still waiting for a slot has done nothing: it is dropped, not unwound.
        // One being begun is canceled once its saga is live, below.
        if self.taking_in.cancel(task.id()).await {
            let text = "canceled while it waited for a saga slot: nothing ran";
            return task
                .set_status(TaskState::Canceled, Some(agent_message(text, None)))
                .await
                .map_err(agent_host::Error::into_a2a);
        }
        let (control, mut stops) = match self.driven(&task).await? {
            Driven::Here(control, stops) => (control, stops),
            Driven::Never => {
                let text = "canceled before a saga began: nothing ran";
                return task
                    .set_status(TaskState::Canceled, Some(agent_message(text, None)))
                    .await
                    .map_err(agent_host::Error::into_a2a);
            }
            Driven::Ended => return Err(A2AError::task_not_cancelable(task.id())),
            Driven::Elsewhere => {
                return Err(A2AError::new(
                    agent_host::sdk::error_code::TASK_NOT_CANCELABLE,
                    format!(
                        "task {}: {NOT_DRIVEN_HERE}; nothing was canceled",
                        task.id()
                    ),
                ));
            }
        };
        let (reply, answer) = oneshot::channel();
        stops.borrow_and_update();
        if control.send(Control::Cancel(reply)).await.is_err() {
            return Err(A2AError::task_not_cancelable(task.id()));
        }
        match answer.await {
            Ok(Err(_refused)) => Err(A2AError::task_not_cancelable(task.id())),
            _ => {
                // "Canceled" means compensated: wait for the unwind to end (or to stop
                // for a person, when a compensation cannot be done). A saga that waited
                // for a person when the cancel came shows that pause until its next stop.
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
                task.snapshot().await.map_err(agent_host::Error::into_a2a)
            }
        }
    }
}
