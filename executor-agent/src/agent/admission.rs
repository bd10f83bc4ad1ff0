//! Admission of a new plan: validation, a saga id that has one task (an identical plan
//! gets the existing task, other content `PLAN_CONFLICT`), and the accepting write that
//! journals the saga and creates its task: with its first step when a saga slot is free,
//! else with no entries, the saga then waiting for a slot (`Start::Accepted`).
//!
//! The rule "a saga id has one task" is kept by the journal, whose one key is the saga id:
//! a plan is taken in with nothing read first, and its accepting write is refused when
//! the id is taken. Only then, or when the plan cannot begin for another reason
//! (validation or its mandate refused it: the same plan sent again may be refused so),
//! does `admission` read the journal's header of the saga id (a plan waiting for a slot
//! is journaled too), and say whether the plan has a task already (the request is then
//! answered with that task), conflicts with the plan that has the id, or was refused on
//! its own.

use super::*;
use crate::saga::Command;

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

/// The wait before a plan is taken in again after its store failed, doubled each time
/// up to the cap (as a saga's driver waits for its journal).
/// The sequence of a saga's accepting write among its events (`task_view::View::seq`):
/// it journals the header alone, before any event.
const ACCEPTED: u64 = 0;

const FIRST_STORE_RETRY: Duration = Duration::from_millis(50);
const MAX_STORE_RETRY: Duration = Duration::from_secs(5);
/// How many attempts at taking a plan in may fail while the store says it can write
/// (it answers, but refuses this plan's writes) before the plan's task is failed with
/// the reason: about 3 s of attempts. Attempts while the store says it cannot write (a
/// database away, a state file that cannot be written) are not counted.
const ATTEMPTS_WHILE_THE_STORE_ANSWERS: u32 = 6;
/// How many times a plan is validated again because other replicas registered cards or
/// MCP servers while it was taken in, before its task fails (send it again).
const REGISTRY_CHANGES_AT_MOST: u32 = 3;

/// A new plan as taken in: integers read as integers (A2A data parts carry numbers as
/// doubles), its saga id, and what its planner signature said. Read once, where the plan
/// enters (`Executor::read_plan`): the A2A adapter's `accept` hands it to `run`, and every
/// attempt at taking it in reuses its signature's verdict.
#[derive(Debug, Clone)]
pub(crate) struct TakenPlan {
    /// Normalised, as its signature was checked; shared with the saga's header.
    pub(crate) plan: Arc<Value>,
    pub(crate) saga_id: String,
    /// The trusted planner key id that signed it, or why none did.
    pub(crate) signature: std::result::Result<String, shared_types::Error>,
}

/// A plan's saga, journaled, and what its driver starts with: a slot, or none yet (the
/// saga waits for one, `Start::Accepted`).
struct Begun {
    saga: Saga,
    start: Start,
    /// What its task, as the accepting write created it, lacks.
    unwritten: Unwritten,
    permit: Option<Permit>,
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
            plan: Arc::new(plan),
            saga_id,
            signature,
        }
    }

    /// Takes in the plan of a new task (`None`: the message had none), ending the task
    /// `FAILED` when it cannot be run. The task is created by the accepting write that
    /// journals the saga (or by the answer that refuses the plan), so a task given out
    /// always has its saga or its answer. While the store cannot write (a database
    /// restarting, a state file that cannot be written), the plan is taken in again and
    /// again, the sender's request waiting; once the store answers, a few more attempts
    /// are made (`ATTEMPTS_WHILE_THE_STORE_ANSWERS`) before the task fails with the
    /// reason; and a refusal or failure is written until it lands. Only a stop, or a
    /// cancel, ends the wait: nothing was journaled, and the sender is told so.
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
        let mut registry_changes = 0;
        loop {
            let failure = match self.begin_plan(&plan, &task).await {
                Ok(Some(begun)) => {
                    // Journaled: not held while the saga runs.
                    drop(plan);
                    self.metrics.saga_begun();
                    let Begun {
                        saga,
                        start,
                        unwritten,
                        permit,
                    } = begun;
                    self.launch(task, saga, start, unwritten, permit, Some(intake))
                        .await;
                    return Ok(());
                }
                Ok(None) => return Ok(()),
                Err(e) if e.is_store_failure() => e,
                Err(Error::RegistryChanged) if registry_changes < REGISTRY_CHANGES_AT_MOST => {
                    registry_changes += 1;
                    self.refresh_registry().await?;
                    continue;
                }
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

    /// One attempt at taking the plan in: the checks, and the accepting write. `None` once
    /// the task was answered otherwise (refused, or pointed at the task the same plan
    /// runs on).
    async fn begin_plan(
        self: &Arc<Self>,
        plan: &TakenPlan,
        task: &TaskHandle,
    ) -> Result<Option<Begun>> {
        let saga_id = plan.saga_id.as_str();
        let Some((typed, spec, registrations_read)) = self.checked(plan, task).await? else {
            return Ok(None);
        };
        let header = SagaHeader {
            format: JOURNAL_FORMAT,
            saga_id: typed.saga_id.clone(),
            plan_version: typed.plan_version,
            task_id: task.id().to_owned(),
            context_id: task.context_id().to_owned(),
            plan: plan.plan.clone(),
            spec: Arc::new(spec),
            registrations_read,
        };
        let saga = Saga::new(header.spec.clone());
        let permit = self.slots.try_take();
        let accepted = match permit {
            Some(_) => self.begin_now(task, &header, saga).await,
            None => self
                .accept_to_wait(task, &header, saga)
                .await
                .map(|(saga, start)| {
                    // The saga's id goes on its task with the start's write.
                    (saga, start, Unwritten::metadata(saga_metadata(&header)))
                }),
        };
        match accepted {
            Ok((saga, start, unwritten)) => Ok(Some(Begun {
                saga,
                start,
                unwritten,
                permit,
            })),
            // Validated against a registry another replica has changed since: again.
            Err(Error::RegistryChanged) => Err(Error::RegistryChanged),
            // Nothing was written. The same plan sent again finds its saga id taken (or
            // its mandate spent by the saga it began): it runs on the task it has.
            Err(e) => match self.admission(saga_id, &header.plan).await? {
                Admission::Existing { task_id, how } => {
                    self.point_to(task, &task_id, how).await;
                    Ok(None)
                }
                Admission::Conflict(violation) => {
                    self.reject(task, &[violation]).await;
                    Ok(None)
                }
                // Its mandate cannot cover it, or was revoked.
                Admission::Admit => match e {
                    Error::Mandate(violation) => {
                        self.reject(task, &[violation]).await;
                        Ok(None)
                    }
                    e => Err(e),
                },
            },
        }
    }

    /// The accepting write with a slot: the saga's header with its first step, its
    /// reservation and its task's creation (a task store of its own is written first),
    /// the task created as that step shows it. What the task lacks: nothing.
    async fn begin_now(
        &self,
        task: &TaskHandle,
        header: &SagaHeader,
        mut saga: Saga,
    ) -> Result<(Saga, Start, Unwritten)> {
        let journal = self.config.journal.as_ref();
        let first = first_step(&mut saga);
        let shown: Vec<Command> = first
            .commands
            .iter()
            .filter(|c| c.is_shown())
            .cloned()
            .collect();
        // A step that ends the saga is shown by its end's write.
        let ends = shown.iter().any(|c| matches!(c, Command::Finish { .. }));
        let statuses = if ends {
            Vec::new()
        } else {
            crate::task_view::shown_statuses(task.id(), &shown, &saga)
        };
        let state = statuses
            .last()
            .map_or(TaskState::Working, |(state, _)| state.clone());
        // Created with the saga's id, in the state its first step shows (working, or
        // waiting for a person): its row shows the state listings filter by from the
        // start, and is next written when that state changes (`progress`).
        let ledger =
            (!statuses.is_empty()).then(|| crate::task_view::ledger_artifact(saga.ledger()));
        let created = |created: &mut Task| {
            created.status = TaskStatus {
                state: TaskState::Working,
                message: None,
                timestamp: Some(chrono::Utc::now()),
            };
            let history = created.history.get_or_insert_with(Vec::new);
            for (state, message) in statuses {
                let message = message.map(|mut m| {
                    m.task_id = Some(task.id().to_owned());
                    m.context_id = Some(task.context_id().to_owned());
                    m
                });
                history.extend(message.clone());
                created.status.state = state;
                created.status.message = message;
            }
            if let Some(ledger) = ledger {
                agent_host::tasks::put_artifact(created, ledger);
            }
            created
                .metadata
                .get_or_insert_with(Default::default)
                .extend(saga_metadata(header));
        };
        let unwritten = if ends {
            Unwritten::metadata(saga_metadata(header))
        } else {
            Unwritten::created(state)
        };
        if !self.config.tasks_beside_journal {
            task.create_if_prepared(created).await?;
            let (saga, start) = begin_creating(journal, header, saga, first, None).await?;
            return Ok((saga, start, unwritten));
        }
        let (saga, start) = task
            .create_written_by(created, |creation| async move {
                begin_creating(journal, header, saga, first, creation.as_ref()).await
            })
            .await?;
        Ok((saga, start, unwritten))
    }

    /// The accepting write with every slot taken: the saga's header with no entries, its
    /// reservation (an accepted plan has reserved its budget while it waits), and its
    /// task's creation, which says why nothing happens yet. The saga then waits for a
    /// slot (`Start::Accepted`), journaled: a stop, a crash or a dead replica leaves it to
    /// the next owner, as any saga.
    async fn accept_to_wait(
        &self,
        task: &TaskHandle,
        header: &SagaHeader,
        saga: Saga,
    ) -> Result<(Saga, Start)> {
        let ahead = self.slots.waiting();
        let text = format!(
            "waiting for a saga slot: all {} are taken, {ahead} plan(s) waiting before this one",
            self.slots.limit()
        );
        if ahead == 0 {
            tracing::info!(
                task = task.id(),
                slots = self.slots.limit(),
                "every saga slot is taken: new sagas wait for one, their tasks SUBMITTED"
            );
        } else {
            tracing::debug!(task = task.id(), ahead, "the saga waits for a slot");
        }
        let waiting = vec![(TaskState::Submitted, Some(agent_message(text, None)))];
        let journal = self.config.journal.as_ref();
        if !self.config.tasks_beside_journal {
            task.change_with_statuses(|_| Ok(None), waiting, 0, Some(ACCEPTED))
                .await?;
            let epoch = journal.begin(header, &[]).await?;
            return Ok((saga, Start::Accepted(epoch)));
        }
        let epoch = std::sync::OnceLock::new();
        let given = &epoch;
        task.change_written_by(
            |_| Ok(None),
            waiting,
            0,
            Some(ACCEPTED),
            |creation| async move {
                let begun = journal.begin_creating(header, &[], Some(&creation)).await?;
                let _ = given.set(begun);
                Ok::<(), Error>(())
            },
        )
        .await?;
        let epoch = epoch
            .get()
            .copied()
            .ok_or_else(|| Error::Journal("an accepting write answered no epoch".into()))?;
        Ok((saga, Start::Accepted(epoch)))
    }

    /// The plan, typed, its saga's spec, and the registrations it was validated against
    /// on a shared registry (`Registry::registrations_read`), when it may run; `None` once
    /// `task` has been answered instead: refused with every violation, or pointed at the
    /// task on which the same plan already runs.
    ///
    /// On a registry replicas share, nothing is read for a plan that is valid: its
    /// accepting write is refused if a registration was made since the registry here was
    /// read (`Error::RegistryChanged`). A plan refused is validated again once what other
    /// replicas registered is read, when they registered anything.
    pub(super) async fn checked(
        &self,
        taken: &TakenPlan,
        task: &TaskHandle,
    ) -> Result<Option<(Plan, SagaSpec, Option<i64>)>> {
        let (saga_id, plan) = (taken.saga_id.as_str(), &taken.plan);
        let validate = || -> Result<_> {
            // Read before the validator: it knows every registration up to this one.
            let registrations = self.config.registry.registrations_read();
            let validator = self.validator()?;
            let report = cpu::measure(cpu::Phase::Validation, || {
                validator.validate_verified(plan, taken.signature.clone(), chrono::Utc::now())
            });
            Ok((registrations, validator, report))
        };
        let (mut registrations, mut validator, mut report) = validate()?;
        if !report.violations.is_empty() && registrations.is_some() {
            // Read by this refresh or by another plan's meanwhile: validated again when
            // there is anything newer than what the plan was validated against.
            self.refresh_registry().await?;
            if self.config.registry.registrations_read() != registrations {
                (registrations, validator, report) = validate()?;
            }
        }
        let mut violations = report.violations;
        // A refused plan may be one sent again whose task stands (its mandate has expired
        // since, say): it gets that task. Only a plan a trusted planner signed is compared
        // with the sagas there are: an unverified one learns nothing of them, and gets no
        // task but its own. A valid plan is compared only if its accepting write is
        // refused.
        if report.plan_signer.is_some() && !violations.is_empty() {
            match self.admission(saga_id, plan).await? {
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
        spec.bound_parallelism(self.config.max_parallel_steps);
        // A valid plan's mandate verified: its principal's grant is what the saga holds.
        // (Whether it was revoked is read in the accepting write, with its reservation.)
        if let (Some(principal_key), Some(raw)) = (report.mandate_signer, plan.get("mandate")) {
            let spends = validator.step_spends(&typed);
            spec.mandate = Some(MandateHold::of(&typed, raw, &principal_key, spends));
        }
        Ok(Some((typed, spec, registrations)))
    }

    /// Whether `plan` may begin under `saga_id`, has a task already, or conflicts with
    /// the plan that has the id: the saga journaled under it (its header; begun, or
    /// waiting for a slot). The id is unique in the journal, so of two plans taken in at
    /// once one accepting write lands and the other asks again. A task is never pointed
    /// at itself.
    pub(super) async fn admission(&self, saga_id: &str, plan: &Value) -> Result<Admission> {
        // The asking task's own saga included (it runs there already).
        let Some(accepted) = self.config.journal.header(saga_id).await? else {
            return Ok(Admission::Admit);
        };
        Ok(match compare_with_accepted(&accepted.plan, plan) {
            Resubmission::Identical => Admission::Existing {
                task_id: accepted.task_id,
                how: "already runs",
            },
            Resubmission::Conflict(violation) => Admission::Conflict(violation),
            Resubmission::Unrelated => Admission::Admit,
        })
    }

    /// Ends `task`, whose plan is the same as the one on `existing`, pointing at that
    /// task: the plan runs once. `how` says what the plan does there. A task's own saga
    /// already running there needs no answer.
    pub(super) async fn point_to(&self, task: &TaskHandle, existing: &str, how: &str) {
        if existing == task.id() {
            // The accepting write landed though it answered an error (the connection
            // lost after the commit): the saga is journaled under this process's lease,
            // and is taken over as any saga whose lease lapses.
            tracing::warn!(
                task = task.id(),
                "this plan's saga was journaled though its accepting write answered an error; it resumes when its sagas are next taken over (the next start, or another replica once its lease lapses)"
            );
            return;
        }
        // The request still waits for this task, which was never stored: it gets that one.
        if task.answered_by(existing).await {
            return;
        }
        let text = format!("the same plan {how} as task {existing}: follow that task");
        let data = json!({"existingTaskId": existing});
        self.answer(task, TaskState::Rejected, agent_message(text, Some(data)))
            .await;
    }
}
