//! What every agent binary does the same way: logs on stderr (plain when it is not a
//! terminal, `RUST_LOG` to filter, `info` by default; one record, one line, whatever
//! text a caller or a peer put in it), and shutdown on Ctrl-C or SIGTERM through one
//! cancellation token.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, Write};

use tokio_util::sync::CancellationToken;

/// Installs the log subscriber. Call once, first thing in `main`.
pub fn init_logging() {
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(move || OneRecordPerLine::new(std::io::stderr(), ansi))
        .with_ansi(ansi)
        .init();
}

/// A log writer that keeps each record on one line: the formatter hands it one whole
/// record per `write`, and every control character in it but the closing newline (a
/// newline or carriage return in a pointer, a goal, a peer's error) is written escaped,
/// so that no text from outside can forge a record or hide one. With `ansi` (a terminal)
/// the formatter's own colour sequences are kept.
#[derive(Debug)]
pub struct OneRecordPerLine<W> {
    inner: W,
    ansi: bool,
}

impl<W: Write> OneRecordPerLine<W> {
    pub fn new(inner: W, ansi: bool) -> Self {
        Self { inner, ansi }
    }
}

impl<W: Write> Write for OneRecordPerLine<W> {
    fn write(&mut self, record: &[u8]) -> io::Result<usize> {
        self.inner.write_all(&escape_record(record, self.ansi))?;
        Ok(record.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// `record` with its control characters escaped (`\n`, `\r`, `\u{…}`), except one
/// closing newline, tabs and, with `ansi`, escape characters.
pub fn escape_record(record: &[u8], ansi: bool) -> Cow<'_, [u8]> {
    let (body, end) = match record.strip_suffix(b"\n") {
        Some(body) => (body, &b"\n"[..]),
        None => (record, &b""[..]),
    };
    let text = String::from_utf8_lossy(body);
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\t' && !(ansi && c == '\u{1b}'))
            || matches!(c, '\u{2028}' | '\u{2029}')
    };
    if !text.contains(unsafe_char) {
        return Cow::Borrowed(record);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(end);
    Cow::Owned(bytes)
}

/// Returns at the first Ctrl-C or SIGTERM.
pub async fn interrupted() {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        return;
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Cancels `shutdown` at the first Ctrl-C or SIGTERM (spawn it).
pub async fn shutdown_on_signal(shutdown: CancellationToken) {
    interrupted().await;
    shutdown.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_stays_on_one_line_whatever_it_quotes() {
        let forged = "WARN saga waits reason=cannot bind #/lo\n2026-12-01 INFO card registered agent=payments\r\u{2028}x\x1b[31m\n";
        let escaped = escape_record(forged.as_bytes(), false);
        let text = std::str::from_utf8(&escaped).unwrap();
        assert_eq!(text.matches('\n').count(), 1, "{text}");
        assert!(text.ends_with('\n'));
        assert!(
            text.contains("#/lo\\n2026-12-01 INFO card registered"),
            "{text}"
        );
        assert!(text.contains("\\r\\u{2028}x\\u{1b}[31m"), "{text}");
        // On a terminal the formatter's colours stay; newlines are still escaped.
        let coloured = escape_record(b"\x1b[32mINFO\x1b[0m a\nb\n", true);
        assert_eq!(&*coloured, b"\x1b[32mINFO\x1b[0m a\\nb\n");
        // An ordinary record is passed through untouched.
        assert!(matches!(
            escape_record(b"INFO ready\tok\n", false),
            Cow::Borrowed(_)
        ));
    }
}
