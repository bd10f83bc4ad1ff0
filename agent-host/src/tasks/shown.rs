//! What a stream has shown already. A stream starts with the task as read after its
//! subscription, so an event of a write that read already includes can still arrive after
//! it (its announcement was on its way: from another replica, it comes over the
//! database). Such a write's events are dropped, so that the stream never goes back to
//! what is older than what it showed.
//!
//! An agent that keeps a record of its own (the executor's journal) tags each write's
//! events with the write's sequence in it (`Seq`), and the task as read with the sequence
//! it reaches: an event is late when the first task reaches its write, or when the stream
//! has shown a later write's events (across a takeover, two replicas' announcements need
//! not arrive in order). Where there is no sequence to compare (a task that is its own
//! record, or one its request prepared, which no record holds yet), statuses are told by
//! their messages instead: one whose message the first task holds was shown; from the
//! first new one on, a sequence decides where the events carry one. An artifact event with nothing to compare passes:
//! an artifact written alone must reach the stream at once.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use super::{Announced, Seq};
use crate::sdk::{StreamResponse, Task, TaskState};

/// What a stream has shown, to tell a late event from a new one.
#[derive(Debug)]
pub struct Shown {
    /// The lowest sequence still new: past the first task's, and no lower than the
    /// newest write whose events the stream has shown; `None` until one is known.
    next: Option<Seq>,
    /// For events without a sequence: the first task's statuses, until a status newer
    /// than them arrives.
    untagged: Option<Statuses>,
}

/// The statuses of the task a stream started with.
#[derive(Debug)]
struct Statuses {
    /// The time of the task's status when it was read.
    at: DateTime<Utc>,
    state: TaskState,
    /// The messages it holds (each status's message joins the history).
    messages: HashSet<String>,
}

impl Shown {
    /// What `first` shows, read at `seq` of its agent's record (`None`: it has none, or
    /// none yet).
    pub fn of(first: &Task, seq: Option<Seq>) -> Self {
        let untagged = first.status.timestamp.map(|at| Statuses {
            at,
            state: first.status.state.clone(),
            messages: first
                .history
                .iter()
                .flatten()
                .chain(first.status.message.as_ref())
                .map(|message| message.message_id.clone())
                .collect(),
        });
        Self {
            next: seq.map(|seq| seq.saturating_add(1)),
            untagged,
        }
    }

    /// The stream now shows a task read at `seq` (after it fell behind): only what is
    /// newer follows.
    pub fn reread(&mut self, seq: Option<Seq>) {
        if let Some(seq) = seq {
            let past = seq.saturating_add(1);
            self.next = Some(self.next.map_or(past, |next| next.max(past)));
        }
    }

    /// Takes `announced`: the event to send, or `None` when the stream showed it already.
    pub fn take(&mut self, announced: Announced) -> Option<StreamResponse> {
        let Announced { seq, event } = announced;
        if let (Some(seq), Some(next)) = (seq, self.next) {
            if seq < next {
                return None;
            }
            self.next = Some(seq);
            return Some(event);
        }
        let StreamResponse::StatusUpdate(update) = &event else {
            return Some(event);
        };
        if let Some(statuses) = &self.untagged {
            let status = &update.status;
            let message = status.message.as_ref().map(|m| m.message_id.as_str());
            if statuses.was_shown(status.timestamp, &status.state, message) {
                return None;
            }
            // The first status newer than the task: every later one is new.
            self.untagged = None;
        }
        // A write the stream shows: only what is as new follows.
        if seq.is_some() {
            self.next = seq;
        }
        Some(event)
    }
}

impl Statuses {
    /// Whether a status at `at`, in `state`, with the message `message_id`, is one the
    /// first task already showed. A status's message joins the task's history in the same
    /// write, so its id decides; a status without one is taken as shown only when it is
    /// the very status the task showed. Times are not compared otherwise: after a
    /// takeover, a newer status may come from a replica whose clock is a little behind.
    fn was_shown(
        &self,
        at: Option<DateTime<Utc>>,
        state: &TaskState,
        message_id: Option<&str>,
    ) -> bool {
        match message_id {
            Some(id) => self.messages.contains(id),
            None => at == Some(self.at) && *state == self.state,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdk::{Artifact, TaskArtifactUpdateEvent, TaskStatus, TaskStatusUpdateEvent};

    fn status(state: TaskState, at_ms: i64, text: &str) -> (TaskStatus, String) {
        let message = crate::agent_message(text.to_owned(), None);
        let id = message.message_id.clone();
        (
            TaskStatus {
                state,
                message: Some(message),
                timestamp: DateTime::from_timestamp_millis(at_ms),
            },
            id,
        )
    }

    fn update(status: TaskStatus) -> StreamResponse {
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            status,
            metadata: None,
        })
    }

    fn artifact() -> StreamResponse {
        StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            artifact: Artifact {
                artifact_id: "ledger".into(),
                name: None,
                description: None,
                parts: Vec::new(),
                metadata: None,
                extensions: None,
            },
            append: None,
            last_chunk: None,
            metadata: None,
        })
    }

    #[test]
    fn statuses_the_first_task_shows_are_dropped_until_a_newer_one_arrives() {
        let (older, _) = status(TaskState::Working, 1_000, "s2: succeeded");
        let (same_write, same_id) = status(TaskState::Working, 2_000, "s3: started");
        // Newer, from a replica whose clock is behind: its message is new, so it is.
        let (newer, _) = status(TaskState::Working, 500, "s3: succeeded");
        let first = Task {
            id: "t".into(),
            context_id: "c".into(),
            status: same_write.clone(),
            artifacts: None,
            history: Some(vec![
                older.message.clone().unwrap(),
                same_write.message.clone().unwrap(),
            ]),
            metadata: None,
        };
        assert_eq!(first.history.as_ref().unwrap()[1].message_id, same_id);
        let mut shown = Shown::of(&first, None);
        let untagged = |event| Announced { seq: None, event };

        assert_eq!(
            shown.take(untagged(update(older.clone()))),
            None,
            "older: dropped"
        );
        assert_eq!(
            shown.take(untagged(update(same_write))),
            None,
            "the status it shows"
        );
        assert_eq!(
            shown.take(untagged(artifact())),
            Some(artifact()),
            "artifacts pass"
        );
        let newer = update(newer);
        assert_eq!(shown.take(untagged(newer.clone())), Some(newer), "new");
        assert_eq!(
            shown.take(untagged(update(older.clone()))),
            Some(update(older)),
            "once a newer status arrived, the filter is done"
        );
    }

    /// A first task with no time on its status and no sequence: nothing to compare with,
    /// every event passes.
    #[test]
    fn without_a_time_or_a_sequence_everything_passes() {
        let (status, _) = status(TaskState::Working, 1_000, "s1: started");
        let mut first = Task {
            id: "t".into(),
            context_id: "c".into(),
            status: status.clone(),
            artifacts: None,
            history: Some(vec![status.message.clone().unwrap()]),
            metadata: None,
        };
        first.status.timestamp = None;
        let mut shown = Shown::of(&first, None);
        let event = update(status);
        assert_eq!(
            shown.take(Announced {
                seq: None,
                event: event.clone()
            }),
            Some(event)
        );
    }

    /// Tagged events are told by their write's sequence alone: statuses and artifacts of
    /// a write the first task reaches are dropped, whatever their messages, and so is a
    /// write older than one the stream has shown (two replicas' announcements across a
    /// takeover).
    #[test]
    fn tagged_events_of_a_write_the_stream_reached_are_dropped() {
        let (status_at_3, _) = status(TaskState::Working, 3_000, "s2: succeeded");
        let first = Task {
            id: "t".into(),
            context_id: "c".into(),
            status: status_at_3.clone(),
            artifacts: None,
            // Its messages are not what decides: the first task holds none of them.
            history: None,
            metadata: None,
        };
        let mut shown = Shown::of(&first, Some(3));
        let at = |seq, event| Announced {
            seq: Some(seq),
            event,
        };
        let (late, _) = status(TaskState::Working, 2_000, "s2: started");
        assert_eq!(shown.take(at(2, artifact())), None, "an older ledger");
        assert_eq!(shown.take(at(2, update(late))), None, "an older status");
        assert_eq!(
            shown.take(at(3, update(status_at_3))),
            None,
            "the write it reaches"
        );

        let (fourth, _) = status(TaskState::Working, 4_000, "s3: started");
        assert_eq!(shown.take(at(4, artifact())), Some(artifact()));
        assert_eq!(
            shown.take(at(4, update(fourth.clone()))),
            Some(update(fourth.clone())),
            "every event of a new write passes"
        );
        let (sixth, _) = status(TaskState::Working, 6_000, "s4: started");
        assert_eq!(
            shown.take(at(6, update(sixth.clone()))),
            Some(update(sixth))
        );
        let (fifth, _) = status(TaskState::Working, 5_000, "s3: succeeded");
        assert_eq!(
            shown.take(at(5, update(fifth))),
            None,
            "older than a write shown: from a replica that lost the saga"
        );

        shown.reread(Some(9));
        assert_eq!(
            shown.take(at(9, artifact())),
            None,
            "the task read again reaches it"
        );
        assert_eq!(shown.take(at(10, artifact())), Some(artifact()));
    }

    /// A first task read without its record (no sequence) tells tagged statuses by their
    /// messages until a new one arrives; from then on, sequences decide.
    #[test]
    fn without_a_first_sequence_messages_decide_until_a_new_status() {
        let (shown_status, _) = status(TaskState::Working, 1_000, "s1: started");
        let first = Task {
            id: "t".into(),
            context_id: "c".into(),
            status: shown_status.clone(),
            artifacts: None,
            history: Some(vec![shown_status.message.clone().unwrap()]),
            metadata: None,
        };
        let mut shown = Shown::of(&first, None);
        let at = |seq, event| Announced {
            seq: Some(seq),
            event,
        };
        assert_eq!(
            shown.take(at(1, update(shown_status))),
            None,
            "its message is the first task's"
        );
        assert_eq!(
            shown.take(at(1, artifact())),
            Some(artifact()),
            "nothing to compare"
        );
        let (new, _) = status(TaskState::Working, 2_000, "s1: succeeded");
        assert_eq!(shown.take(at(2, update(new.clone()))), Some(update(new)));
        let (late, _) = status(TaskState::Working, 1_500, "s1: retried");
        assert_eq!(
            shown.take(at(1, update(late))),
            None,
            "older than one shown"
        );
        assert_eq!(shown.take(at(1, artifact())), None);
    }
}
