//! Instructions per step (`WHOLE_PATH_CALLGRIND=1`): the measured executors run under
//! valgrind's callgrind with instrumentation off; each round turns it on for its window,
//! dumps, and reads the executors' instructions per step. CPU time from `/proc` moves by
//! ±10% from one round to the next on a shared machine; an instruction count does not,
//! so a change in it is a change in the work done, and a rise in CPU per step that the
//! count does not show is time per instruction (caches, the kernel, the other threads on
//! the cores). Callgrind runs the executor some ten times slower: the rounds' other
//! figures are then the slowed executor's, and only this line is comparable across runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{Executor, STEPS, scrape};

/// Whether the measured executors run under callgrind.
pub fn wanted() -> bool {
    std::env::var_os("WHOLE_PATH_CALLGRIND").is_some_and(|v| !v.is_empty() && v != "0")
}

/// `binary` under callgrind, instrumentation off until a round turns it on, its dumps
/// written in `dir`.
pub fn command(binary: &Path, dir: &Path) -> Command {
    let found = Command::new("valgrind")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "WHOLE_PATH_CALLGRIND needs valgrind on the PATH (apt-get install valgrind)"
    );
    let mut command = Command::new("valgrind");
    command
        .arg("--tool=callgrind")
        .arg("--instr-atstart=no")
        .arg("-q")
        .arg(format!(
            "--callgrind-out-file={}",
            dir.join("callgrind.%p").display()
        ))
        .arg(binary);
    command
}

/// The executors' tool calls made so far (one per step of a completed saga).
async fn tool_calls(executors: &[Executor]) -> f64 {
    let mut calls = 0.0;
    for executor in executors {
        calls += scrape(&executor.url)
            .await
            .iter()
            .filter(|(name, _)| name.starts_with("sagaplane_tool_calls_total"))
            .map(|(_, value)| value)
            .sum::<f64>();
    }
    calls
}

fn control(pid: u32, what: &[&str]) {
    let status = Command::new("callgrind_control")
        .args(what)
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("callgrind_control (valgrind's) runs");
    assert!(status.success(), "callgrind_control {what:?} {pid} failed");
}

/// One round's instrumented window.
pub struct Window {
    dumps: Vec<(u32, PathBuf)>,
    calls_before: f64,
}

impl Window {
    /// Counters zeroed and instrumentation on, for each executor (when `wanted`).
    pub async fn open(executors: &[Executor]) -> Option<Self> {
        if !wanted() {
            return None;
        }
        let dumps = executors
            .iter()
            .map(|e| {
                let pid = e.child.id();
                control(pid, &["-z"]);
                control(pid, &["-i", "on"]);
                (pid, e.dir.clone())
            })
            .collect();
        Some(Self {
            dumps,
            calls_before: tool_calls(executors).await,
        })
    }

    /// Instrumentation off and a dump per executor: their instructions per step over the
    /// window, and the steps it saw.
    pub async fn close(self, executors: &[Executor]) -> (f64, f64) {
        let steps = tool_calls(executors).await - self.calls_before;
        let mut instructions = 0u64;
        for (pid, dir) in &self.dumps {
            control(*pid, &["-i", "off"]);
            let known = dump_files(dir, *pid);
            control(*pid, &["-d"]);
            instructions += new_dump_total(dir, *pid, &known);
        }
        (instructions as f64 / steps.max(1.0), steps)
    }
}

fn dump_files(dir: &Path, pid: u32) -> Vec<PathBuf> {
    let prefix = format!("callgrind.{pid}.");
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(&prefix))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The instruction total of the dump `pid` writes after `known`: waited for, since
/// callgrind writes it at its next check for commands.
fn new_dump_total(dir: &Path, pid: u32, known: &[PathBuf]) -> u64 {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(120) {
        for path in dump_files(dir, pid) {
            if known.contains(&path) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            // The last line callgrind writes; `summary:` comes first.
            if let Some(total) = text
                .lines()
                .find_map(|line| line.strip_prefix("totals:"))
                .and_then(|t| t.split_whitespace().next())
                .and_then(|t| t.parse().ok())
            {
                return total;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("callgrind wrote no dump for pid {pid} within 120 s");
}

/// The line a round adds under callgrind.
pub fn line(instructions_per_step: f64, steps: f64) -> String {
    format!(
        "  executor instructions (callgrind, user space): {:.0} k per step, {:.2} M per saga, over {steps:.0} steps",
        instructions_per_step / 1e3,
        instructions_per_step * STEPS as f64 / 1e6,
    )
}
