//! The process's log captured in memory, written through the writer the binaries log
//! with (`OneRecordPerLine`), for tests that check what untrusted text does to it.

use std::io::Write;
use std::sync::{Arc, Mutex};

use agent_host::process::OneRecordPerLine;

/// Everything logged since `capture`.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The log so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// Sends this process's log to memory (once per test binary).
pub fn capture() -> Captured {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_writer(move || OneRecordPerLine::new(writer.clone(), false))
        .with_ansi(false)
        .init();
    captured
}
