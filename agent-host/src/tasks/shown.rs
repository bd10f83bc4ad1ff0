//! What a stream has shown already. A stream starts with the task as read after its
//! subscription, so an event of a write that read already includes can still arrive after
//! it (its announcement was on its way: from another replica, it comes over the
//! database). Such a write's statuses are dropped, so that the stream never goes back to
//! a status older than the one it showed. Artifact events carry no time and pass: an
//! artifact written alone must reach the stream at once.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use crate::sdk::{StreamResponse, Task, TaskState};

/// The statuses of the task a stream started with, to tell a late event from a new one.
#[derive(Debug)]
pub struct Shown {
    /// The time of the task's status when it was read.
    at: DateTime<Utc>,
    state: TaskState,
    /// The messages it holds (each status's message joins the history).
    messages: HashSet<String>,
}

impl Shown {
    /// What `first` shows; `None` when its status has no time to compare with.
    pub fn of(first: &Task) -> Option<Self> {
        let at = first.status.timestamp?;
        let messages = first
            .history
            .iter()
            .flatten()
            .chain(first.status.message.as_ref())
            .map(|message| message.message_id.clone())
            .collect();
        Some(Self {
            at,
            state: first.status.state.clone(),
            messages,
        })
    }

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

    /// Takes `event`: whether to send it, and whether late statuses may still come
    /// (`false`: the first status newer than the task has arrived, every later one is new).
    pub fn take(&mut self, event: StreamResponse) -> (Option<StreamResponse>, bool) {
        match &event {
            StreamResponse::StatusUpdate(update) => {
                let status = &update.status;
                let message = status.message.as_ref().map(|m| m.message_id.as_str());
                if self.was_shown(status.timestamp, &status.state, message) {
                    (None, true)
                } else {
                    (Some(event), false)
                }
            }
            _ => (Some(event), true),
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
        let mut shown = Shown::of(&first).unwrap();

        assert_eq!(shown.take(update(older)), (None, true), "older: dropped");
        assert_eq!(
            shown.take(update(same_write)),
            (None, true),
            "the status it shows"
        );
        assert_eq!(
            shown.take(artifact()),
            (Some(artifact()), true),
            "artifacts pass"
        );
        let newer = update(newer);
        assert_eq!(
            shown.take(newer.clone()),
            (Some(newer), false),
            "new: the filter is done"
        );
    }
}
