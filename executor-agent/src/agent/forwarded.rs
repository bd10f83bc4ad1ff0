//! Cancels and answers between replicas (`crate::forwarding`): a replica that receives
//! one for a saga another drives forwards it and waits for the owner's answer; the owner
//! carries out what is forwarded for its sagas exactly as if it had been sent to it.

use agent_host::sdk::error_code;

use super::*;
use crate::forwarding::{Answer, Forwarding, LOOK_AGAIN_AFTER, Refusal, Request};

/// How many open requests one look takes up at most.
const OPEN_AT_ONCE: i64 = 256;

/// How many looks that find the saga ended, with its request taken but not answered,
/// before the forwarding replica stops waiting (the taker stopped before it answered).
const ENDED_LOOKS: u32 = 3;

/// What came of a forwarded request.
pub(super) enum Forwarded {
    /// The owner's answer.
    Answered(Answer),
    /// The saga ended before a replica carried the request out.
    Ended,
}

impl From<A2AError> for Refusal {
    fn from(e: A2AError) -> Self {
        Self {
            code: e.code,
            message: e.message,
        }
    }
}

impl From<Refusal> for A2AError {
    fn from(refused: Refusal) -> Self {
        A2AError::new(refused.code, refused.message)
    }
}

impl Executor {
    fn forwarding(&self) -> Option<&Arc<Forwarding>> {
        self.config.forwarding.as_ref()
    }

    /// Whether a cancel or an answer for a saga driven elsewhere is forwarded to its
    /// owner (replicas on one database) rather than refused.
    pub(super) fn forwards(&self) -> bool {
        self.forwarding().is_some()
    }

    /// Carries out the requests the other replicas announce for the sagas driven here,
    /// until the shutdown. Requests whose announcement was missed are found by
    /// `carry_out_open`.
    pub async fn serve_forwarded(self: Arc<Self>) {
        let Some(mut incoming) = self.forwarding().and_then(|f| f.incoming()) else {
            return;
        };
        loop {
            let (id, task_id) = tokio::select! {
                () = self.config.shutdown.cancelled() => return,
                next = incoming.recv() => match next {
                    Some(open) => open,
                    None => return,
                },
            };
            if self.live_control(&task_id).is_some() {
                self.spawn_carry_out(id);
            }
        }
    }

    /// Takes up the requests left for the sagas driven here (missed announcements, and
    /// those left for a saga this replica took over); how many.
    pub async fn carry_out_open(self: &Arc<Self>) -> Result<usize> {
        let Some(forwarding) = self.forwarding() else {
            return Ok(0);
        };
        let mut taken_up = 0;
        for (id, task_id) in forwarding.open(OPEN_AT_ONCE).await? {
            if self.live_control(&task_id).is_some() {
                self.spawn_carry_out(id);
                taken_up += 1;
            }
        }
        Ok(taken_up)
    }

    fn spawn_carry_out(self: &Arc<Self>, id: i64) {
        let me = self.clone();
        // Tracked with the drivers: a stop waits for it as for the saga it acts on.
        self.drivers.spawn(async move { me.carry_out(id).await });
    }

    async fn carry_out(self: Arc<Self>, id: i64) {
        let Some(forwarding) = self.forwarding().cloned() else {
            return;
        };
        let taken = match forwarding.take(id).await {
            Ok(Some(taken)) => taken,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(request = id, error = %e.chain(), "cannot take a request forwarded by another replica");
                return;
            }
        };
        tracing::info!(
            task = %taken.task_id, request = id, kind = ?taken.request,
            "carrying out a request forwarded by another replica"
        );
        let task = self.tasks.handle(&taken.task_id, &taken.context_id);
        let answer = match taken.request {
            Request::Cancel => self
                .cancel_here(&task)
                .await
                .map(|done| done.map(|_| ()).map_err(Refusal::from)),
            Request::Resolve { .. } if taken.taken_before => Some(Err(Refusal {
                code: error_code::INVALID_PARAMS,
                message: "the replica that took this answer stopped before it gave it, and the saga may have moved on since; look at the task and answer again if it still waits".into(),
            })),
            Request::Resolve {
                resolution,
                decider,
                message,
            } => self.resolve_forwarded(&task, resolution, decider, *message).await,
        };
        let written = match &answer {
            Some(answer) => forwarding.answer(id, answer).await,
            // Not driven here any more: for the replica that drives it now.
            None => forwarding.give_back(id).await,
        };
        if let Err(e) = written {
            tracing::warn!(request = id, error = %e.chain(), "cannot answer a request forwarded by another replica");
        }
    }

    /// A forwarded answer, given to the saga as if it was sent here; `None` if it is not
    /// driven here (the replica driving it now gets the request).
    async fn resolve_forwarded(
        &self,
        task: &TaskHandle,
        resolution: crate::saga::Resolution,
        decider: Decider,
        message: Message,
    ) -> Option<Answer> {
        self.resolve_here(task.id(), resolution, decider, message)
            .await
            .then_some(Ok(()))
    }

    /// Gives a person's answer, which came in `message`, to the saga of `task_id` if it
    /// is driven here, and waits for its next stop; whether it was driven here. The saga's
    /// task shows the message once the saga journaled the answer, in the same write: its
    /// driver is the one writer of its task, on whichever replica the answer came to.
    pub(super) async fn resolve_here(
        &self,
        task_id: &str,
        resolution: crate::saga::Resolution,
        decider: Decider,
        message: Message,
    ) -> bool {
        let Some((control, mut stops)) = self.live_control(task_id) else {
            return false;
        };
        stops.borrow_and_update();
        if control
            .send(Control::Resolve {
                resolution,
                decider: Some(decider),
                message: Some(Box::new(message)),
            })
            .await
            .is_ok()
        {
            let _ = stops.changed().await;
        }
        true
    }

    /// Leaves `request` for the saga of `task` (driven by another replica) and waits for
    /// the answer of the replica that carries it out.
    pub(super) async fn forward(
        &self,
        task: &TaskHandle,
        request: Request,
    ) -> Result<Forwarded, A2AError> {
        let Some(forwarding) = self.forwarding() else {
            return Err(A2AError::internal(format!(
                "task {}: {NOT_DRIVEN_HERE}",
                task.id()
            )));
        };
        let unreachable = |e: Error| {
            A2AError::internal(format!(
                "{}; try again",
                e.reply("reaching the replica that drives the saga")
            ))
        };
        let (id, told) = forwarding
            .send(task.id(), task.context_id(), &request)
            .await
            .map_err(unreachable)?;
        // Whatever ends the wait, nothing waits for this answer any more.
        let _forget = ForgetOnDrop(forwarding, id);
        // Fused: the answer's announcement wakes the wait once; later looks are timed.
        let mut told = futures::FutureExt::fuse(told);
        let mut ended_looks = 0;
        loop {
            tokio::select! {
                () = self.config.shutdown.cancelled() => {
                    return Err(A2AError::internal(format!(
                        "task {}: the executor is stopping; the request stays for the replica that drives the saga",
                        task.id()
                    )));
                }
                _ = &mut told => {}
                () = tokio::time::sleep(LOOK_AGAIN_AFTER) => {}
            }
            if let Some(answer) = forwarding.answer_of(id).await.map_err(unreachable)? {
                return Ok(Forwarded::Answered(answer));
            }
            if matches!(self.driven(task).await?, Driven::Ended | Driven::Never) {
                if forwarding.withdraw(id).await.map_err(unreachable)? {
                    return Ok(Forwarded::Ended);
                }
                ended_looks += 1;
                if ended_looks >= ENDED_LOOKS {
                    return Ok(Forwarded::Ended);
                }
            }
        }
    }
}

struct ForgetOnDrop<'a>(&'a Forwarding, i64);

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.forget(self.1);
    }
}
