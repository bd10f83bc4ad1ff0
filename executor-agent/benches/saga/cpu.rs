//! CPU accounting for the benchmark, read from `/proc`: the process, each thread group
//! (by thread name) and the whole machine between two samples; and the count of group
//! commits made so far on the executor's state file (journal and task store).

use std::collections::HashMap;
use std::time::Duration;

use sagaplane_storage::sqlite::commits;

use crate::{EXECUTOR_THREADS, TOOL_THREADS};

/// `/proc` reports CPU times in USER_HZ ticks, 100 per second on Linux.
const TICK: Duration = Duration::from_millis(10);

/// CPU used so far: the whole process, per thread by thread id (with its name), and the
/// whole machine (busy, idle and stolen, from `/proc/stat`).
#[derive(Debug, Clone, Default)]
pub(crate) struct CpuSample {
    process_ticks: u64,
    threads: HashMap<u32, (String, u64)>,
    machine: MachineTicks,
}

#[derive(Debug, Clone, Copy, Default)]
struct MachineTicks {
    busy: u64,
    idle: u64,
    stolen: u64,
}

fn machine_ticks() -> MachineTicks {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return MachineTicks::default();
    };
    let n: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let field = |i: usize| n.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    MachineTicks {
        busy: field(0) + field(1) + field(2) + field(5) + field(6),
        idle: field(3) + field(4),
        stolen: field(7),
    }
}

/// `comm` and utime + stime of a `/proc/.../stat` line.
fn parse_stat(line: &str) -> Option<(String, u64)> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let name = line[open + 1..close].to_owned();
    let fields: Vec<&str> = line[close + 2..].split(' ').collect();
    // After the name: state is field 3 of the line, utime 14 and stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

pub(crate) fn sample_cpu() -> CpuSample {
    let process_ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|l| parse_stat(&l))
        .map_or(0, |(_, t)| t);
    let mut threads = HashMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc/self/task") {
        for entry in entries.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            if let Some(sample) = std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|l| parse_stat(&l))
            {
                threads.insert(tid, sample);
            }
        }
    }
    CpuSample {
        process_ticks,
        threads,
        machine: machine_ticks(),
    }
}

/// CPU used between two samples: the process, per thread-name prefix, and the machine.
#[derive(Debug, Clone, Default)]
pub(crate) struct CpuUsed {
    pub(crate) process: Duration,
    pub(crate) by_group: Vec<(String, Duration)>,
    machine_busy: Duration,
    machine_idle: Duration,
    machine_stolen: Duration,
}

impl CpuUsed {
    pub(crate) fn between(before: &CpuSample, after: &CpuSample) -> Self {
        let mut groups: HashMap<String, u64> = HashMap::new();
        for (tid, (name, ticks)) in &after.threads {
            let earlier = before.threads.get(tid).map_or(0, |(_, t)| *t);
            *groups.entry(thread_group(name)).or_default() += ticks.saturating_sub(earlier);
        }
        let mut by_group: Vec<(String, Duration)> = groups
            .into_iter()
            .map(|(g, t)| (g, TICK * t as u32))
            .collect();
        by_group.sort_by_key(|(_, used)| std::cmp::Reverse(*used));
        let (m0, m1) = (before.machine, after.machine);
        Self {
            process: TICK * after.process_ticks.saturating_sub(before.process_ticks) as u32,
            by_group,
            machine_busy: TICK * m1.busy.saturating_sub(m0.busy) as u32,
            machine_idle: TICK * m1.idle.saturating_sub(m0.idle) as u32,
            machine_stolen: TICK * m1.stolen.saturating_sub(m0.stolen) as u32,
        }
    }

    /// How the machine's CPUs were spent over `window`, in CPUs.
    pub(crate) fn machine_line(&self, window: Duration) -> String {
        let cpus = |d: Duration| d.as_secs_f64() / window.as_secs_f64();
        format!(
            "CPUs in use over the window: this process {:.2}, other processes {:.2}, stolen by the host {:.2}, idle {:.2}",
            cpus(self.process),
            cpus(self.machine_busy.saturating_sub(self.process)),
            cpus(self.machine_stolen),
            cpus(self.machine_idle),
        )
    }

    pub(crate) fn add(&mut self, other: &CpuUsed) {
        self.process += other.process;
        self.machine_busy += other.machine_busy;
        self.machine_idle += other.machine_idle;
        self.machine_stolen += other.machine_stolen;
        for (group, used) in &other.by_group {
            match self.by_group.iter_mut().find(|(g, _)| g == group) {
                Some((_, total)) => *total += *used,
                None => self.by_group.push((group.clone(), *used)),
            }
        }
    }

    pub(crate) fn group(&self, name: &str) -> Duration {
        self.by_group
            .iter()
            .filter(|(g, _)| g == name)
            .map(|(_, d)| *d)
            .sum()
    }

    /// Everything but the tool agents' threads.
    pub(crate) fn executor(&self) -> Duration {
        self.process.saturating_sub(self.group(TOOL_THREADS))
    }
}

fn thread_group(name: &str) -> String {
    match name {
        n if n.starts_with(TOOL_THREADS) => TOOL_THREADS.into(),
        // Before the runtime's threads, whose prefix it shares.
        n if n.starts_with(STATE_WRITER) => "state-file writer thread".into(),
        n if n.starts_with(EXECUTOR_THREADS) => "executor runtime (async + blocking)".into(),
        _ => "other (main thread)".into(),
    }
}

/// The writer thread of the executor's state file (journal and task store).
const STATE_WRITER: &str = "executor-writer";

/// Transactions committed on the executor's state file (each one fsync).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Commits(pub(crate) u64);

impl Commits {
    pub(crate) fn now() -> Self {
        Self(commits("executor"))
    }

    pub(crate) fn since(self, before: Commits) -> Commits {
        Commits(self.0 - before.0)
    }
}
