//! Running the example agents as real child processes on 127.0.0.1:0.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A child agent process, killed when dropped.
pub struct AgentProcess {
    pub child: Child,
    pub url: String,
}

impl AgentProcess {
    /// Starts `a2a-tck-sut` (with a SQLite store when given) and waits for its address.
    pub fn tck_sut(store: Option<&Path>) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_a2a-tck-sut"));
        command.args(["--listen", "127.0.0.1:0"]);
        if let Some(store) = store {
            command.arg("--store").arg(store);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("a2a-tck-sut starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("reads the address line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Self { child, url }
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill(mut self) {
        self.child.kill().expect("kill");
        self.child.wait().expect("reap");
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn workspace_root() -> PathBuf {
    sagaplane_examples::workspace_root()
}

/// The interop virtualenv's interpreter (scripts/setup-interop creates it).
pub fn python() -> PathBuf {
    let venv = workspace_root().join(".interop/venv/bin/python");
    assert!(
        venv.exists(),
        "{} is missing: run scripts/setup-interop (scripts/test does it)",
        venv.display()
    );
    venv
}

/// The folder holding the JavaScript interop client with its node_modules.
pub fn js_dir() -> PathBuf {
    let dir = workspace_root().join("tests/interop/js");
    assert!(
        dir.join("node_modules/@a2a-js/sdk").exists(),
        "@a2a-js/sdk is not installed in {}: run scripts/setup-interop (scripts/test does it)",
        dir.display()
    );
    dir
}

/// Runs a client command and parses the one JSON object it prints.
pub fn run_client(command: &mut Command) -> serde_json::Value {
    let out = command.output().expect("client runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {}\n{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("client printed {stdout:?}: {e}"))
}
