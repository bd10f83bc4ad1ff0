//! Rebuilding a saga from its journal after a restart: replay every event through the
//! engine, then work out what the crash interrupted — a call decided but never made, a
//! call made but never answered, timers that were running.
//! Replay checks itself: every call the engine derives again is compared with its
//! journaled intent (target, skill, arguments, idempotency key). On a difference (an
//! upgrade that binds otherwise) no call is made: the engine is told
//! (`Event::ReplayDiverged`), pins the journaled call and stops the saga for a person.

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::journal::Entry;
use crate::saga::{
    CallOutcome, Command, Event, FailureClass, Invocation, Saga, SagaSpec, Target, Timer,
};

/// What the driver must do to carry on after replaying the journal.
#[derive(Debug)]
pub struct Recovered {
    pub saga: Saga,
    /// Calls the engine decided on whose intent was never journaled: make them now
    /// (journal the intent first, as always).
    pub to_invoke: Vec<Invocation>,
    /// Events to feed the engine now: `InFlightLost` for calls journaled as made but never
    /// answered (it repeats idempotent ones with the same key and escalates the others).
    /// A saga whose start was never journaled (accepted, waiting for a slot) is started
    /// by its driver once it has a slot.
    pub lost: Vec<Event>,
    /// Timers to arm again, with their deadlines (ms since the epoch).
    pub timers: Vec<(Timer, i64)>,
    /// The last progress report, pause or end the engine emitted: for a saga whose end
    /// the journal holds but which was never marked finished, the end its finishing
    /// write shows.
    pub last_shown: Option<Command>,
}

impl Recovered {
    /// The saga's mandate was revoked before it heard of it (the process stopped in
    /// between): it hears it first. A forward call decided but never made (its intent was
    /// never journaled, so it did not reach the tool) is not made: it failed, definitely,
    /// before anything happened. Compensations are still made.
    pub fn tell_revoked(&mut self, now_ms: i64) {
        let mut told = vec![Event::MandateRevoked { now_ms }];
        self.to_invoke.retain(|invocation| match invocation.target {
            // Compensations are still made, and a verification changes nothing.
            Target::Compensation(_) | Target::Verification(_) => true,
            Target::Forward(_) => {
                told.push(Event::Result {
                    target: invocation.target,
                    attempt: invocation.attempt,
                    outcome: CallOutcome::Failed {
                        reason: "not made: the mandate was revoked before the call".into(),
                        failure: Some(FailureClass::Permanent),
                    },
                    now_ms,
                });
                false
            }
        });
        self.lost.splice(0..0, told);
    }
}

/// Replays `entries` (events and intents, in journal order) onto a fresh saga. A journal
/// whose events name a step the saga does not have is refused (`Error::Journal`): it is
/// not the journal of this saga.
pub fn replay(
    spec: impl Into<std::sync::Arc<SagaSpec>>,
    entries: &[Entry],
    now_ms: i64,
) -> Result<Recovered> {
    let mut saga = Saga::new(spec);
    let mut decided: Vec<Invocation> = Vec::new();
    let mut timers: HashMap<Timer, i64> = HashMap::new();
    let mut intents: HashMap<(Target, u32), &Invocation> = HashMap::new();
    // Differences a person was already told of (journaled `ReplayDiverged` events).
    let mut told: HashSet<(Target, u32)> = HashSet::new();
    let mut answered: HashSet<(Target, u32)> = HashSet::new();
    let mut last_shown = None;
    for (n, entry) in entries.iter().enumerate() {
        match entry {
            Entry::Intent(inv) => {
                intents.insert((inv.target, inv.attempt), inv);
            }
            Entry::Event(event) => {
                if let Some(why) = saga.unknown_step(event) {
                    return Err(Error::Journal(format!(
                        "saga {}: entry {} ({}): {why}",
                        saga.spec.saga_id,
                        n + 1,
                        event.kind()
                    )));
                }
                let at = event_time(event);
                match event {
                    Event::Result {
                        target, attempt, ..
                    } => {
                        answered.insert((*target, *attempt));
                    }
                    Event::TimerFired { timer, .. } => {
                        timers.remove(timer);
                    }
                    Event::ReplayDiverged {
                        target, attempt, ..
                    } => {
                        told.insert((*target, *attempt));
                    }
                    _ => {}
                }
                for command in saga.step(event.clone()) {
                    match command {
                        Command::Invoke(inv) => decided.push(inv),
                        Command::StartTimer { timer, after_ms } => {
                            timers.insert(timer, at.saturating_add(after_ms as i64));
                        }
                        shown @ (Command::Report { .. }
                        | Command::Pause { .. }
                        | Command::Finish { .. }) => last_shown = Some(shown),
                        Command::RefuseCancel { .. } | Command::Ignored { .. } => {}
                    }
                }
            }
        }
    }
    let diverged = decided.iter().find_map(|derived| {
        let journaled = intents.get(&(derived.target, derived.attempt))?;
        let differs = journaled.args != derived.args
            || journaled.idempotency_key != derived.idempotency_key
            || journaled.call.agent != derived.call.agent
            || journaled.call.skill != derived.call.skill;
        (differs && !told.contains(&(derived.target, derived.attempt))).then(|| {
            Event::ReplayDiverged {
                target: derived.target,
                attempt: derived.attempt,
                journaled: Box::new((*journaled).clone()),
                derived_args: derived.args.clone(),
                derived_key: derived.idempotency_key.clone(),
                now_ms,
            }
        })
    });
    let mut to_invoke = Vec::new();
    let mut lost = Vec::new();
    if let Some(diverged) = diverged {
        // Stepped first: the engine stops the saga, and nothing below is acted on (a call
        // lost in flight is then no longer out; timers find the saga paused).
        lost.push(diverged);
    }
    let diverging = !lost.is_empty();
    for (target, attempt) in saga.calls_out() {
        if intents.contains_key(&(target, attempt)) {
            if !answered.contains(&(target, attempt)) {
                lost.push(Event::InFlightLost {
                    target,
                    attempt,
                    now_ms,
                });
            }
        } else if !diverging
            && let Some(inv) = decided
                .iter()
                .rev()
                .find(|i| i.target == target && i.attempt == attempt)
        {
            to_invoke.push(inv.clone());
        }
    }
    // Timers that no longer matter are ignored by the engine when they fire.
    let mut timers: Vec<(Timer, i64)> = timers.into_iter().collect();
    timers.sort_by_key(|(_, deadline)| *deadline);
    Ok(Recovered {
        saga,
        to_invoke,
        lost,
        timers,
        last_shown,
    })
}

fn event_time(event: &Event) -> i64 {
    event.now_ms()
}
