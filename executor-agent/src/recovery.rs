//! Rebuilding a saga from its journal after a restart: replay every event through the
//! engine, then work out what the crash interrupted — a call decided but never made, a
//! call made but never answered, timers that were running.

use std::collections::{HashMap, HashSet};

use crate::journal::Entry;
use crate::saga::{Command, Event, Invocation, Saga, SagaSpec, Target, Timer};

/// What the driver must do to carry on after replaying the journal.
#[derive(Debug)]
pub struct Recovered {
    pub saga: Saga,
    /// Calls the engine decided on whose intent was never journaled: make them now
    /// (journal the intent first, as always).
    pub to_invoke: Vec<Invocation>,
    /// Events to feed the engine now: `InFlightLost` for calls journaled as made but never
    /// answered (it repeats idempotent ones with the same key and escalates the others),
    /// or `Start` for a saga whose start was never journaled.
    pub lost: Vec<Event>,
    /// Timers to arm again, with their deadlines (ms since the epoch).
    pub timers: Vec<(Timer, i64)>,
    /// The last progress report, pause or end the engine emitted: the crash may have come
    /// before it reached the saga's task, so the driver shows it again.
    pub last_shown: Option<Command>,
}

/// Replays `entries` (events and intents, in journal order) onto a fresh saga.
pub fn replay(spec: SagaSpec, entries: &[Entry], now_ms: i64) -> Recovered {
    let mut saga = Saga::new(spec);
    let mut decided: Vec<Invocation> = Vec::new();
    let mut timers: HashMap<Timer, i64> = HashMap::new();
    let mut intents: HashSet<(Target, u32)> = HashSet::new();
    let mut answered: HashSet<(Target, u32)> = HashSet::new();
    let mut last_shown = None;
    for entry in entries {
        match entry {
            Entry::Intent(inv) => {
                intents.insert((inv.target, inv.attempt));
            }
            Entry::Event(event) => {
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
                        Command::RefuseCancel { .. } => {}
                    }
                }
            }
        }
    }
    let mut to_invoke = Vec::new();
    let mut lost = Vec::new();
    if saga.phase == crate::saga::model::Phase::NotStarted {
        lost.push(Event::Start { now_ms });
    }
    if let Some((target, attempt)) = saga.in_flight() {
        if intents.contains(&(target, attempt)) {
            if !answered.contains(&(target, attempt)) {
                lost.push(Event::InFlightLost {
                    target,
                    attempt,
                    now_ms,
                });
            }
        } else if let Some(inv) = decided
            .into_iter()
            .rev()
            .find(|i| i.target == target && i.attempt == attempt)
        {
            to_invoke.push(inv);
        }
    }
    // Timers that no longer matter are ignored by the engine when they fire.
    let mut timers: Vec<(Timer, i64)> = timers.into_iter().collect();
    timers.sort_by_key(|(_, deadline)| *deadline);
    Recovered {
        saga,
        to_invoke,
        lost,
        timers,
        last_shown,
    }
}

fn event_time(event: &Event) -> i64 {
    match event {
        Event::Start { now_ms }
        | Event::Result { now_ms, .. }
        | Event::TimerFired { now_ms, .. }
        | Event::Resolve { now_ms, .. }
        | Event::Cancel { now_ms }
        | Event::MandateRevoked { now_ms }
        | Event::InFlightLost { now_ms, .. } => *now_ms,
    }
}
