//! A PostgreSQL cluster of a test's own, for the tests that stop and start the database
//! under running replicas (the one `scripts/test` starts is shared by every test): the
//! server binaries `scripts/with-postgres` found or installed, a temporary directory, a
//! free loopback port, run as `postgres` when the caller is root (initdb refuses root).

use std::path::PathBuf;
use std::process::Command;

/// A running cluster; stopped and removed when dropped.
pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl Cluster {
    /// A new cluster, started; `None` (said on stderr) where the rule of
    /// `scratch_database` says PostgreSQL tests check nothing (no `SAGAPLANE_TEST_PG`).
    /// Panics under `CI=true` without one.
    pub fn start(test: &str) -> Option<Self> {
        if std::env::var(agent_host::store::postgres::testing::TEST_DATABASE).is_err() {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "{test}: SAGAPLANE_TEST_PG is unset under CI=true (scripts/test starts a database and sets it)"
            );
            eprintln!(
                "{test}: SKIPPED, checks nothing: SAGAPLANE_TEST_PG is unset (scripts/test starts PostgreSQL and sets it)"
            );
            return None;
        }
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("the PostgreSQL server binaries scripts/with-postgres uses")
            .filter_map(|entry| entry.ok().map(|e| e.path().join("bin")))
            .filter(|bin| bin.join("initdb").exists())
            .max()
            .expect("initdb under /usr/lib/postgresql/*/bin");
        let dir = tempfile::tempdir().unwrap();
        let uid = Command::new("id").arg("-u").output().unwrap();
        let as_postgres = String::from_utf8_lossy(&uid.stdout).trim() == "0";
        if as_postgres {
            let status = Command::new("chown")
                .arg("postgres")
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(status.success(), "chown postgres");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cluster = Self {
            dir,
            bin,
            port,
            as_postgres,
        };
        let data = cluster.data();
        cluster.run(
            "initdb",
            &["-D", &data, "-U", "postgres", "-A", "trust", "--no-sync"],
        );
        cluster.start_server();
        Some(cluster)
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// `pg_ctl stop -m fast`: the server ends every session and stops, waiting until it
    /// has.
    pub fn stop_fast(&self) {
        self.run("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"]);
    }

    /// Starts the server (again), waiting until it accepts connections.
    pub fn start_server(&self) {
        let log = self.dir.path().join("server.log").display().to_string();
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-w",
                "-t",
                "60",
                "-o",
                &options,
                "start",
            ],
        );
    }

    /// `program` of the server binaries, run as the cluster's owner.
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            Command::new(&program)
        }
    }

    fn run(&self, program: &str, args: &[&str]) {
        let output = self.command(program).args(args).output().unwrap();
        assert!(
            output.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
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
