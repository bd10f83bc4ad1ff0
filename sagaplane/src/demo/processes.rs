//! The demo's child processes: finding (or building) the sibling binaries, starting each
//! one and reading the address it prints, killing it (SIGKILL, for the crash mode) and
//! stopping everything when the demo ends or is interrupted.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::failure::Failure;

/// The binaries the demo starts, by package.
const BINARIES: [(&str, &str); 4] = [
    ("executor-agent", "executor-agent"),
    ("planner-agent", "planner-agent"),
    ("sagaplane-examples", "supplier-tool"),
    ("sagaplane-examples", "checkout-mcp"),
];

/// Where this executable lives: the other binaries of the same build sit beside it.
fn build_dir() -> Result<PathBuf, Failure> {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .ok_or_else(|| Failure::unusable("cannot tell where the sagaplane binary is"))
}

/// The workspace this binary was built from (to build the others), if it is still there.
fn workspace() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    root.join("Cargo.toml").exists().then(|| root.to_path_buf())
}

/// Paths of the demo's binaries. With `build`, cargo first brings them up to date (a
/// no-op when they are), so the README's one command builds everything it starts.
pub fn binaries(build: bool, progress: &dyn Fn(&str)) -> Result<Vec<PathBuf>, Failure> {
    let dir = build_dir()?;
    let paths: Vec<PathBuf> = BINARIES.iter().map(|(_, bin)| dir.join(bin)).collect();
    if build && let Some(root) = workspace() {
        progress(
            "building executor-agent, planner-agent, supplier-tool and checkout-mcp (minutes the first time, a second after)…",
        );
        let mut cargo =
            std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        // Not quiet: the first build takes minutes, and cargo shows its progress.
        cargo.arg("build").current_dir(&root);
        if dir.ends_with("release") {
            cargo.arg("--release");
        }
        for (package, bin) in BINARIES {
            cargo.args(["-p", package, "--bin", bin]);
        }
        let status = cargo
            .status()
            .map_err(|e| Failure::unusable(format!("cannot run cargo: {e}")))?;
        if !status.success() {
            return Err(Failure::unusable(
                "building the demo's agents failed (see above)",
            ));
        }
    }
    if let Some(missing) = paths.iter().find(|p| !p.exists()) {
        return Err(Failure::unusable(format!(
            "{} is missing; build the demo's agents with cargo build --workspace (add --release for a release build)",
            missing.display()
        )));
    }
    Ok(paths)
}

/// A running child process that printed `listening on URL` lines.
pub struct Process {
    child: Child,
    /// What it printed as `<label> listening on <url>`, in order (label may be empty).
    pub urls: Vec<(String, String)>,
    /// The bearer token its callers present, when it wants one.
    bearer: Option<String>,
}

impl Process {
    /// Starts `program` with `args` and `env`; waits until it has printed `expect_urls`
    /// lines containing `listening on URL`. Its stderr goes to `log`.
    pub async fn start(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        log: &Path,
        expect_urls: usize,
    ) -> Result<Self, Failure> {
        let mut options = std::fs::OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let stderr = options
            .open(log)
            .map_err(|e| Failure::unusable(format!("cannot open {}: {e}", log.display())))?;
        let mut child = Command::new(program)
            .args(args)
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Failure::unusable(format!("cannot start {}: {e}", program.display())))?;
        let Some(stdout) = child.stdout.take() else {
            return Err(Failure::unusable(format!("{name}: no stdout")));
        };
        let mut lines = BufReader::new(stdout).lines();
        let mut urls = Vec::new();
        let started = async {
            while urls.len() < expect_urls {
                match lines.next_line().await {
                    Ok(Some(line)) => {
                        if let Some((label, url)) = line.split_once("listening on ") {
                            urls.push((label.trim().to_owned(), url.trim().to_owned()));
                        }
                    }
                    _ => return false,
                }
            }
            true
        };
        let ok = tokio::time::timeout(Duration::from_secs(60), started)
            .await
            .unwrap_or(false);
        if !ok {
            let _ = child.kill().await;
            return Err(Failure::unusable(format!(
                "{name} did not start; its log is {}",
                log.display()
            )));
        }
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self {
            child,
            urls,
            bearer: None,
        })
    }

    /// The same process, whose callers present `token`.
    pub fn with_bearer(mut self, token: String) -> Self {
        self.bearer = Some(token);
        self
    }

    /// Sends `request` (a goal) to this agent, shows its status updates as they stream,
    /// and returns its task as it ended.
    pub async fn follow_goal(
        &self,
        request: &agent_host::sdk::SendMessageRequest,
        clock: &super::Clock,
    ) -> Result<agent_host::sdk::Task, Failure> {
        use agent_host::sdk::StreamResponse;
        use futures::StreamExt;
        let agent = crate::a2a::client(self.url())?;
        let mut events = agent
            .stream(&self.call(), request)
            .await
            .map_err(|e| crate::a2a::failure("the planner refused the goal", e))?;
        let mut task_id = None;
        while let Some(Ok(event)) = events.next().await {
            match &event {
                StreamResponse::Task(task) => task_id = Some(task.id.clone()),
                StreamResponse::StatusUpdate(update) => {
                    clock.show(update);
                }
                _ => {}
            }
        }
        let task_id =
            task_id.ok_or_else(|| Failure::unusable("the planner answered without a task"))?;
        agent
            .get_task(&self.call(), &task_id)
            .await
            .map_err(|e| crate::a2a::failure("cannot read the planner's task", e))
    }

    /// How to call this process: with its bearer token, if it wants one.
    pub fn call(&self) -> agent_host::OutboundCall {
        agent_host::OutboundCall {
            bearer: self.bearer.clone(),
            ..agent_host::OutboundCall::default()
        }
    }

    pub fn url(&self) -> &str {
        self.urls.first().map_or("", |(_, url)| url.as_str())
    }

    /// SIGKILL: the process gets no chance to flush or finish anything.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// Stops the process politely (SIGTERM), then for good.
    pub async fn stop(mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            if tokio::time::timeout(Duration::from_secs(3), self.child.wait())
                .await
                .is_ok()
            {
                return;
            }
        }
        let _ = self.child.kill().await;
    }
}
