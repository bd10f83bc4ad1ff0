//! The crate's one error type.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A read or write failed: the disk, the database (out of reach, or refusing the
    /// statement), or what was stored. The caller's store decides what its caller sees.
    #[error("{0}")]
    Store(String),
    /// Configuration that cannot work: a database URL, a file that cannot be opened or
    /// locked, a schema newer than this binary knows.
    #[error("{0}")]
    Config(String),
}

impl Error {
    pub(crate) fn store(message: impl Into<String>) -> Self {
        Self::Store(message.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
