//! A throwaway PostgreSQL cluster (`sagaplane demo --replicas`, and the tests that stop
//! and start the database under running replicas), made the way `scripts/with-postgres`
//! makes the tests' shared one: the Debian server binaries under
//! `/usr/lib/postgresql/<version>/bin`, a temporary directory, a free loopback port, run
//! as the `postgres` user when the caller is root (initdb refuses root); stopped and
//! removed when dropped. Errors are one line of text for the caller to show.

use std::path::PathBuf;
use std::process::Command;

/// A running cluster; stopped (immediately: nothing in it is kept) when dropped.
pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl Cluster {
    /// Makes and starts a cluster.
    pub fn start() -> Result<Self, String> {
        let missing = || {
            "PostgreSQL's server binaries are not under /usr/lib/postgresql/<version>/bin (apt-get install postgresql)".to_owned()
        };
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .map_err(|_| missing())?
            .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
            .filter(|bin| bin.join("initdb").exists())
            .max()
            .ok_or_else(missing)?;
        let dir = tempfile::Builder::new()
            .prefix("sagaplane-pg-")
            .tempdir()
            .map_err(|e| format!("cannot make a directory: {e}"))?;
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
            .map_err(|e| format!("cannot find a free port: {e}"))?
            .port();
        let cluster = Self {
            dir,
            bin,
            port,
            as_postgres,
        };
        let data = cluster.data();
        run(
            cluster.command("initdb").args([
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
        cluster.start_server()?;
        Ok(cluster)
    }

    /// Starts the server (again), waiting until it accepts connections.
    pub fn start_server(&self) -> Result<(), String> {
        let data = self.data();
        let log = self.dir.path().join("server.log").display().to_string();
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        run(
            self.command("pg_ctl").args([
                "-D", &data, "-l", &log, "-w", "-t", "60", "-o", &options, "start",
            ]),
            "pg_ctl start",
        )
    }

    /// `pg_ctl stop -m fast`: the server ends every session and stops, waiting until it
    /// has.
    pub fn stop_fast(&self) -> Result<(), String> {
        let data = self.data();
        run(
            self.command("pg_ctl")
                .args(["-D", &data, "-m", "fast", "-w", "stop"]),
            "pg_ctl stop",
        )
    }

    /// Its URL (the `postgres` superuser, trusted on loopback).
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

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self
            .command("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "stop"])
            .output();
    }
}

fn run(command: &mut Command, what: &str) -> Result<(), String> {
    let output = command
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}
