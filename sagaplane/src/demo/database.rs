//! `demo --replicas N`: a throwaway PostgreSQL cluster for the executor replicas, made
//! the way `scripts/with-postgres` makes the tests' one (the Debian server binaries under
//! `/usr/lib/postgresql/<version>/bin`, a temporary directory, a free loopback port, run
//! as the `postgres` user when the demo runs as root, since initdb refuses root), and
//! stopped and removed when the demo ends.

use std::path::PathBuf;
use std::process::Command;

use crate::failure::Failure;

/// A running cluster; stopped (immediately: nothing in it is kept) when dropped.
pub struct Database {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl Database {
    /// Makes and starts a cluster.
    pub fn start() -> Result<Self, Failure> {
        let missing = || {
            Failure::unusable(
                "--replicas needs PostgreSQL's server binaries under /usr/lib/postgresql/<version>/bin (apt-get install postgresql)",
            )
        };
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .map_err(|_| missing())?
            .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
            .filter(|bin| bin.join("initdb").exists())
            .max()
            .ok_or_else(missing)?;
        let dir = tempfile::Builder::new()
            .prefix("sagaplane-demo-pg-")
            .tempdir()
            .map_err(|e| Failure::unusable(format!("cannot make a directory: {e}")))?;
        let as_postgres = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
        if as_postgres {
            run(
                Command::new("chown").arg("postgres").arg(dir.path()),
                "chown",
            )?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|e| Failure::unusable(format!("cannot find a free port: {e}")))?
            .port();
        let database = Self {
            dir,
            bin,
            port,
            as_postgres,
        };
        let data = database.data();
        run(
            database.command("initdb").args([
                "-D",
                &data,
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
            ]),
            "initdb",
        )?;
        let log = database.dir.path().join("server.log").display().to_string();
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {}",
            database.port,
            database.dir.path().display()
        );
        run(
            database.command("pg_ctl").args([
                "-D", &data, "-l", &log, "-w", "-t", "60", "-o", &options, "start",
            ]),
            "pg_ctl start",
        )?;
        Ok(database)
    }

    /// The URL the executor replicas are given (`--store`).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Where it listens, for the demo's lines.
    pub fn place(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// `program` of the server binaries, run as the cluster's owner.
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self
            .command("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "stop"])
            .output();
    }
}

fn run(command: &mut Command, what: &str) -> Result<(), Failure> {
    let output = command
        .output()
        .map_err(|e| Failure::unusable(format!("cannot run {what}: {e}")))?;
    if output.status.success() {
        return Ok(());
    }
    Err(Failure::unusable(format!(
        "{what} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )))
}
