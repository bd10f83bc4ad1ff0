//! How a command fails: an exit status and one line for stderr.

use std::fmt;

/// A command's failure. Status 1 means "checked, and the answer is no" (an invalid plan,
/// a signature that does not verify); status 2 means the input could not be used.
#[derive(Debug)]
pub struct Failure {
    pub status: u8,
    pub message: String,
}

impl Failure {
    pub fn rejected(message: impl Into<String>) -> Self {
        Self {
            status: 1,
            message: message.into(),
        }
    }

    pub fn unusable(message: impl Into<String>) -> Self {
        Self {
            status: 2,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}
