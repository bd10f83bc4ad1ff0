//! The executor's one error type. Each cause that callers branch on has its variant;
//! store and system failures keep their source (`#[source]`) for the log. What a caller
//! sees of an internal failure is `Error::reply`: a short text and an error id that the
//! log line carries, never a path, an SQL message or another store's text.

/// What can go wrong in the executor library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A store shared with the other agents (the state file's writer, the task store)
    /// failed.
    #[error(transparent)]
    Storage(#[from] agent_host::Error),
    /// A read or write of the executor's own tables failed.
    #[error("{what}")]
    Database {
        what: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    /// A file or directory could not be made, moved or synced.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Something could not be encoded or decoded as JSON.
    #[error("cannot encode {what}")]
    Encoding {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The journal holds what this executor cannot use as it is (a format it does not
    /// read, a saga begun twice or never begun).
    #[error("journal: {0}")]
    Journal(String),
    /// The metrics could not be encoded.
    #[error("cannot encode the metrics")]
    Metrics(#[source] std::fmt::Error),
    /// A card or request refused, with the reason to show the caller.
    #[error("{0}")]
    Refused(String),
    /// A plan refused at acceptance for its mandate's state (revoked, exhausted).
    #[error("{}: {}", .0.code, .0.message)]
    Mandate(shared_types::Violation),
    /// A plan could not become a saga.
    #[error("{0}")]
    Spec(#[from] crate::saga::SpecError),
    /// The accepting write was refused: a card or MCP server was registered (on another
    /// replica) after the plan was validated, which is then validated again.
    #[error(
        "cards or MCP servers were registered again and again while the plan was checked; send it again"
    )]
    RegistryChanged,
    /// The journal refused a write for a saga this journal's owner no longer drives
    /// (another owner claimed it, at a later epoch): the driver stops at once.
    #[error(
        "saga {saga_id}: the journal refused a write at epoch {epoch}; another owner drives it now"
    )]
    Fenced { saga_id: String, epoch: u64 },
    /// A write carrying forward calls was refused, and nothing written: the journal found
    /// the saga's mandate revoked in the write itself (`Unrevoked`). The driver then
    /// journals the calls as not made, and the saga unwinds.
    #[error(
        "saga {saga_id}: its mandate was revoked; the write carrying its next calls was refused"
    )]
    RevokedAtWrite { saga_id: String },
}

/// The storage engine's failures are the stores' failures, as `agent_host` reports them.
impl From<sagaplane_storage::Error> for Error {
    fn from(e: sagaplane_storage::Error) -> Self {
        Self::Storage(e.into())
    }
}

impl Error {
    /// Whether the cause is the caller's (a refusal, with its reason for them), or one
    /// they can act on (send the plan again), rather than the executor's.
    pub fn is_callers(&self) -> bool {
        matches!(
            self,
            Self::Refused(_) | Self::Mandate(_) | Self::Spec(_) | Self::RegistryChanged
        )
    }

    /// Whether a store failed (a database that cannot be reached, a state file that
    /// cannot be written): the same request may succeed once it answers again.
    pub fn is_store_failure(&self) -> bool {
        matches!(
            self,
            Self::Storage(agent_host::Error::Store(_)) | Self::Database { .. } | Self::Io { .. }
        )
    }

    /// The error and each of its causes, for the log.
    pub fn chain(&self) -> String {
        let mut chain = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            chain.push_str(": ");
            chain.push_str(&cause.to_string());
            source = cause.source();
        }
        chain
    }

    /// Logs this internal failure of `doing` with its whole chain of causes under a new
    /// error id, and returns what the caller is told: what failed and that id.
    pub fn reply(&self, doing: &str) -> String {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let id = &id[..12];
        tracing::error!(error_id = id, error = ?self.chain(), "{doing} failed");
        format!("{doing} failed inside the executor (error id {id}; its log has the cause)")
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
