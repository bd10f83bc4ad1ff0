//! Admission of a new plan: validation, a saga id that has one task (an identical plan
//! gets the existing task, other content `PLAN_CONFLICT`), a saga slot, and the
//! accepting write that begins the saga.
//!
//! The rule "a saga id has one task" is decided in one place, `admission`: it reads the
//! journal's header of the saga id and the plans waiting for a slot, and says whether
//! the plan may begin, has a task already, or conflicts with the plan that has the id.
//! It is asked before the task exists (the A2A adapter answers with the existing task),
//! when the plan is validated if it was not asked where the plan entered (a plan taken
//! in again after a restart, or from another replica), when it waits for a slot (holding
//! the id), and when the accepting write fails (another task may have begun the saga
//! meanwhile).

use super::*;

/// What admission decided for a plan and its saga id.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Admission {
    /// Nobody else has this saga id: the plan may begin.
    Admit,
    /// The same plan has a task already (`task_id`, perhaps the asking one): it runs
    /// there once. `how` says what it does there.
    Existing { task_id: String, how: &'static str },
    /// Another plan has this saga id (`PLAN_CONFLICT`).
    Conflict(Violation),
}

/// Whether admission holds the saga id for a plan that will wait for a slot.
#[derive(Clone, Copy)]
pub(super) enum Asking<'a> {
    /// Before the plan has a task (the A2A adapter).
    Untasked,
    /// For the plan of this task.
    For(&'a str),
    /// For the plan of this intake, which holds the saga id while it waits for a slot.
    Holding(&'a Intake),
}

/// The wait before a plan is taken in again after its store failed, doubled each time
/// up to the cap (as a saga's driver waits for its journal).
const FIRST_STORE_RETRY: Duration = Duration::from_millis(50);
const MAX_STORE_RETRY: Duration = Duration::from_secs(5);
/// How many attempts at taking a plan in may fail while the store says it can write
/// (it answers, but refuses this plan's writes) before the plan's task is failed with
/// the reason: about 3 s of attempts. Attempts while the store says it cannot write (a
/// database away, a state file that cannot be written) are not counted.
const ATTEMPTS_WHILE_THE_STORE_ANSWERS: u32 = 6;

/// A new plan as taken in: integers read as integers (A2A data parts carry numbers as
/// doubles), its saga id, and what its planner signature said. Read once, where the plan
/// enters (`Executor::read_plan`): the A2A adapter's `accept` hands it to `run`, and the
/// checks before and after a wait for a slot reuse its signature's verdict.
#[derive(Debug, Clone)]
pub(crate) struct TakenPlan {
    pub(crate) plan: Value,
    pub(crate) saga_id: String,
    /// The trusted planner key id that signed it, or why none did.
    pub(crate) signature: std::result::Result<String, shared_types::Error>,
    /// Whether `admission` already let it begin, where it entered: it is not asked
    /// again. Should another plan take the saga id meanwhile, the accepting write finds
    /// it (the id is unique in the journal) and admission then decides, as after any
    /// refused begin.
    pub(crate) admitted: bool,
}

/// A plan's saga, begun in the journal, and what its driver starts with.
struct Begun {
    saga: Saga,
    start: Start,
    metadata: Vec<(String, Value)>,
    permit: Permit,
}

impl Executor {
    /// Reads a plan where it enters: integers as integers, and its signature checked
    /// against the trusted planner keys (the signature covers the canonical form, in
    /// which `25000.0` and `25000` are one number).
    pub(super) fn read_plan(&self, mut plan: Value) -> TakenPlan {
        shared_types::json::normalize_integers(&mut plan);
        let saga_id = plan
            .get("sagaId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let signature = cpu::measure(cpu::Phase::PlanVerification, || {
            self.config.planner_keys.verify(&plan)
        });
        TakenPlan {
            plan,
            saga_id,
            signature,
            admitted: false,
        }
    }

    /// Takes in the plan of a new task (`None`: the message had none), ending the task
    /// `FAILED` when it cannot be run. A plan whose task was answered `SUBMITTED` begins
    /// or ends: while the store cannot write (a database restarting, a state file that
    /// cannot be written), the plan is taken in again and again; once it answers, a few
    /// more attempts are made (`ATTEMPTS_WHILE_THE_STORE_ANSWERS`) before the task fails
    /// with the reason; and a refusal or failure is written until it lands. Only a stop,
    /// or a cancel, ends the wait; the task then stays `SUBMITTED`, and the next start
    /// (or, on a shared store, another replica once this one's hold lapses) takes it in.
    pub(super) async fn take_in(self: &Arc<Self>, task: TaskHandle, plan: Option<TakenPlan>) {
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
            // What the journal or the disk said is for the operator, not the caller.
            let text = if e.is_callers() {
                format!("the plan could not be run: {e}")
            } else {
                tracing::error!(task = ?task.id(), "a plan could not be run");
                e.reply("recording the plan")
            };
            self.answer(&task, TaskState::Failed, agent_message(text, None))
                .await;
        }
    }

    /// Writes the answer to a plan on its task (refused, failed, pointed elsewhere),
    /// again and again while the store fails, until it lands, the task was written by
    /// another meanwhile (a cancel ended it), or the executor stops.
    pub(super) async fn answer(&self, task: &TaskHandle, state: TaskState, message: Message) {
        let mut wait = FIRST_STORE_RETRY;
        loop {
            match task.set_status(state.clone(), Some(message.clone())).await {
                Ok(_) => return,
                Err(agent_host::Error::Store(why)) => {
                    tracing::warn!(
                        task = task.id(), error = %why, retry_in_ms = wait.as_millis() as u64,
                        "cannot write the answer to a plan yet; written once the store answers"
                    );
                }
                Err(e) => {
                    tracing::info!(task = task.id(), error = %e, "the answer to a plan was not written");
                    return;
                }
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.config.shutdown.cancelled() => return,
            }
            wait = (wait * 2).min(MAX_STORE_RETRY);
        }
    }

    pub(super) async fn reject(&self, task: &TaskHandle, violations: &[Violation]) {
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
        self.answer(task, TaskState::Rejected, agent_message(text, Some(data)))
            .await;
    }

    /// Takes the plan in until its saga is live or it is answered otherwise, through
    /// store failures (see `take_in`).
    pub(super) async fn intake(self: &Arc<Self>, task: TaskHandle, plan: TakenPlan) -> Result<()> {
        let saga_id = plan.saga_id.clone();
        let intake = self.taking_in.start(task.id());
        let mut wait = FIRST_STORE_RETRY;
        let mut refused_while_answering = 0;
        loop {
            let failure = match self.begin_plan(&plan, &task, &intake).await {
                Ok(Some(begun)) => {
                    self.metrics.saga_begun();
                    let Begun {
                        saga,
                        start,
                        metadata,
                        permit,
                    } = begun;
                    self.launch(task, saga, start, metadata, Some(permit), Some(intake))
                        .await;
                    return Ok(());
                }
                Ok(None) => return Ok(()),
                Err(e) if e.is_store_failure() => e,
                Err(e) => return Err(e),
            };
            if self.tasks.store().write_failure().is_none() {
                refused_while_answering += 1;
                if refused_while_answering >= ATTEMPTS_WHILE_THE_STORE_ANSWERS {
                    return Err(failure);
                }
            }
            // The store failed: the plan waits for it (a cancel drops it meanwhile).
            loop {
                tracing::warn!(
                    task = task.id(), saga = %saga_id, error = %failure.chain(),
                    retry_in_ms = wait.as_millis() as u64,
                    "cannot take the plan in yet; it is taken in again once the store answers"
                );
                let canceled = intake.waiting();
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = canceled.cancelled() => return Ok(()),
                    () = self.config.shutdown.cancelled() => return Ok(()),
                }
                if !intake.wait_over() {
                    return Ok(());
                }
                wait = (wait * 2).min(MAX_STORE_RETRY);
                // The begin may have been written with its answer lost.
                match self.resume_begun_meanwhile(&saga_id, task.id()).await {
                    Ok(true) => return Ok(()),
                    Ok(false) => break,
                    Err(e) if e.is_store_failure() => continue,
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// After a store failure: if the saga of this plan was begun on its task (the begin
    /// was written, and its answer lost; or another replica took the plan in), it is
    /// driven, not begun again: resumed here when this process still holds it at its
    /// first epoch or nobody does, left to the replica that drives it otherwise. `false`
    /// when no saga was begun for this task.
    async fn resume_begun_meanwhile(
        self: &Arc<Self>,
        saga_id: &str,
        task_id: &str,
    ) -> Result<bool> {
        let journal = &self.config.journal;
        match journal.header(saga_id).await? {
            Some(header) if header.task_id == task_id => {}
            _ => return Ok(false),
        }
        if self.live_control(task_id).is_some() {
            return Ok(true);
        }
        // Held by this process at the epoch `begin` gave: given up, then claimed anew.
        journal.release(saga_id, 1).await?;
        let now = chrono::Utc::now().timestamp_millis();
        match journal.claim(saga_id, now, Claim::IfLapsed).await? {
            Some(epoch) => {
                tracing::info!(saga = %saga_id, task = %task_id, "a plan's saga was begun before the store failed; resumed");
                self.resume_claimed(vec![(saga_id.to_owned(), epoch)], now)
                    .await?;
            }
            None => tracing::info!(
                saga = %saga_id, task = %task_id,
                "a plan's saga was begun before the store failed, and is driven by another replica; left to it"
            ),
        }
        Ok(true)
    }

    /// One attempt at taking the plan in: a slot, the checks, and the accepting write.
    /// `None` once the task was answered otherwise (refused, pointed at the task the
    /// same plan runs on, canceled while it waited for a slot, or the executor stops).
    async fn begin_plan(
        self: &Arc<Self>,
        plan: &TakenPlan,
        task: &TaskHandle,
        intake: &Intake,
    ) -> Result<Option<Begun>> {
        let saga_id = plan.saga_id.as_str();
        let permit = match self.slots.try_take() {
            Some(permit) => permit,
            None => {
                // A plan that cannot run is refused now, not after the wait.
                if self.checked(plan, task).await?.is_none() {
                    return Ok(None);
                }
                match self.slot_for(saga_id, &plan.plan, task, intake).await {
                    Some(permit) => permit,
                    None => return Ok(None),
                }
            }
        };
        // Checked again after a wait: the registry, or the clock, may have moved on.
        let Some((typed, spec)) = self.checked(plan, task).await? else {
            return Ok(None);
        };
        let header = SagaHeader {
            format: JOURNAL_FORMAT,
            saga_id: typed.saga_id.clone(),
            plan_version: typed.plan_version,
            task_id: task.id().to_owned(),
            context_id: task.context_id().to_owned(),
            plan: plan.plan.clone(),
            spec: spec.clone(),
        };
        let journal = self.config.journal.as_ref();
        let saga = Saga::new(spec);
        // The task's creation rides with the begin (the request that sent the plan is
        // answered once both are durable); a task store of its own is written first.
        let begun = if self.config.tasks_beside_journal {
            let header = &header;
            task.create_written_by(|creation| async move {
                begin_creating(journal, header, saga, creation.as_ref()).await
            })
            .await
        } else {
            match task.create_if_prepared().await {
                Ok(()) => begin(journal, &header, saga).await,
                Err(e) => Err(e.into()),
            }
        };
        match begun {
            // The saga's id goes on its task with the first report, in the same write (a
            // write of its own before it cost every saga one more durable task write).
            Ok((saga, start)) => Ok(Some(Begun {
                saga,
                start,
                metadata: saga_metadata(&header),
                permit,
            })),
            // Its mandate cannot cover it, or was revoked: nothing was written.
            Err(Error::Mandate(violation)) => {
                self.reject(task, &[violation]).await;
                Ok(None)
            }
            // The same plan, sent again, may have begun on another task meanwhile.
            Err(e) => match self
                .admission(saga_id, &header.plan, Asking::For(task.id()))
                .await?
            {
                Admission::Admit => Err(e),
                Admission::Existing { task_id, how } => {
                    self.point_to(task, &task_id, how).await;
                    Ok(None)
                }
                Admission::Conflict(violation) => {
                    self.reject(task, &[violation]).await;
                    Ok(None)
                }
            },
        }
    }

    /// The plan, typed, and its saga's spec, when it may run; `None` once `task` has been
    /// answered instead: refused with every violation, or pointed at the task on which
    /// the same plan already runs.
    pub(super) async fn checked(
        &self,
        taken: &TakenPlan,
        task: &TaskHandle,
    ) -> Result<Option<(Plan, SagaSpec)>> {
        let (saga_id, plan) = (taken.saga_id.as_str(), &taken.plan);
        self.refresh_registry().await?;
        let validator = self.validator()?;
        let report = cpu::measure(cpu::Phase::Validation, || {
            validator.validate_verified(plan, taken.signature.clone(), chrono::Utc::now())
        });
        let mut violations = report.violations;
        // Only a plan a trusted planner signed is compared with the sagas there are: an
        // unverified one learns nothing of them, and gets no task but its own. One
        // admitted where it entered is not asked again.
        if report.plan_signer.is_some() && !taken.admitted {
            match self
                .admission(saga_id, plan, Asking::For(task.id()))
                .await?
            {
                Admission::Admit => {}
                Admission::Conflict(v) => violations.push(v),
                Admission::Existing { task_id, how } => {
                    self.point_to(task, &task_id, how).await;
                    return Ok(None);
                }
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
    pub(super) async fn slot_for(
        &self,
        saga_id: &str,
        plan: &Value,
        task: &TaskHandle,
        intake: &Intake,
    ) -> Option<Permit> {
        match self.admission(saga_id, plan, Asking::Holding(intake)).await {
            Ok(Admission::Admit) => {}
            Ok(Admission::Existing { task_id, how }) => {
                self.point_to(task, &task_id, how).await;
                return None;
            }
            Ok(Admission::Conflict(violation)) => {
                self.reject(task, &[violation]).await;
                return None;
            }
            // Not reached when holding (the holds are in memory); the checks before and
            // after the wait read the journal.
            Err(_) => {}
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
        permit.filter(|_| intake.wait_over())
    }

    /// Whether `plan` may begin under `saga_id`, has a task already, or conflicts with
    /// the plan that has the id: the saga begun under it (its journal header), else the
    /// plan waiting for a slot under it. Holding (`Asking::Holding`), the id is taken for
    /// the intake's plan in the same step as the lookup of the waiting plans, so two
    /// plans never both wait under one id. A task is never pointed at itself.
    pub(super) async fn admission(
        &self,
        saga_id: &str,
        plan: &Value,
        asking: Asking<'_>,
    ) -> Result<Admission> {
        let own_task = match asking {
            Asking::Untasked => None,
            Asking::For(task_id) => Some(task_id),
            Asking::Holding(intake) => Some(intake.task_id()),
        };
        let decided = |other: String, with: &Value, how| match compare_with_accepted(with, plan) {
            Resubmission::Identical => Some(Admission::Existing {
                task_id: other,
                how,
            }),
            Resubmission::Conflict(violation) => Some(Admission::Conflict(violation)),
            Resubmission::Unrelated => None,
        };
        // Begun: the asking task's own saga included (it runs there already).
        if let Some(accepted) = self.config.journal.header(saga_id).await?
            && let Some(decision) = decided(accepted.task_id, &accepted.plan, "already runs")
        {
            return Ok(decision);
        }
        // Waiting for a slot: the asking task's own hold is its own, not another's.
        let waiting = match asking {
            Asking::Holding(intake) => intake.hold(saga_id, plan).err(),
            _ => self.taking_in.held(saga_id),
        };
        Ok(waiting
            .filter(|held| Some(held.task_id.as_str()) != own_task)
            .and_then(|held| decided(held.task_id, &held.plan, "already waits for a saga slot"))
            .unwrap_or(Admission::Admit))
    }

    /// Ends `task`, whose plan is the same as the one on `existing`, pointing at that
    /// task: the plan runs once. `how` says what the plan does there. A task's own saga
    /// already running there needs no answer.
    pub(super) async fn point_to(&self, task: &TaskHandle, existing: &str, how: &str) {
        if existing == task.id() {
            // Taken in elsewhere while this process was away (paused past its hold on
            // the task, or cut off): the saga is driven there.
            tracing::info!(
                task = task.id(),
                "this plan's saga was begun on its task by another replica meanwhile; left to it"
            );
            return;
        }
        let text = format!("the same plan {how} as task {existing}: follow that task");
        let data = json!({"existingTaskId": existing});
        self.answer(task, TaskState::Rejected, agent_message(text, Some(data)))
            .await;
    }
}
