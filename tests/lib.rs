//! Helpers shared by the end-to-end tests in `tests/tests/`: where the build's binaries
//! are, building the command line, and the interop virtualenv's interpreter.

use std::path::PathBuf;
use std::process::Command;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The build's `target/<profile>` directory (a test runs from its `deps/`).
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(PathBuf::from)
        .expect("target/<profile>/deps/<test>")
}

/// Runs `cargo build --quiet` with `args` from the workspace root, once per `done`.
fn build_once(done: &'static std::sync::Once, args: &[&str]) {
    done.call_once(|| {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--quiet"])
            .args(args)
            .current_dir(workspace_root())
            .status()
            .expect("cargo runs");
        assert!(status.success(), "cannot build {args:?}");
    });
}

/// Builds the `sagaplane` command line once per test binary (cargo does nothing when it
/// is up to date); `sagaplane demo` then builds the agents it starts.
pub fn sagaplane() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    build_once(&BUILT, &["-p", "sagaplane", "--bin", "sagaplane"]);
    build_dir().join("sagaplane")
}

/// Builds the `executor-agent` binary once per test binary; its path.
pub fn executor_agent() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    build_once(&BUILT, &["-p", "executor-agent", "--bin", "executor-agent"]);
    build_dir().join("executor-agent")
}

/// Builds the `planner-agent` binary once per test binary; its path.
pub fn planner_agent() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    build_once(&BUILT, &["-p", "planner-agent", "--bin", "planner-agent"]);
    build_dir().join("planner-agent")
}

/// Builds the demo's tool agents (`supplier-tool`, all six in one process with `--agent
/// all`) once per test binary; its path.
pub fn supplier_tool() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    build_once(
        &BUILT,
        &["-p", "sagaplane-examples", "--bin", "supplier-tool"],
    );
    build_dir().join("supplier-tool")
}

/// Builds every binary a demo starts (beside `sagaplane`, where `demo --no-build` looks
/// for them) once per test binary; the folder they are in.
pub fn demo_binaries() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    let bin = sagaplane().parent().map(PathBuf::from).unwrap_or_default();
    assert_eq!(executor_agent().parent(), Some(bin.as_path()));
    assert_eq!(planner_agent().parent(), Some(bin.as_path()));
    build_once(
        &BUILT,
        &[
            "-p",
            "sagaplane-examples",
            "--bin",
            "supplier-tool",
            "--bin",
            "checkout-mcp",
        ],
    );
    bin
}

/// The shell blocks of a manual page (```sh), in order, that a test runs as written:
/// a block after a line `<!-- variant: NAME -->` only for that `variant`; blocks fenced
/// otherwise (```sh-notest, ```console, …) are shown to the reader, never run.
pub fn shell_blocks(page: &str, variant: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    let mut only_for: Option<String> = None;
    let mut block: Option<(Option<String>, String)> = None;
    for line in page.lines() {
        if let Some((for_variant, text)) = &mut block {
            if line.trim_start().starts_with("```") {
                if for_variant.is_none() || for_variant.as_deref() == variant {
                    out.push(std::mem::take(text));
                }
                block = None;
            } else {
                text.push_str(line);
                text.push('\n');
            }
        } else if let Some(name) = line
            .strip_prefix("<!-- variant: ")
            .and_then(|rest| rest.strip_suffix(" -->"))
        {
            only_for = Some(name.to_owned());
        } else if line.trim() == "```sh" {
            block = Some((only_for.take(), String::new()));
        } else if line.trim_start().starts_with("```") {
            only_for = None;
        }
    }
    out
}

/// Runs `blocks` in order in one bash (`set -euo pipefail`, background jobs killed at
/// the end), from the workspace root, with `bin` first on `PATH`, `env` set, then
/// `epilogue`, within `timeout_secs`; whether it succeeded, and what it printed (stdout,
/// then stderr).
pub fn run_blocks(
    blocks: &[String],
    bin: &std::path::Path,
    env: &[(&str, &str)],
    epilogue: &str,
    timeout_secs: u32,
) -> (bool, String) {
    let script = format!(
        "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n\
         export PATH={bin:?}:\"$PATH\"\n{}\n{epilogue}\n",
        blocks.join("\n"),
    );
    let mut command = Command::new("timeout");
    command
        .args([timeout_secs.to_string().as_str(), "bash", "-c", &script])
        .current_dir(workspace_root())
        .env_remove("SAGAPLANE_TOKEN")
        .env_remove("SAGAPLANE_ADMIN_TOKEN");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("bash runs");
    let said = format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), said)
}

/// The interop virtualenv's interpreter (`scripts/setup-interop` creates it).
pub fn python() -> PathBuf {
    let venv = workspace_root().join(".interop/venv/bin/python");
    assert!(
        venv.exists(),
        "{} is missing: run scripts/setup-interop (scripts/test does it)",
        venv.display()
    );
    venv
}

/// `sagaplane demo --serve` with its agents up: what it printed before "agents up", read
/// with a bounded wait. Dropping it stops the demo (SIGTERM; it then stops every agent).
pub struct Served {
    child: std::process::Child,
    /// Every line printed up to and including "agents up; …".
    pub lines: Vec<String>,
    pub planner: String,
    pub executor: String,
    /// The run's folder (keys, tokens, credentials, data, logs).
    pub folder: PathBuf,
}

impl Served {
    /// Starts `sagaplane demo --serve` with `args` and waits (at most `wait`) until it
    /// says its agents are up.
    pub fn start(args: &[&str], wait: std::time::Duration) -> Self {
        use std::io::BufRead;
        let mut child = Command::new(sagaplane())
            .args(["demo", "--serve"])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("sagaplane demo --serve starts");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, receiver) = std::sync::mpsc::channel();
        // Keeps reading to the end, so the demo can always print.
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let _ = sender.send(line);
            }
        });
        let deadline = std::time::Instant::now() + wait;
        let mut lines = Vec::new();
        let mut served = Self {
            child,
            lines: Vec::new(),
            planner: String::new(),
            executor: String::new(),
            folder: PathBuf::new(),
        };
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = receiver.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "demo --serve did not say its agents were up within {wait:?}; it printed:\n{}",
                    lines.join("\n")
                )
            });
            let up = line.starts_with("agents up");
            lines.push(line);
            if up {
                break;
            }
        }
        let after = |prefix: &str| {
            lines
                .iter()
                .find_map(|l| l.strip_prefix(prefix))
                .map(|rest| {
                    rest.split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_owned()
                })
                .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{}", lines.join("\n")))
        };
        served.planner = after("planner listening on ");
        served.executor = after("executor listening on ");
        served.folder = PathBuf::from(after("demo folder: "));
        served.lines = lines;
        served
    }

    /// The printed command line that starts with `sagaplane <words>`, as arguments.
    pub fn command(&self, words: &str) -> Vec<String> {
        let line = self
            .lines
            .iter()
            .map(|l| l.trim())
            .find(|l| l.starts_with(&format!("sagaplane {words} ")))
            .unwrap_or_else(|| {
                panic!("no `sagaplane {words}` printed:\n{}", self.lines.join("\n"))
            });
        split_shell_words(line)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// Splits a printed command line at spaces outside double quotes (what the demo prints).
fn split_shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}
