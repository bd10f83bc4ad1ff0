//! Saga slots: at most so many sagas make progress at once. A saga takes a slot before
//! its first call and gives it back when it ends or pauses for a person; one that finds
//! none waits, first come first served, with its task still `SUBMITTED`. Tool agents then
//! see at most that many calls from this executor at a time, however many plans arrive.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// The executor's saga slots.
#[derive(Debug)]
pub struct Slots {
    semaphore: Arc<Semaphore>,
    limit: usize,
    /// How many sagas wait for a slot now.
    waiting: watch::Sender<usize>,
}

/// A slot taken: given back when dropped.
#[derive(Debug)]
pub struct Permit {
    _permit: Option<OwnedSemaphorePermit>,
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
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        Arc::new(Self {
            semaphore: Arc::new(Semaphore::new(limit)),
            limit,
            waiting: watch::channel(0).0,
        })
    }

    /// As many slots as the runtime can count: no saga ever waits.
    pub fn unlimited() -> Arc<Self> {
        Self::new(Semaphore::MAX_PERMITS)
    }

    /// A free slot, if there is one now.
    pub fn try_take(&self) -> Option<Permit> {
        self.semaphore
            .clone()
            .try_acquire_owned()
            .ok()
            .map(|p| Permit { _permit: Some(p) })
    }

    /// A slot, once one is free (waiters are served in the order they came).
    pub async fn take(&self) -> Permit {
        if let Some(permit) = self.try_take() {
            return permit;
        }
        let _waiting = Waiting::start(&self.waiting);
        // The semaphore is never closed; were it, the saga would run unbounded rather
        // than never.
        Permit {
            _permit: self.semaphore.clone().acquire_owned().await.ok(),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Slots taken now.
    pub fn in_use(&self) -> usize {
        self.limit - self.semaphore.available_permits().min(self.limit)
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

    /// Takes a slot, waiting for one if need be; at once if one is held.
    pub async fn take(&mut self) {
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
