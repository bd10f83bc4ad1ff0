//! The saga driver: the thin async loop around the pure engine. For every event it steps
//! the engine, journals the event together with the intents of the calls it decided (one
//! durable write), and only then performs the commands: making the calls, arming timers,
//! reporting progress. Nothing is acted on before it is durable. Told to stop, it waits
//! for the answers of the calls it has out, journals them, and returns without acting on
//! what the answer led to: recovery makes that next call at the next start, as a decision
//! journaled but never acted on, so a planned stop repeats no call and asks no one.
//! A journal write that fails is tried again, with a growing wait, until it is durable or
//! the driver is told to stop: the saga waits, and nothing is acted on meanwhile.
//! The driver holds one of the executor's saga slots while it acts, and gives it back
//! while the saga waits for a person.
//! Every call and every timer of a saga runs on a task the driver owns (one `JoinSet`):
//! when the driver returns, what is still waiting (a mandate-expiry timer an hour away,
//! a call the engine gave up on) is aborted with it, so nothing outlives its saga.

use agent_host::cpu;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::authority::{Lapse, Revocations, entries_of, expired, guarded, lapse, not_made};
use crate::error::Result;
use crate::invoke::{CallContext, Invoker, trace_id};
use crate::journal::{Ending, Entry, Epoch, Journal, SagaHeader, Unrevoked};
use crate::recovery::Recovered;
use crate::saga::model::Phase;
use crate::saga::{
    CallOutcome, Command, Decider, Event, Invocation, MandateEndEffect, Resolution, Saga, Target,
    Timer,
};
use crate::slots::SlotHold;

/// Where progress goes (the executor's A2A task; a log in tests).
#[async_trait]
pub trait Reporter: Send + Sync + 'static {
    /// Called with every command that people should see (reports, pauses, the end), and
    /// the saga as it stands after it (`Saga::ledger` when the ledger is shown).
    async fn report(&self, command: &Command, saga: &Saga);

    /// The commands people should see from one step of the engine, in order. A reporter
    /// that keeps a durable view may show them in one write; by default each is reported.
    async fn report_all(&self, shown: &[Command], saga: &Saga) {
        for command in shown {
            self.report(command, saga).await;
        }
    }

    /// Shows what a new saga's first step shows, journaled by its begin, whose write
    /// created the saga's task as the step shows it: nothing is written. By default,
    /// reported.
    async fn begun(&self, shown: &[Command], saga: &Saga) {
        self.report_all(shown, saga).await;
    }

    /// Makes a step durable through `write` (its append, or the saga's end) and shows
    /// what people see of it (`shown`, in order, with the saga as it stands after it): a
    /// reporter keeping a durable view has `write` carry that view's write when the step
    /// changes it, so the view never shows what the journal lacks. A failure is returned
    /// as is, and `written` called again with the same step. By default (a reporter
    /// keeping nothing durable) the write, then the report.
    async fn written(&self, shown: &[Command], saga: &Saga, write: &StepWrite<'_>) -> Result<()> {
        write.write(None).await?;
        if !shown.is_empty() {
            self.report_all(shown, saga).await;
        }
        Ok(())
    }
}

/// A step of a saga, to be made durable in one journal write: its entries appended
/// (`SagaLog::append_carrying`) or, for the step that ended the saga, its end
/// (`SagaLog::end`: the entries, its finish mark, its mandate settled).
pub struct StepWrite<'a> {
    pub(crate) journal: &'a dyn Journal,
    pub(crate) saga_id: &'a str,
    pub(crate) epoch: Epoch,
    pub(crate) entries: &'a [Entry],
    /// How the saga ended, for the step that ended it.
    pub(crate) ending: Option<Ending>,
    /// The message of the person's answer the step took, as it came: it joins the
    /// saga's task with the step (`Reporter::written`).
    pub(crate) answer: Option<&'a agent_host::sdk::Message>,
    /// The mandate the write requires unrevoked, when it carries forward calls and the
    /// journal checks revocations in its writes (`SagaLog::checks_revocations`).
    pub(crate) unrevoked: Option<Unrevoked<'a>>,
}

impl StepWrite<'_> {
    /// Whether this step ends the saga.
    pub fn ends(&self) -> bool {
        self.ending.is_some()
    }

    /// Makes the write, carrying `task`'s write when given (the task store keeps its
    /// tables in the journal's database); all of it or none.
    pub async fn write(&self, task: Option<&agent_host::store::TaskWrite>) -> Result<()> {
        match &self.ending {
            Some(ending) => {
                self.journal
                    .end(self.saga_id, self.epoch, self.entries, ending, task)
                    .await
            }
            None => {
                self.journal
                    .append_carrying(self.saga_id, self.epoch, self.entries, task, self.unrevoked)
                    .await
            }
        }
    }
}

/// Requests from outside the saga: a person's answer, or a cancel.
#[derive(Debug)]
pub enum Control {
    /// A person's answer, who gave it (for an approval, what it approves), and the A2A
    /// message it came in, which the saga's task shows once the answer is journaled.
    Resolve {
        resolution: Resolution,
        decider: Option<Decider>,
        message: Option<Box<agent_host::sdk::Message>>,
    },
    /// Answered with `Err(reason)` when the saga can no longer be canceled.
    Cancel(oneshot::Sender<std::result::Result<(), String>>),
    /// The principal revoked the saga's mandate. Answered once the saga's journal holds
    /// it (from then on no forward attempt at or before its pivot starts), with what it
    /// does to the saga.
    MandateRevoked(oneshot::Sender<MandateEndEffect>),
}

/// Milliseconds since the Unix epoch: the only clock the saga sees, given as event data.
fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// How a saga comes to its driver, and the epoch its journal writes are made under.
#[derive(Debug)]
pub enum Start {
    /// Journaled by `begin` with its header; these are the commands of its first step.
    Begun(Vec<Command>, Epoch),
    /// Rebuilt from the journal after a restart, and claimed.
    Resumed(Box<Recovered>, Epoch),
    /// Journaled by its accepting write with no entries (`SagaLog::begin_creating`), while
    /// every slot was taken: it starts once it gets one, in the line of new plans. A
    /// cancel or a revocation meanwhile ends it where it stands, having made no call.
    Accepted(Epoch),
}

/// A new saga's first step (`Event::Start`), taken before its begin is written (the
/// engine is pure), so that the write creating its task can show it.
pub struct FirstStep {
    event: Event,
    pub commands: Vec<Command>,
}

/// Steps `saga` through `Event::Start`.
pub fn first_step(saga: &mut Saga) -> FirstStep {
    let event = Event::Start { now_ms: now_ms() };
    let commands = saga.step(event.clone());
    FirstStep { event, commands }
}

/// Starts a new saga: steps it through `Event::Start` and journals its header together
/// with that first step, in one durable write. The saga is accepted once this returns;
/// `drive` then performs the commands.
pub async fn begin(
    journal: &dyn Journal,
    header: &SagaHeader,
    mut saga: Saga,
) -> Result<(Saga, Start)> {
    let first = first_step(&mut saga);
    begin_creating(journal, header, saga, first, None).await
}

/// `begin` of a saga stepped through its `first` step already, the same write creating
/// the saga's task when given (`SagaLog::begin_creating`).
pub async fn begin_creating(
    journal: &dyn Journal,
    header: &SagaHeader,
    saga: Saga,
    first: FirstStep,
    task: Option<&agent_host::store::TaskWrite>,
) -> Result<(Saga, Start)> {
    let FirstStep { event, commands } = first;
    let epoch = journal
        .begin_creating(header, &entries_of(event, &commands), task)
        .await?;
    Ok((saga, Start::Begun(commands, epoch)))
}

/// What one saga is driven with: its journal, the tools, where progress goes, the
/// requests from outside, the stop, its slot, and where bookkeeping after its end runs.
pub struct Driver {
    pub saga_id: String,
    pub journal: Arc<dyn Journal>,
    pub invoker: Arc<dyn Invoker>,
    pub reporter: Arc<dyn Reporter>,
    pub control: mpsc::Receiver<Control>,
    pub stop: CancellationToken,
    pub slot: SlotHold,
    /// Where the saga's mandate is read at the moment of effect (`authority`).
    pub revocations: Arc<dyn Revocations>,
}

impl Driver {
    /// Runs one saga until it ends, from where `begin` or recovery left it; or, once
    /// `stop` is cancelled, until the calls it has out have answered and the answers are
    /// journaled. Acts only while it holds a slot (`slot`, taken first if not held): a
    /// saga stopped before it got one has done nothing here. Returns the phase the saga
    /// is in. A saga left unfinished by the stop is released (its lease given up), so
    /// that another owner may take it at once instead of after the lease lapses.
    pub async fn run(self, saga: Saga, start: Start) -> Result<Phase> {
        let (journal, saga_id, stop) = (
            self.journal.clone(),
            self.saga_id.clone(),
            self.stop.clone(),
        );
        let epoch = match &start {
            Start::Begun(_, epoch) | Start::Resumed(_, epoch) | Start::Accepted(epoch) => *epoch,
        };
        let driven = self.drive(saga, start).await;
        if stop.is_cancelled()
            && matches!(&driven, Ok(phase) if !matches!(phase, Phase::Done { .. }))
            && let Err(e) = journal.release(&saga_id, epoch).await
        {
            // Its lease lapses instead, and the next owner claims it then.
            tracing::warn!(saga = %saga_id, error = %e.chain(), "cannot release the stopped saga");
        }
        driven
    }

    async fn drive(self, mut saga: Saga, start: Start) -> Result<Phase> {
        let Driver {
            saga_id,
            journal,
            invoker,
            reporter,
            mut control,
            stop,
            mut slot,
            revocations,
        } = self;
        // A saga not started takes its slot in the loop below, where a cancel still
        // reaches it.
        let not_started = match &start {
            Start::Accepted(_) => true,
            Start::Resumed(recovered, _) => recovered.saga.phase == Phase::NotStarted,
            Start::Begun(..) => false,
        };
        if !slot.is_held() && !not_started {
            tokio::select! {
                biased;
                () = stop.cancelled() => return Ok(saga.phase),
                () = slot.take() => {}
            }
        }
        // Events recovery found journaled but never acted on, stepped before anything else.
        let mut lost = std::collections::VecDeque::new();
        // The saga's calls and timers; each ends with the event it brings back.
        let mut running = JoinSet::new();
        let epoch = match &start {
            Start::Begun(_, epoch) | Start::Resumed(_, epoch) | Start::Accepted(epoch) => *epoch,
        };
        let ctx = Ctx {
            epoch,
            trace_id: trace_id(&saga_id),
            saga_id: saga_id.clone(),
            journal: journal.clone(),
            invoker,
            stop: stop.clone(),
        };
        // The calls made and not answered yet, as the engine names them.
        let mut out: Vec<(Target, u32)> = Vec::new();
        match start {
            Start::Accepted(_) => {}
            Start::Begun(commands, _) if ends(&commands) => {
                let shown = ctx.shown(commands);
                return ctx
                    .end(&saga, Step::showing(&shown), reporter.as_ref())
                    .await;
            }
            Start::Begun(commands, _) => {
                // Journaled by the begin, which created the task as the step shows it.
                let (shown, acts): (Vec<Command>, Vec<Command>) =
                    commands.into_iter().partition(Command::is_shown);
                if !shown.is_empty() {
                    reporter.begun(&shown, &saga).await;
                }
                out = ctx.perform(&saga, acts, &mut running);
            }
            Start::Resumed(recovered, _) if matches!(recovered.saga.phase, Phase::Done { .. }) => {
                // Ended in the journal, not marked finished: journaled by a release that
                // marked a saga finished in a write of its own, after its task showed the
                // end. Its end is shown, and marked, now.
                let shown: Vec<Command> = recovered.last_shown.into_iter().collect();
                return ctx
                    .end(&recovered.saga, Step::showing(&shown), reporter.as_ref())
                    .await;
            }
            Start::Resumed(recovered, _) => {
                // What it showed before is on its task already (`Executor::recover`).
                saga = recovered.saga;
                for invocation in recovered.to_invoke {
                    out.push((invocation.target, invocation.attempt));
                    ctx.call(&saga, invocation, &mut running).await?;
                }
                lost.extend(recovered.lost);
                for (timer, deadline) in recovered.timers {
                    arm(
                        &mut running,
                        timer,
                        u64::try_from(deadline - now_ms()).unwrap_or(0),
                    );
                }
            }
        }
        let mut pending_cancel: Option<oneshot::Sender<std::result::Result<(), String>>> = None;
        let mut pending_revocation: Option<oneshot::Sender<MandateEndEffect>> = None;
        let mut stopping = false;
        // The message of the answer the step being taken took.
        let mut answer: Option<Box<agent_host::sdk::Message>> = None;
        // One wait for the whole saga: the token is shared by every saga, and a wait made
        // anew at each step would take its lock twice per step.
        let stop = stop.cancelled_owned();
        tokio::pin!(stop);
        loop {
            // Every way to the end returns where it is made durable.
            if let Phase::Done { .. } = saga.phase {
                return Ok(saga.phase);
            }
            // A call the engine gave up on (its timeout fired) may still be out, but nothing
            // waits for its answer any more.
            let awaited = saga.calls_out();
            if stopping && !out.iter().any(|call| awaited.contains(call)) {
                return Ok(saga.phase);
            }
            // A person may take days: the slot goes to another saga meanwhile.
            if matches!(saga.phase, Phase::Paused { .. }) {
                slot.release();
            }
            let slot_wanted = match () {
                _ if stopping => None,
                _ if saga.phase == Phase::NotStarted => Some(SlotFor::Start),
                _ if saga.awaits_slot_to_call() => Some(SlotFor::Proceed),
                _ => None,
            };
            let event = tokio::select! {
                // A stop comes first: nothing decided after it is acted on.
                biased;
                () = &mut stop, if !stopping => {
                    stopping = true;
                    continue;
                }
                // Taken only when this branch is polled, so a stop that comes first loses none.
                Some(event) = async { lost.pop_front() }, if !lost.is_empty() => event,
                Some(joined) = running.join_next() => match joined {
                    Ok(event) => event,
                    // Calls catch their own panics (an unknown outcome), and nothing aborts
                    // these tasks while the driver runs: not expected, and logged.
                    Err(e) => {
                        tracing::error!(saga = %saga_id, error = %e, "a call or timer of the saga failed");
                        continue;
                    }
                },
                Some(request) = control.recv(), if !stopping => match request {
                    Control::Resolve { resolution, decider, message } => {
                        answer = message;
                        Event::Resolve {
                            resolution,
                            now_ms: now_ms(),
                            decider,
                        }
                    }
                    Control::Cancel(reply) => {
                        pending_cancel = Some(reply);
                        Event::Cancel { now_ms: now_ms() }
                    }
                    Control::MandateRevoked(reply) => {
                        pending_revocation = Some(reply);
                        Event::MandateRevoked { now_ms: now_ms() }
                    }
                },
                // Accepted and not started: it starts once it has a slot, journaling its
                // start with its first call's intent. Approved and not called: called once
                // it has a slot; waiting here, not before the approval is journaled, lets a
                // withdrawal (or a cancel) that comes meanwhile reach the saga first.
                event = take_slot_for(&mut slot, slot_wanted), if slot_wanted.is_some() => event,
                else => return Ok(saga.phase),
            };
            // Back from a pause: the saga acts again once it has a slot. A stop meanwhile
            // journals the event without acting on it, as any event after a stop. A saga not
            // started (a cancel before its start) makes no call, and needs none; nor does an
            // approval or its withdrawal, journaled at once.
            if !stopping && !slot.is_held() && saga.phase != Phase::NotStarted && event.may_call() {
                tokio::select! {
                    biased;
                    () = &mut stop => stopping = true,
                    () = slot.take() => {}
                }
            }
            let is_cancel = matches!(event, Event::Cancel { .. });
            let answered = answer.take();
            if let Event::Result {
                target, attempt, ..
            } = &event
            {
                out.retain(|call| *call != (*target, *attempt));
            }
            // The engine is pure, so stepping before the write is safe: if the write fails,
            // the driver stops and recovery replays what is durable.
            let commands = saga.step(event.clone());
            // A forward call is allowed by the saga's mandate as it stands now, or not made
            // (`authority`): read again and again while the database cannot answer, as a
            // journal write is. Told to stop, no call is made: recovery decides it again.
            // A journal that checks revocations in its write (`checks_revocations`) is
            // given the mandate instead of a read here; only the clock is read first.
            let calls = guarded(&saga, &commands);
            let now = now_ms();
            let in_write = !stopping && !calls.is_empty() && journal.checks_revocations();
            let lapsed = if stopping || calls.is_empty() {
                None
            } else if in_write {
                expired(&saga, now)
            } else {
                let read = || lapse(&saga, revocations.as_ref(), now);
                ctx.retrying(read).await?
            };
            // What the write that finds the mandate revoked is decided again from.
            let mut undecided =
                (in_write && lapsed.is_none()).then(|| (event.clone(), commands.clone()));
            let (mut entries, mut commands) = if stopping {
                (vec![Entry::Event(event)], commands)
            } else if let Some(lapsed) = lapsed {
                not_made(&mut saga, event, commands, &calls, lapsed, now)
            } else {
                (entries_of(event, &commands), commands)
            };
            loop {
                if ends(&commands) {
                    // The end, its finish mark and what people see of it: one durable write
                    // (told to stop, too: an end makes no call).
                    let refused = refusal(&commands);
                    let shown = ctx.shown(commands);
                    let step = Step {
                        entries: &entries,
                        shown: &shown,
                        answer: answered.as_deref(),
                    };
                    let phase = ctx.end(&saga, step, reporter.as_ref()).await?;
                    if is_cancel && let Some(reply) = pending_cancel.take() {
                        let _ = reply.send(refused.map_or(Ok(()), Err));
                    }
                    if let Some(reply) = pending_revocation.take() {
                        let _ = reply.send(saga.mandate_end_effect());
                    }
                    return Ok(phase);
                }
                let refused = refusal(&commands);
                let (shown, acts) = if stopping {
                    // The event alone: the calls it led to stay decided but not journaled as
                    // made, and recovery makes them; timers come back from the journal too.
                    // What people should see is shown with it.
                    (ctx.shown(commands), Vec::new())
                } else {
                    commands.into_iter().partition(Command::is_shown)
                };
                let step = Step {
                    entries: &entries,
                    shown: &shown,
                    answer: answered.as_deref(),
                };
                let unrevoked = undecided
                    .as_ref()
                    .and(saga.spec.mandate.as_ref())
                    .map(|hold| Unrevoked {
                        principal_key: &hold.principal_key,
                        mandate_id: &hold.mandate_id,
                    });
                match ctx.write(&saga, step, unrevoked, reporter.as_ref()).await {
                    // Revoked, as the write found: nothing was written; the calls are
                    // journaled as not made instead, and the saga unwinds.
                    Err(revoked @ crate::Error::RevokedAtWrite { .. }) => {
                        // The saga is as the event left it: the write changed nothing.
                        let Some((event, decided)) = undecided.take() else {
                            return Err(revoked);
                        };
                        (entries, commands) =
                            not_made(&mut saga, event, decided, &calls, Lapse::Revoked, now);
                        continue;
                    }
                    written => written?,
                }
                if is_cancel && let Some(reply) = pending_cancel.take() {
                    let _ = reply.send(refused.map_or(Ok(()), Err));
                }
                if let Some(reply) = pending_revocation.take() {
                    let _ = reply.send(saga.mandate_end_effect());
                }
                out.extend(ctx.perform(&saga, acts, &mut running));
                break;
            }
        }
    }
}

/// What one step journals and shows: its entries, what people see of it, and the message
/// of the person's answer it took.
#[derive(Clone, Copy)]
struct Step<'a> {
    entries: &'a [Entry],
    shown: &'a [Command],
    answer: Option<&'a agent_host::sdk::Message>,
}

impl<'a> Step<'a> {
    /// A step that journals nothing more (journaled already), showing `shown`.
    fn showing(shown: &'a [Command]) -> Self {
        Self {
            entries: &[],
            shown,
            answer: None,
        }
    }
}

struct Ctx {
    saga_id: String,
    /// The claim the saga's journal writes are made under.
    epoch: Epoch,
    trace_id: String,
    journal: Arc<dyn Journal>,
    invoker: Arc<dyn Invoker>,
    stop: CancellationToken,
}

/// The wait before a failed journal write is tried again, doubled each time up to the cap.
const FIRST_JOURNAL_RETRY: Duration = Duration::from_millis(50);
const MAX_JOURNAL_RETRY: Duration = Duration::from_secs(5);

impl Ctx {
    /// Journals `entries` (one durable write). A failed write (a full disk, a file
    /// locked by another program) is tried again until it lands; the error is returned
    /// only once the driver is told to stop, and the saga then resumes from what is
    /// durable at the next start. A write that failed was rolled back, so trying it again
    /// cannot write it twice.
    async fn journal(&self, entries: &[Entry]) -> Result<()> {
        self.retrying(|| self.journal.append(&self.saga_id, self.epoch, entries))
            .await
    }

    /// The commands people see among `commands`, in order; an event that did not apply
    /// is logged.
    fn shown(&self, commands: Vec<Command>) -> Vec<Command> {
        let mut shown = Vec::new();
        for command in commands {
            match command {
                Command::Ignored { event, why } => {
                    tracing::debug!(saga = %self.saga_id, event, why, "an event did not apply");
                }
                command if command.is_shown() => shown.push(command),
                _ => {}
            }
        }
        shown
    }

    /// Journals a step (`step.entries`) and shows what people see of it, in one durable
    /// write (`Reporter::written`), tried again as `journal` is; `ending` for the step
    /// that ends the saga (its finish mark and settlement go with it).
    async fn write(
        &self,
        saga: &Saga,
        step: Step<'_>,
        unrevoked: Option<Unrevoked<'_>>,
        reporter: &dyn Reporter,
    ) -> Result<()> {
        self.write_or_end(saga, step, None, unrevoked, reporter)
            .await
    }

    /// `write`, or the end (`ending`) of the saga.
    async fn write_or_end(
        &self,
        saga: &Saga,
        step: Step<'_>,
        ending: Option<Ending>,
        unrevoked: Option<Unrevoked<'_>>,
        reporter: &dyn Reporter,
    ) -> Result<()> {
        let write = StepWrite {
            journal: self.journal.as_ref(),
            saga_id: &self.saga_id,
            epoch: self.epoch,
            entries: step.entries,
            ending,
            answer: step.answer,
            unrevoked,
        };
        self.retrying(|| reporter.written(step.shown, saga, &write))
            .await
    }

    /// Ends the saga with `step`, through `write`. The phase it ended in.
    async fn end(&self, saga: &Saga, step: Step<'_>, reporter: &dyn Reporter) -> Result<Phase> {
        let ending = Ending {
            mandate: saga.spec.mandate.clone(),
            spent_minor: saga.spent_minor(),
        };
        self.write_or_end(saga, step, Some(ending), None, reporter)
            .await?;
        Ok(saga.phase.clone())
    }

    /// Makes a durable write (`attempt`), or a read the next write waits for, again and
    /// again while it fails, as `journal` says.
    async fn retrying<T, F: Future<Output = Result<T>>>(
        &self,
        mut attempt: impl FnMut() -> F,
    ) -> Result<T> {
        let mut wait = FIRST_JOURNAL_RETRY;
        loop {
            let error = match attempt().await {
                Ok(done) => return Ok(done),
                // Another owner drives the saga now: nothing more is done for it here.
                Err(fenced @ crate::Error::Fenced { .. }) => return Err(fenced),
                // Not a failure to try again: the caller decides the step anew.
                Err(revoked @ crate::Error::RevokedAtWrite { .. }) => return Err(revoked),
                Err(e) => e,
            };
            if self.stop.is_cancelled() {
                return Err(error);
            }
            tracing::warn!(
                saga = %self.saga_id, %error, retry_in_ms = wait.as_millis() as u64,
                "cannot journal the saga's next step yet; it waits"
            );
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.stop.cancelled() => return Err(error),
            }
            wait = (wait * 2).min(MAX_JOURNAL_RETRY);
        }
    }

    /// Performs the commands of a step, once it is journaled and shown: calls and timers
    /// start. Returns the calls it made.
    fn perform(
        &self,
        saga: &Saga,
        commands: Vec<Command>,
        running: &mut JoinSet<Event>,
    ) -> Vec<(Target, u32)> {
        let mut made = Vec::new();
        for command in commands {
            match command {
                Command::Invoke(invocation) => {
                    made.push((invocation.target, invocation.attempt));
                    self.spawn_call(saga, invocation, running);
                }
                Command::StartTimer { timer, after_ms } => arm(running, timer, after_ms),
                Command::Ignored { event, why } => {
                    tracing::debug!(saga = %self.saga_id, event, why, "an event did not apply");
                }
                Command::RefuseCancel { .. }
                | Command::Report { .. }
                | Command::Pause { .. }
                | Command::Finish { .. } => {}
            }
        }
        made
    }

    /// Journals the intent, then calls (for calls recovery makes again).
    async fn call(
        &self,
        saga: &Saga,
        invocation: Invocation,
        running: &mut JoinSet<Event>,
    ) -> Result<()> {
        self.journal(&[Entry::Intent(invocation.clone())]).await?;
        self.spawn_call(saga, invocation, running);
        Ok(())
    }

    /// Makes a call whose intent is durable, on a task of the saga's; the result comes
    /// back as an event.
    fn spawn_call(&self, saga: &Saga, invocation: Invocation, running: &mut JoinSet<Event>) {
        let (step, caused_by) = match invocation.target {
            Target::Forward(i) | Target::Verification(i) => (i, None),
            Target::Compensation(i) => (i, saga.failed_step().map(str::to_owned)),
        };
        let context = CallContext {
            saga_id: self.saga_id.clone(),
            step_id: saga.spec.steps[step].id.clone(),
            caused_by,
            trace_id: self.trace_id.clone(),
            span_id: None,
            class: Some(saga.spec.steps[step].class),
        };
        let invoker = self.invoker.clone();
        running.spawn(cpu::measured(cpu::Phase::Saga, async move {
            // A call that panics may have reached the tool: its outcome is unknown, and the
            // engine treats it so (retried under its key, or put to a person).
            let outcome = std::panic::AssertUnwindSafe(invoker.invoke(&invocation, &context))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| CallOutcome::Unknown {
                    reason: "the executor failed while making the call".into(),
                });
            Event::Result {
                target: invocation.target,
                attempt: invocation.attempt,
                outcome,
                now_ms: now_ms(),
            }
        }));
    }
}

/// Arms a timer on a task of the saga's. Retry waits get jitter: a random share of the
/// cap, never more.
fn arm(running: &mut JoinSet<Event>, timer: Timer, after_ms: u64) {
    let wait = match timer {
        Timer::Retry { .. } if after_ms > 0 => after_ms / 2 + jitter(after_ms / 2),
        _ => after_ms,
    };
    running.spawn(async move {
        tokio::time::sleep(Duration::from_millis(wait)).await;
        Event::TimerFired {
            timer,
            now_ms: now_ms(),
        }
    });
}

/// Whether the commands end the saga.
fn ends(commands: &[Command]) -> bool {
    commands.iter().any(|c| matches!(c, Command::Finish { .. }))
}

/// Why the engine refused a cancel, among the commands it answered it with.
fn refusal(commands: &[Command]) -> Option<String> {
    commands.iter().find_map(|c| match c {
        Command::RefuseCancel { reason } => Some(reason.clone()),
        _ => None,
    })
}

/// A random share of `up_to`, from 0 to all of it.
fn jitter(up_to: u64) -> u64 {
    if up_to == 0 {
        return 0;
    }
    let random = uuid::Uuid::new_v4().as_u128() as u64;
    random % (up_to + 1)
}

/// What the saga waits for a slot to do.
#[derive(Debug, Clone, Copy)]
enum SlotFor {
    /// Start: accepted, not started (in the line of new plans).
    Start,
    /// Call its approved step (in the line of begun sagas).
    Proceed,
}

/// Takes a slot for `wanted`, and gives the event that acts on it.
async fn take_slot_for(slot: &mut SlotHold, wanted: Option<SlotFor>) -> Event {
    match wanted {
        Some(SlotFor::Start) => {
            slot.take_to_start().await;
            Event::Start { now_ms: now_ms() }
        }
        Some(SlotFor::Proceed) => {
            slot.take().await;
            Event::Proceed { now_ms: now_ms() }
        }
        // Not polled: the branch is disabled without a wish.
        None => std::future::pending().await,
    }
}
