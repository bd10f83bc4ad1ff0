//! Saga slots: at most so many sagas make progress at once. A saga takes a slot before
//! its first call and gives it back when it ends or pauses for a person; one that finds
//! none waits, accepted (journaled, its budget reserved) with its task still `SUBMITTED`. Tool agents then see at most that many
//! calls from this executor at a time, however many plans arrive. A saga already begun
//! (resumed at a start, or answered by a person) waits ahead of every new plan: it has
//! effects out, whose undo may expire, and a person may be waiting on it; a new plan has
//! done nothing and loses nothing by waiting. Within each line, first come first served.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::sync;
use tokio::sync::{oneshot, watch};

/// The most slots there can be: what `unlimited` gives.
const MAX_SLOTS: usize = usize::MAX >> 3;

/// The executor's saga slots.
#[derive(Debug)]
pub struct Slots {
    limit: usize,
    lines: Mutex<Lines>,
    /// How many sagas wait for a slot now.
    waiting: watch::Sender<usize>,
}

/// The free slots and the two lines of waiters. A slot given back goes to the first
/// waiter of the begun line, else of the new line, else it is free: while anyone waits,
/// no slot is free.
#[derive(Debug, Default)]
struct Lines {
    free: usize,
    begun: VecDeque<oneshot::Sender<Permit>>,
    new: VecDeque<oneshot::Sender<Permit>>,
}

impl Lines {
    /// Queues `waiter`, first dropping the waiters that gave up (a cancel, a stop) once
    /// they outnumber the live ones: a slot given back skips them anyway, and this keeps
    /// a line of given-up waits from growing while no slot comes back.
    fn queue(&mut self, waiter: oneshot::Sender<Permit>, begun: bool, live: usize) {
        let line = if begun {
            &mut self.begun
        } else {
            &mut self.new
        };
        if line.len() > 2 * live + 16 {
            line.retain(|w| !w.is_closed());
        }
        line.push_back(waiter);
    }
}

/// A slot taken: given back when dropped.
#[derive(Debug)]
pub struct Permit {
    /// `None` for a permit that holds nothing (one refused by a waiter that gave up).
    slots: Option<Arc<Slots>>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(slots) = self.slots.take() {
            slots.give_back();
        }
    }
}

/// Counts a waiter for as long as it waits, however its wait ends (a waiter whose
/// future is dropped, at a stop or a cancel, stops counting too).
struct Waiting<'a>(&'a watch::Sender<usize>);

impl<'a> Waiting<'a> {
    fn start(count: &'a watch::Sender<usize>) -> Self {
        count.send_modify(|n| *n += 1);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl Slots {
    /// `limit` slots (at least one).
    pub fn new(limit: usize) -> Arc<Self> {
        let limit = limit.clamp(1, MAX_SLOTS);
        Arc::new(Self {
            limit,
            lines: Mutex::new(Lines {
                free: limit,
                ..Lines::default()
            }),
            waiting: watch::channel(0).0,
        })
    }

    /// As many slots as can be counted: no saga ever waits.
    pub fn unlimited() -> Arc<Self> {
        Self::new(MAX_SLOTS)
    }

    /// The lines; a panic elsewhere while they were held left them whole (each change
    /// is one step), so a poisoned lock is taken as it is.
    fn lines(&self) -> MutexGuard<'_, Lines> {
        sync::lock(&self.lines)
    }

    /// A free slot, if there is one now (never while anyone waits).
    pub fn try_take(self: &Arc<Self>) -> Option<Permit> {
        self.take_free(&mut self.lines())
    }

    /// A free slot out of `lines`, if there is one.
    fn take_free(self: &Arc<Self>, lines: &mut Lines) -> Option<Permit> {
        lines.free = lines.free.checked_sub(1)?;
        Some(Permit {
            slots: Some(self.clone()),
        })
    }

    /// A slot for a new plan, once one is free: behind every saga already begun.
    pub async fn take(self: &Arc<Self>) -> Permit {
        self.wait_in_line(false).await
    }

    /// A slot for a saga already begun, once one is free: ahead of every new plan.
    pub async fn take_ahead(self: &Arc<Self>) -> Permit {
        self.wait_in_line(true).await
    }

    async fn wait_in_line(self: &Arc<Self>, begun: bool) -> Permit {
        let given = {
            let mut lines = self.lines();
            if let Some(permit) = self.take_free(&mut lines) {
                return permit;
            }
            let (waiter, given) = oneshot::channel();
            lines.queue(waiter, begun, self.waiting());
            given
        };
        let _waiting = Waiting::start(&self.waiting);
        // The line is dropped only with the slots, which this waiter holds: were it, the
        // saga would run unbounded rather than never.
        given.await.unwrap_or(Permit { slots: None })
    }

    /// A slot comes back: to the first waiter still waiting, else it is free.
    fn give_back(self: &Arc<Self>) {
        let mut lines = self.lines();
        loop {
            let Some(waiter) = lines.begun.pop_front().or_else(|| lines.new.pop_front()) else {
                lines.free += 1;
                return;
            };
            let permit = Permit {
                slots: Some(self.clone()),
            };
            match waiter.send(permit) {
                Ok(()) => return,
                // That waiter gave up: the slot goes on to the next, not back through
                // this permit's drop (the lines are held here).
                Err(mut refused) => refused.slots = None,
            }
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Slots taken now.
    pub fn in_use(&self) -> usize {
        self.limit - self.lines().free.min(self.limit)
    }

    /// Sagas waiting for a slot now.
    pub fn waiting(&self) -> usize {
        *self.waiting.borrow()
    }

    /// The count of waiting sagas, as it changes.
    pub fn watch_waiting(&self) -> watch::Receiver<usize> {
        self.waiting.subscribe()
    }
}

/// One saga's hold on a slot: taken while it runs, given back while it waits for a
/// person.
#[derive(Debug)]
pub struct SlotHold {
    slots: Arc<Slots>,
    permit: Option<Permit>,
}

impl SlotHold {
    /// A hold on `permit`, a slot already taken (`None`: none yet).
    pub fn new(slots: Arc<Slots>, permit: Option<Permit>) -> Self {
        Self { slots, permit }
    }

    pub fn is_held(&self) -> bool {
        self.permit.is_some()
    }

    /// Takes a slot, waiting for one if need be (ahead of new plans: the saga is
    /// begun); at once if one is held.
    pub async fn take(&mut self) {
        if self.permit.is_none() {
            self.permit = Some(self.slots.take_ahead().await);
        }
    }

    /// Takes a slot for a saga not started yet (accepted, waiting for one), in the line
    /// of new plans; at once if one is held.
    pub async fn take_to_start(&mut self) {
        if self.permit.is_none() {
            self.permit = Some(self.slots.take().await);
        }
    }

    /// Gives the slot back.
    pub fn release(&mut self) {
        self.permit = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_saga_waits_for_a_slot_until_one_is_given_back_and_waiters_go_in_order() {
        let slots = Slots::new(1);
        let first = slots.take().await;
        assert_eq!((slots.in_use(), slots.waiting()), (1, 0));
        assert!(slots.try_take().is_none());

        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiting = slots.watch_waiting();
        let mut waiters = Vec::new();
        for name in ["second", "third"] {
            let (queue, order) = (slots.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let permit = queue.take().await;
                order.lock().unwrap().push(name);
                drop(permit);
            }));
            // Each waiter queues before the next starts.
            let queued = slots.waiting();
            waiting.wait_for(|n| *n == queued + 1).await.unwrap();
        }
        assert_eq!(slots.waiting(), 2);
        drop(first);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["second", "third"]);
        assert_eq!((slots.in_use(), slots.waiting()), (0, 0));
    }

    #[tokio::test]
    async fn a_begun_saga_goes_ahead_of_new_plans_that_waited_before_it() {
        let slots = Slots::new(1);
        let first = slots.take().await;
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiting = slots.watch_waiting();
        let mut waiters = Vec::new();
        for (name, begun) in [("new 1", false), ("new 2", false), ("begun", true)] {
            let (queue, order) = (slots.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let permit = if begun {
                    queue.take_ahead().await
                } else {
                    queue.take().await
                };
                order.lock().unwrap().push(name);
                drop(permit);
            }));
            let queued = slots.waiting();
            waiting.wait_for(|n| *n == queued + 1).await.unwrap();
        }
        // No slot is free while anyone waits, so no new plan slips in either.
        assert!(slots.try_take().is_none());
        drop(first);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["begun", "new 1", "new 2"]);
        assert_eq!((slots.in_use(), slots.waiting()), (0, 0));
    }

    #[tokio::test]
    async fn a_slot_given_back_skips_the_waiters_that_gave_up() {
        let slots = Slots::new(1);
        let held = slots.take().await;
        let mut waiting = slots.watch_waiting();
        let spawn_waiter = |begun: bool| {
            let slots = slots.clone();
            tokio::spawn(async move {
                if begun {
                    slots.take_ahead().await
                } else {
                    slots.take().await
                }
            })
        };
        let gave_up_begun = spawn_waiter(true);
        waiting.wait_for(|n| *n == 1).await.unwrap();
        let gave_up_new = spawn_waiter(false);
        waiting.wait_for(|n| *n == 2).await.unwrap();
        let stays = spawn_waiter(false);
        waiting.wait_for(|n| *n == 3).await.unwrap();
        gave_up_begun.abort();
        gave_up_new.abort();
        waiting.wait_for(|n| *n == 1).await.unwrap();
        drop(held);
        // Bounded: a slot lost on the way would leave this waiter waiting for ever.
        let permit = tokio::time::timeout(std::time::Duration::from_secs(10), stays)
            .await
            .expect("the slot reaches the waiter still waiting")
            .unwrap();
        assert_eq!((slots.in_use(), slots.waiting()), (1, 0));
        drop(permit);
        assert_eq!(slots.in_use(), 0);
        assert!(slots.try_take().is_some());
    }

    #[test]
    fn given_up_waits_do_not_pile_up_in_a_line() {
        let mut lines = Lines::default();
        for _ in 0..1000 {
            let (waiter, given) = oneshot::channel();
            drop(given);
            lines.queue(waiter, false, 0);
        }
        assert!(
            lines.new.len() <= 17,
            "{} given-up waits kept",
            lines.new.len()
        );
    }

    #[tokio::test]
    async fn a_wait_given_up_stops_counting() {
        let slots = Slots::new(1);
        let _held = slots.take().await;
        let mut waiting = slots.watch_waiting();
        let waiter = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.take().await })
        };
        waiting.wait_for(|n| *n == 1).await.unwrap();
        waiter.abort();
        waiting.wait_for(|n| *n == 0).await.unwrap();
        assert_eq!(slots.in_use(), 1);
    }

    #[tokio::test]
    async fn a_hold_gives_its_slot_back_and_takes_one_again() {
        let slots = Slots::new(1);
        let mut hold = SlotHold::new(slots.clone(), slots.try_take());
        assert!(hold.is_held());
        hold.release();
        assert_eq!(slots.in_use(), 0);
        let other = slots.take().await;
        drop(other);
        hold.take().await;
        assert!(hold.is_held());
        assert_eq!(slots.in_use(), 1);
    }
}
