//! Admission of a new plan: validation, a saga id that has one task (an identical plan
//! gets the existing task, other content `PLAN_CONFLICT`), a saga slot, and the
//! accepting write that begins the saga.

use super::*;

impl Executor {
    /// Takes in the plan of a new task (`None`: the message had none), ending the task
    /// `FAILED` when it cannot be run.
    pub(super) async fn take_in(self: &Arc<Self>, task: TaskHandle, plan: Option<Value>) {
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
                Error::Journal(_) | Error::Fenced { .. } => {
                    tracing::error!(task = ?task.id(), error = ?e.to_string(), "a plan could not be run");
                    "the plan could not be run: the executor failed to record it (its log has the reason, under this task's id)".to_owned()
                }
            };
            let _ = task
                .set_status(TaskState::Failed, Some(agent_message(text, None)))
                .await;
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
        let _ = task
            .set_status(TaskState::Rejected, Some(agent_message(text, Some(data))))
            .await;
    }

    pub(super) async fn intake(self: &Arc<Self>, task: TaskHandle, mut plan: Value) -> Result<()> {
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
    pub(super) async fn checked(
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
    pub(super) async fn slot_for(
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
    pub(super) async fn already_runs(
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
    pub(super) async fn point_to(&self, task: &TaskHandle, existing: &str, how: &str) {
        let text = format!("the same plan {how} as task {existing}: follow that task");
        let data = json!({"existingTaskId": existing});
        let _ = task
            .set_status(TaskState::Rejected, Some(agent_message(text, Some(data))))
            .await;
    }
}
