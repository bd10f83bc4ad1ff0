//! What the database did for a round, when the executor runs on PostgreSQL: transactions
//! committed and WAL fsyncs (`pg_stat_database`, `pg_stat_wal`), and the CPU of the
//! postgres processes (`/proc`); and the floor a saga is compared with: its own sequence
//! of commits and tool calls, made one after another by this process, without the
//! executor.

use std::time::{Duration, Instant};

use agent_host::{AgentClient, OutboundCall};
use sagaplane_storage::postgres::{Cached, Postgres};
use serde_json::{Value, json};

/// The database's counters at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counters {
    pub(crate) commits: i64,
    pub(crate) wal_syncs: i64,
    /// utime + stime of every postgres process, in ticks, with what its children that
    /// ended had used (a backend that closed is counted in the postmaster's).
    pub(crate) postgres_ticks: u64,
}

impl Counters {
    pub(crate) fn since(self, before: Counters) -> Counters {
        Counters {
            commits: self.commits - before.commits,
            wal_syncs: self.wal_syncs - before.wal_syncs,
            postgres_ticks: self.postgres_ticks.saturating_sub(before.postgres_ticks),
        }
    }
}

/// A backend reports its counters when it goes idle, at most once a second: read after
/// this long, a round's commits are all counted.
pub(crate) const STATS_SETTLE: Duration = Duration::from_millis(2_500);

/// The counters of the database the bench connects to, once what the round did has been
/// reported (the idle renewals of the replicas meanwhile are counted too).
pub(crate) async fn counters(db: &Postgres) -> Counters {
    tokio::time::sleep(STATS_SETTLE).await;
    let conn = db.connection().await.expect("the bench reaches PostgreSQL");
    let row = conn
        .row(
            "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
                    (SELECT wal_sync FROM pg_stat_wal)",
            &[],
        )
        .await
        .expect("the statistics views");
    Counters {
        commits: row.get(0),
        wal_syncs: row.get(1),
        postgres_ticks: postgres_ticks(),
    }
}

/// utime, stime, cutime and cstime of every process named `postgres`, in ticks.
pub(crate) fn postgres_ticks() -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .is_ok_and(|name| name.trim_end() == "postgres")
        })
        .map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let Some(close) = stat.rfind(')') else {
                return 0;
            };
            let fields: Vec<u64> = stat[close + 2..]
                .split(' ')
                .map(|f| f.parse().unwrap_or(0))
                .collect();
            // utime, stime, cutime, cstime: fields 14 to 17 of stat(5).
            fields.get(11..15).map_or(0, |f| f.iter().sum())
        })
        .sum()
}

/// The schema of the sequence's own tables, apart from the executor's.
const SEQUENCE_SCHEMA: &str = "whole_path_sequence";

/// One saga's durable writes as the executor makes them when it runs alone (the statement
/// log of a lone saga, in order), in tables of the same shape in a schema of their own:
/// the task created; its creation announced; the saga begun under its mandate with its
/// first entry; after each step's call, one entry; the task's last write; the saga
/// finished, its reservation settled; the end announced and kept. Each is one commit.
pub(crate) struct Sequence {
    db: Postgres,
    header: String,
    task_body: String,
    /// A notice's payload: the size of a task, within NOTIFY's 8000 bytes.
    notice: String,
    entry: String,
    calls: Vec<(String, Value)>,
    tools: Vec<AgentClient>,
    token: String,
}

impl Sequence {
    /// `plan`: the signed plan (the header's size); `task`: a task as the executor ends
    /// it (the task writes' size); `tool_urls`: each step's tool agent, in step order.
    pub(crate) async fn prepare(
        db: &Postgres,
        plan: &Value,
        task: &Value,
        tool_urls: &[(&str, String)],
        token: &str,
    ) -> Self {
        let conn = db.connection().await.expect("the bench reaches PostgreSQL");
        conn.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {SEQUENCE_SCHEMA} CASCADE;
             CREATE SCHEMA {SEQUENCE_SCHEMA};
             SET search_path TO {SEQUENCE_SCHEMA};
             CREATE TABLE tasks (seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE,
                 state TEXT NOT NULL, version BIGINT NOT NULL, body TEXT NOT NULL);
             CREATE TABLE sagas (saga_id TEXT PRIMARY KEY, header TEXT NOT NULL,
                 finished BOOLEAN NOT NULL DEFAULT FALSE, epoch BIGINT NOT NULL);
             CREATE TABLE entries (seq BIGSERIAL PRIMARY KEY, saga_id TEXT NOT NULL
                 REFERENCES sagas (saga_id), body TEXT NOT NULL);
             CREATE TABLE mandates (mandate_id TEXT PRIMARY KEY, used BIGINT NOT NULL);
             CREATE TABLE reservations (saga_id TEXT PRIMARY KEY, mandate_id TEXT NOT NULL,
                 reserved BIGINT NOT NULL, spent BIGINT);
             CREATE TABLE notices (id BIGSERIAL PRIMARY KEY, payload TEXT NOT NULL);
             INSERT INTO mandates VALUES ('md', 0);
             RESET search_path;"
        ))
        .await
        .expect("the sequence's tables");
        let steps = plan["steps"].as_array().cloned().unwrap_or_default();
        let calls = steps
            .iter()
            .map(|step| {
                let skill = step["skill"].as_str().unwrap_or_default().to_owned();
                let args = step.get("input").cloned().unwrap_or(json!({}));
                (skill, args)
            })
            .collect();
        // Each step's tool agent, by the agent the step names.
        let tools = steps
            .iter()
            .map(|step| {
                let agent = step["agent"].as_str().unwrap_or_default();
                let (_, url) = tool_urls
                    .iter()
                    .find(|(name, _)| *name == agent)
                    .expect("the step's tool agent");
                AgentClient::new(url).expect("a client")
            })
            .collect();
        Self {
            db: db.clone(),
            header: json!({ "plan": plan }).to_string(),
            task_body: task.to_string(),
            notice: "n".repeat(task.to_string().len().min(7_000)),
            // An entry the size of a step's outcome and the next step's intent.
            entry: json!([{"stepSucceeded": {"step": "s0", "result": {"vendorId": "v_1"}}},
                          {"stepStarted": {"step": "s1", "attempt": 1, "key": "k".repeat(64)}}])
            .to_string(),
            calls,
            tools,
            token: token.to_owned(),
        }
    }

    /// Runs the sequence of saga `n`, one commit or call at a time; how long it took.
    pub(crate) async fn run(&self, n: u64) -> Duration {
        let started = Instant::now();
        let conn = self
            .db
            .connection()
            .await
            .expect("the bench reaches PostgreSQL");
        let (saga, task) = (format!("sq_{n}"), format!("tq_{n}"));
        let s = SEQUENCE_SCHEMA;
        conn.run(
            &format!(
                "INSERT INTO {s}.tasks (id, state, version, body) VALUES ($1, 'working', 1, $2)"
            ),
            &[&task, &self.task_body],
        )
        .await
        .expect("the sequence\'s task");
        conn.run(
            "SELECT pg_notify('whole_path_sequence', $1)",
            &[&self.notice],
        )
        .await
        .expect("the sequence\'s notice");
        conn.batch_execute("BEGIN")
            .await
            .expect("the sequence\'s begin");
        conn.row(
            &format!("SELECT used FROM {s}.mandates WHERE mandate_id = 'md' FOR UPDATE"),
            &[],
        )
        .await
        .expect("the sequence\'s mandate");
        conn.run(
            &format!("INSERT INTO {s}.reservations VALUES ($1, 'md', 12000, NULL)"),
            &[&saga],
        )
        .await
        .expect("the sequence\'s reservation");
        conn.run(
            &format!("UPDATE {s}.mandates SET used = used + 12000 WHERE mandate_id = 'md'"),
            &[],
        )
        .await
        .expect("the sequence\'s mandate");
        conn.run(
            &format!("INSERT INTO {s}.sagas (saga_id, header, epoch) VALUES ($1, $2, 1)"),
            &[&saga, &self.header],
        )
        .await
        .expect("the sequence\'s saga");
        conn.run(
            &format!("INSERT INTO {s}.entries (saga_id, body) VALUES ($1, $2)"),
            &[&saga, &self.entry],
        )
        .await
        .expect("the sequence\'s entry");
        conn.batch_execute("COMMIT")
            .await
            .expect("the sequence\'s commit");
        for (index, ((skill, args), tool)) in self.calls.iter().zip(&self.tools).enumerate() {
            let call = OutboundCall {
                bearer: Some(self.token.clone()),
                idempotency_key: Some(format!("{saga}:{index}")),
                ..OutboundCall::default()
            };
            let request =
                agent_host::user_request(None, Some(json!({"skill": skill, "args": args})), None);
            tool.send(&call, &request).await.expect("the tool answers");
            conn.run(
                &format!(
                    "WITH fence AS (SELECT 1 FROM {s}.sagas WHERE saga_id = $1 AND epoch = 1 FOR KEY SHARE)
                     INSERT INTO {s}.entries (saga_id, body) SELECT $1, $2 FROM fence"
                ),
                &[&saga, &self.entry],
            )
            .await
            .expect("the sequence\'s entry");
        }
        conn.run(
            &format!("UPDATE {s}.tasks SET state = 'completed', version = version + 1, body = $2 WHERE id = $1"),
            &[&task, &self.task_body],
        )
        .await
        .expect("the sequence\'s task");
        conn.batch_execute("BEGIN")
            .await
            .expect("the sequence\'s begin");
        conn.run(
            &format!("UPDATE {s}.reservations SET spent = 12000 WHERE saga_id = $1"),
            &[&saga],
        )
        .await
        .expect("the sequence\'s reservation");
        conn.run(
            &format!("UPDATE {s}.mandates SET used = used - 0 WHERE mandate_id = 'md'"),
            &[],
        )
        .await
        .expect("the sequence\'s mandate");
        conn.run(
            &format!("UPDATE {s}.sagas SET finished = TRUE WHERE saga_id = $1"),
            &[&saga],
        )
        .await
        .expect("the sequence\'s saga");
        conn.batch_execute("COMMIT")
            .await
            .expect("the sequence\'s commit");
        conn.batch_execute("BEGIN")
            .await
            .expect("the sequence\'s begin");
        conn.run(
            &format!("INSERT INTO {s}.notices (payload) VALUES ($1)"),
            &[&self.task_body],
        )
        .await
        .expect("the sequence\'s notice");
        conn.run(
            "SELECT pg_notify('whole_path_sequence', $1)",
            &[&self.notice],
        )
        .await
        .expect("the sequence\'s notice");
        conn.batch_execute("COMMIT")
            .await
            .expect("the sequence\'s commit");
        started.elapsed()
    }

    /// Commits one saga's sequence makes.
    pub(crate) const COMMITS: u64 = 6 + 6;
}
