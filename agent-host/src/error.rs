//! The crate's one error type; it becomes an A2A error without leaking internals.

use crate::sdk::A2AError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The task store failed (disk, database, encoding). Logged under an error id; callers
    /// see "internal error" and that id.
    #[error("{0}")]
    Store(String),
    /// A write expected another version of the task than the store holds (another
    /// writer wrote it since): nothing was written.
    #[error(
        "task {task_id} was written by another writer since this one read it; nothing was written"
    )]
    Conflict { task_id: String },
    /// A protocol-level answer for the caller (task not found, invalid params, …).
    #[error("{0}")]
    Protocol(#[from] A2AError),
    /// Configuration that cannot work (bad key, unreadable card, listener failure).
    #[error("{0}")]
    Config(String),
    /// An outbound call failed before an A2A answer arrived (connect, timeout, HTTP status).
    #[error("{0}")]
    Transport(String),
}

impl Error {
    pub(crate) fn store(message: impl Into<String>) -> Self {
        Self::Store(message.into())
    }

    /// The A2A error a caller sees: protocol errors as they are, anything else as a
    /// generic internal error (the cause goes to the log).
    pub fn into_a2a(self) -> A2AError {
        match self {
            Self::Protocol(e) => e,
            other => {
                let id = uuid::Uuid::new_v4().simple().to_string();
                let id = &id[..12];
                tracing::error!(error_id = id, error = %other, "internal error");
                A2AError::internal(format!(
                    "internal error (error id {id}; the agent's log has the cause)"
                ))
            }
        }
    }
}

impl From<sagaplane_storage::Error> for Error {
    fn from(e: sagaplane_storage::Error) -> Self {
        match e {
            sagaplane_storage::Error::Store(why) => Self::Store(why),
            sagaplane_storage::Error::Config(why) => Self::Config(why),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
