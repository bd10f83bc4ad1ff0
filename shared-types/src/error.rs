//! The crate's one error type. Variants exist where callers branch: input that is not
//! acceptable JSON (with its position), keys, the two signature verdicts, and cards.

/// Everything that can go wrong in `shared-types`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not acceptable JSON: a syntax error, not UTF-8, or not I-JSON.
    #[error("{message}")]
    Json {
        message: String,
        /// 1-based line and column where the parser stopped, when known.
        line: Option<usize>,
        column: Option<usize>,
    },
    /// A runtime expression or JSON pointer that does not parse.
    #[error("{0}")]
    Expr(String),
    /// A key that cannot be used: wrong type, public where private is needed, bad bytes.
    #[error("{0}")]
    Key(String),
    /// The object carries no usable signature, or one that does not match its content.
    #[error("{0}")]
    SignatureInvalid(String),
    /// Every signature is by a key this party does not trust.
    #[error("signed by {kids}, which is not a trusted key")]
    SignerUntrusted { kids: String },
    /// An agent card or catalog entry that cannot be curated, with the reason.
    #[error("{0}")]
    Card(String),
}

impl Error {
    pub(crate) fn json(message: impl Into<String>) -> Self {
        Self::Json {
            message: message.into(),
            line: None,
            column: None,
        }
    }

    pub(crate) fn from_serde(e: &serde_json::Error) -> Self {
        let known = e.line() > 0;
        Self::Json {
            message: e.to_string(),
            line: known.then(|| e.line()),
            column: known.then(|| e.column()),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
