//! How a task's events reach its subscribers: the `TaskFeed` trait, which the task
//! manager announces each durable write to, and `InProcessFeed`, which fans them out to
//! the subscribers in this process.
//!
//! A feed across processes (PostgreSQL's LISTEN/NOTIFY, so that a subscriber on one
//! replica follows a task written by another) implements the same trait: it carries the
//! events of each write to the other processes and fans them out there the same way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::broadcast;

use crate::error::{Error, Result};
use crate::sdk::{StreamResponse, Task};

/// Events a live subscriber may fall behind by before it resynchronises from the store.
const EVENT_BUFFER: usize = 256;

/// The same, for subscribers waiting for the end alone: they get a status or two, and a
/// channel's buffer is allocated whole when it is made (each slot the size of an event),
/// once per waiting request.
const STOP_BUFFER: usize = 4;

/// How far a write reaches into the durable record its agent keeps of a task, besides the
/// task (the executor's journal: how many of its saga's events it holds), counted so that
/// a later write reaches further. A task as read carries the sequence it reaches
/// (`Agent::shown`), and a stream drops an event whose write that task already reaches.
pub type Seq = u64;

/// An event as announced, with the sequence of its write when its agent keeps a record
/// (`None`: the task is the only record; `tasks/shown.rs` then tells late events by
/// their messages).
#[derive(Debug, Clone, PartialEq)]
pub struct Announced {
    pub seq: Option<Seq>,
    pub event: StreamResponse,
}

/// The task as it ended, for the subscribers that watched it end (a blocking send
/// answers with it without reading the store back).
pub type Ended = Arc<std::sync::OnceLock<Task>>;

/// What a subscriber reads of a task's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// Every event, in order.
    Everything,
    /// Only the status that ends or interrupts the task: no other event is built for it.
    End,
}

/// Carries the events of each task write to that task's subscribers, in write order.
pub trait TaskFeed: Send + Sync + 'static {
    /// Subscribes to the events of `task_id` announced from now on.
    fn subscribe(&self, task_id: &str, watch: Watch) -> Result<Subscription>;

    /// Who listens to the task's events: someone reading every event, only someone
    /// waiting for its end, or nobody (then no event is built). Asked by the task's
    /// writer before each write and announcement, so a feed across processes also learns
    /// here which tasks this process writes.
    fn watched(&self, task_id: &str) -> Option<Watch>;

    /// This process writes `task_id` from now on, written or not yet (an agent that
    /// starts working on it, resumes it or takes it over).
    fn writes(&self, _task_id: &str) {}

    /// This process no longer writes `task_id`, which goes on elsewhere (another
    /// process took it over).
    fn no_longer_writes(&self, _task_id: &str) {}

    /// Makes sure that the process writing `task_id`, wherever it runs, announces the
    /// task's events to this one from now on, for a subscriber here that has just
    /// subscribed. Returns whether events may have been written elsewhere and not heard
    /// here before this returned (the caller then reads the task again). A feed whose
    /// writers are all in this process has nothing to do.
    fn follow(&self, _task_id: &str, _watch: Watch) -> BoxFuture<'static, bool> {
        Box::pin(std::future::ready(false))
    }

    /// Announces the events of one durable write, in order, with the write's sequence
    /// (`Seq`) when its agent keeps a record. `ended` is the task as the write ended it,
    /// if it did: subscribers find it in `Subscription::ended` before the last event
    /// reaches them, and the task has no events after these.
    fn publish(
        &self,
        task_id: &str,
        events: Vec<StreamResponse>,
        seq: Option<Seq>,
        ended: Option<Task>,
    );
}

/// A watched task's fan-out, a channel per way of watching, each made for its first
/// subscriber.
struct Channel {
    /// Every event, for the subscribers that read them all (a stream).
    every: Option<broadcast::Sender<Announced>>,
    /// The status that ends or interrupts the task, for the subscribers that wait only
    /// for that (a blocking send).
    stops: Option<broadcast::Sender<Announced>>,
    ended: Ended,
    /// How many subscribers each has.
    every_event: usize,
    end_only: usize,
}

impl Channel {
    fn sender(&mut self, watch: Watch) -> &broadcast::Sender<Announced> {
        let (sender, buffer) = match watch {
            Watch::Everything => (&mut self.every, EVENT_BUFFER),
            Watch::End => (&mut self.stops, STOP_BUFFER),
        };
        sender.get_or_insert_with(|| broadcast::channel(buffer).0)
    }

    fn count(&mut self, watch: Watch) -> &mut usize {
        match watch {
            Watch::Everything => &mut self.every_event,
            Watch::End => &mut self.end_only,
        }
    }

    /// Whether `events` is a receiver of this channel's, for `watch`.
    fn holds(&self, watch: Watch, events: &broadcast::Receiver<Announced>) -> bool {
        let sender = match watch {
            Watch::Everything => &self.every,
            Watch::End => &self.stops,
        };
        sender
            .as_ref()
            .is_some_and(|sender| sender.subscribe().same_channel(events))
    }
}

/// Whether `event` ends or interrupts its task: all a subscriber of the end reads.
fn stops(event: &Announced) -> bool {
    matches!(&event.event, StreamResponse::StatusUpdate(update)
        if crate::sdk::is_terminal(&update.status.state)
            || crate::sdk::is_interrupted(&update.status.state))
}

type Channels = Arc<Mutex<HashMap<String, Channel>>>;

/// The feed of one process: a channel per watched task, while it has subscribers.
#[derive(Default)]
pub struct InProcessFeed {
    channels: Channels,
}

impl InProcessFeed {
    pub fn new() -> Self {
        Self::default()
    }

    /// Tasks with a channel now (for tests: a channel goes with its last subscriber).
    pub fn channels(&self) -> usize {
        self.channels.lock().map_or(0, |c| c.len())
    }
}

impl TaskFeed for InProcessFeed {
    fn subscribe(&self, task_id: &str, watch: Watch) -> Result<Subscription> {
        let mut channels = self
            .channels
            .lock()
            .map_err(|_| Error::store("event bus poisoned"))?;
        let channel = channels
            .entry(task_id.to_owned())
            .or_insert_with(|| Channel {
                every: None,
                stops: None,
                ended: Ended::default(),
                every_event: 0,
                end_only: 0,
            });
        *channel.count(watch) += 1;
        let events = channel.sender(watch).subscribe();
        let left = self.channels.clone();
        let task_id = task_id.to_owned();
        Ok(Subscription {
            events,
            ended: channel.ended.clone(),
            leave: Some(Box::new(move |events| {
                leave(&left, &task_id, watch, events)
            })),
        })
    }

    fn watched(&self, task_id: &str) -> Option<Watch> {
        let channels = self.channels.lock().ok()?;
        let channel = channels.get(task_id)?;
        Some(if channel.every_event > 0 {
            Watch::Everything
        } else {
            Watch::End
        })
    }

    fn publish(
        &self,
        task_id: &str,
        events: Vec<StreamResponse>,
        seq: Option<Seq>,
        ended: Option<Task>,
    ) {
        let Ok(mut channels) = self.channels.lock() else {
            return;
        };
        let Some(channel) = channels.get(task_id) else {
            return;
        };
        let last = ended.is_some();
        if let Some(task) = ended {
            // Set before the last event goes out: whoever sees it end finds it there.
            let _ = channel.ended.set(task);
        }
        for event in events {
            let event = Announced { seq, event };
            // The last subscriber may have just left: nobody is watching, which is fine.
            let to_stops = channel.stops.as_ref().filter(|_| stops(&event));
            match (&channel.every, to_stops) {
                (Some(every), Some(to_stops)) => {
                    let _ = to_stops.send(event.clone());
                    let _ = every.send(event);
                }
                (Some(every), None) => {
                    let _ = every.send(event);
                }
                (None, Some(to_stops)) => {
                    let _ = to_stops.send(event);
                }
                (None, None) => {}
            }
        }
        if last {
            channels.remove(task_id);
        }
    }
}

/// A subscriber of `task_id` goes: its channel goes with it when it was the last one.
fn leave(
    channels: &Channels,
    task_id: &str,
    watch: Watch,
    events: &broadcast::Receiver<Announced>,
) {
    let Ok(mut channels) = channels.lock() else {
        return;
    };
    // Counted under the lock, so nobody subscribes in between. The task's channel may be a
    // newer one (the old one went with the task's last event): only ours is counted down,
    // and goes once nobody subscribes to it.
    let Some(channel) = channels.get_mut(task_id) else {
        return;
    };
    if !channel.holds(watch, events) {
        return;
    }
    let count = channel.count(watch);
    *count = count.saturating_sub(1);
    if channel.every_event == 0 && channel.end_only == 0 {
        channels.remove(task_id);
    }
}

/// Called with the subscription's receiver when it is dropped.
type Leave = Box<dyn FnOnce(&broadcast::Receiver<Announced>) + Send + Sync>;

/// One subscriber's events of a task. When the last subscriber of a task goes, so does
/// the task's channel: a task that is never written again (it ended, or waits paused)
/// keeps nothing behind for subscribers that left.
pub struct Subscription {
    events: broadcast::Receiver<Announced>,
    ended: Ended,
    leave: Option<Leave>,
}

impl Subscription {
    /// A subscription a feed hands out: `leave` runs when it is dropped.
    pub fn new(
        events: broadcast::Receiver<Announced>,
        ended: Ended,
        leave: impl FnOnce(&broadcast::Receiver<Announced>) + Send + Sync + 'static,
    ) -> Self {
        Self {
            events,
            ended,
            leave: Some(Box::new(leave)),
        }
    }

    /// The task as it ended, once this subscription has seen it end; the same as the
    /// store holds, shared by the task's subscribers.
    pub fn ended(&self) -> Ended {
        self.ended.clone()
    }
}

impl std::ops::Deref for Subscription {
    type Target = broadcast::Receiver<Announced>;

    fn deref(&self) -> &Self::Target {
        &self.events
    }
}

impl std::ops::DerefMut for Subscription {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.events
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(leave) = self.leave.take() {
            leave(&self.events);
        }
    }
}
