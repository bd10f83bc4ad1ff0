//! The executor's one error type.

/// What can go wrong in the executor library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The journal could not be read or written (disk, database, encoding).
    #[error("journal: {0}")]
    Journal(String),
    /// A card or request refused, with the reason to show the caller.
    #[error("{0}")]
    Refused(String),
    /// A plan refused at acceptance for its mandate's state (revoked, exhausted).
    #[error("{}: {}", .0.code, .0.message)]
    Mandate(shared_types::Violation),
    /// A plan could not become a saga.
    #[error("{0}")]
    Spec(#[from] crate::saga::SpecError),
    /// The journal refused a write for a saga this journal's owner no longer drives
    /// (another owner claimed it, at a later epoch): the driver stops at once.
    #[error(
        "saga {saga_id}: the journal refused a write at epoch {epoch}; another owner drives it now"
    )]
    Fenced { saga_id: String, epoch: u64 },
}

impl From<agent_host::Error> for Error {
    fn from(e: agent_host::Error) -> Self {
        Self::Journal(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
