//! A goal sent to the planner with the official Python A2A SDK client (a client we did
//! not write) runs the whole supplier saga: the demo's agents as real processes, the
//! planner's task followed by the SDK's stream to COMPLETED.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use sagaplane_e2e::{python, sagaplane, workspace_root};
use serde_json::Value;

/// `sagaplane demo --serve`, stopped with SIGTERM (it then stops every agent it started).
struct Served(std::process::Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

#[test]
fn a_goal_from_the_python_sdk_completes_the_saga() {
    let mut child = Command::new(sagaplane())
        .args(["demo", "--serve"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("sagaplane demo --serve starts");
    let stdout = child.stdout.take().expect("stdout");
    let served = Served(child);
    let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
    let planner = lines
        .find_map(|line| {
            line.strip_prefix("planner listening on ")
                .map(str::to_owned)
        })
        .expect("the demo prints the planner's address");
    // Keep reading, so the demo can always print.
    std::thread::spawn(move || lines.for_each(drop));

    let script = workspace_root().join("tests/interop/python/send_goal.py");
    let output = Command::new(python())
        .arg(script)
        .arg(&planner)
        .arg("Onboard supplier ACME GmbH, contact ops@acme.example, setup fee 120 EUR")
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    assert_eq!(seen["final"], "TASK_STATE_COMPLETED", "{seen}");
    assert_eq!(seen["states"][0], "TASK_STATE_SUBMITTED", "{seen}");
    assert_eq!(
        seen["states"].as_array().unwrap().last().unwrap(),
        "TASK_STATE_COMPLETED"
    );
    let texts = seen["texts"].to_string();
    for step in ["s0", "s1", "s2", "s3", "s4", "s5"] {
        assert!(texts.contains(&format!("{step}: succeeded")), "{texts}");
    }
    assert!(seen["executorTaskId"].is_string(), "{seen}");
    assert_eq!(seen["artifacts"], serde_json::json!(["plan"]));
    drop(served);
}
