//! Writing results: pretty JSON to a file or stdout, and private files with mode 0600.

use std::io::Write;
use std::path::Path;

use serde_json::Value;

use crate::failure::Failure;

/// Pretty JSON with a trailing newline.
pub fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    text.push('\n');
    text
}

/// Writes `text` to `out`, or to stdout when there is none.
pub fn emit(text: &str, out: Option<&Path>) -> Result<(), Failure> {
    match out {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| Failure::unusable(format!("cannot write {}: {e}", path.display()))),
        None => std::io::stdout()
            .write_all(text.as_bytes())
            .map_err(|e| Failure::unusable(format!("cannot write to stdout: {e}"))),
    }
}

/// Creates a new file readable by its owner only; refuses to replace one unless `force`.
pub fn write_new(path: &Path, text: &str, private: bool, force: bool) -> Result<(), Failure> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options.open(path).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AlreadyExists {
            " (pass --force to replace it)"
        } else {
            ""
        };
        Failure::unusable(format!("cannot create {}: {e}{hint}", path.display()))
    })?;
    file.write_all(text.as_bytes())
        .map_err(|e| Failure::unusable(format!("cannot write {}: {e}", path.display())))
}
