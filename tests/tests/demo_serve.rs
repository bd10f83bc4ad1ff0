//! `sagaplane demo --serve` (findings 13 and 18 of issue 19): once its agents are up it
//! prints its folder and the commands that use it, before it exits; the folder is 0700
//! and every secret in it 0600; and the printed commands work as printed (and `send`
//! without the token is refused).

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use sagaplane_e2e::{Served, sagaplane};

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Runs a printed command (its first word, `sagaplane`, is this build's binary).
fn run(words: &[String]) -> (i32, String) {
    let output = Command::new(sagaplane())
        .args(&words[1..])
        .env_remove("SAGAPLANE_TOKEN")
        .output()
        .expect("sagaplane runs");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), text)
}

/// The status line and body of `POST path` on `url` with `Authorization: Bearer token`
/// (HTTP/1.1 by hand: this crate has no HTTP client).
fn post_bearer(url: &str, path: &str, token: &str) -> String {
    use std::io::{Read, Write};
    let address = url.trim_start_matches("http://").trim_end_matches('/');
    let address = address.split('/').next().unwrap();
    let mut stream = std::net::TcpStream::connect(address).expect("the executor listens");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

fn replace(words: &[String], placeholder: &str, value: &str) -> Vec<String> {
    words
        .iter()
        .map(|w| {
            if w == placeholder {
                value.to_owned()
            } else {
                w.clone()
            }
        })
        .collect()
}

#[test]
fn the_served_demo_prints_its_folder_and_commands_that_work() {
    let served = Served::start(&[], Duration::from_secs(300));
    let folder = &served.folder;
    assert!(folder.is_dir(), "{}", folder.display());
    assert!(
        served
            .lines
            .iter()
            .any(|l| l.contains("logs:") && l.contains("executor.log")),
        "{:?}",
        served.lines
    );

    // Finding 13: the folder and every secret in it are the owner's alone.
    assert_eq!(mode(folder), 0o700);
    for secret in [
        "platform.jwk",
        "planner.jwk",
        "approver.jwk",
        "credentials.json",
        "planner-token",
        "principal.jwk",
        "mandate.json",
        "admin-token",
        "operator-token",
    ] {
        assert_eq!(mode(&folder.join(secret)), 0o600, "{secret}");
    }

    // The printed send, without its token: refused (401), nothing planned.
    let send = served.command("send");
    assert!(send.iter().any(|w| w == "--token-file"), "{send:?}");
    let without: Vec<String> = {
        let at = send.iter().position(|w| w == "--token-file").unwrap();
        send.iter()
            .enumerate()
            .filter(|(i, _)| *i != at && *i != at + 1)
            .map(|(_, w)| w.clone())
            .collect()
    };
    let (code, text) = run(&without);
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("401") || text.contains("Bearer"), "{text}");

    // As printed: the goal runs to the end.
    let (code, text) = run(&send);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("COMPLETED"), "{text}");

    // The planner's task, as the printed `task watch` sees it, names the executor's task;
    // the printed executor commands read that task.
    let planner_task = text
        .lines()
        .find_map(|l| l.split("task ").nth(1).filter(|_| l.contains("SUBMITTED")))
        .map(|rest| rest.trim().to_owned())
        .unwrap_or_else(|| panic!("no planner task id in:\n{text}"));
    let watch = replace(&served.command("task watch"), "PLANNER_TASK", &planner_task);
    let (code, watched) = run(&watch);
    assert_eq!(code, 0, "{watched}");
    let executor_task = watched
        .lines()
        .chain(text.lines())
        .find_map(|l| l.split("executorTaskId").nth(1))
        .and_then(|rest| {
            rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .find(|w| w.len() > 8)
        })
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no executorTaskId in:\n{text}\n{watched}"));
    let get = replace(&served.command("task get"), "EXECUTOR_TASK", &executor_task);
    let (code, got) = run(&get);
    assert_eq!(code, 0, "{got}");
    assert!(got.contains("COMPLETED"), "{got}");
    let list = served.command("task list");
    let (code, listed) = run(&list);
    assert_eq!(code, 0, "{listed}");

    // Issue 20: the principal's key and the mandate are named, and the printed `mandate
    // show` reads the budget the completed saga spent (120.00 EUR of 1000.00 EUR).
    for named in ["principal.jwk", "mandate.json"] {
        assert!(
            served.lines.iter().any(|l| l.contains(named)),
            "{named}: {:?}",
            served.lines
        );
    }
    let (code, shown) = run(&served.command("mandate show"));
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.contains("in EUR minor units: budget 100000")
            && (shown.contains("spent 12000") || shown.contains("reserved 12000")),
        "{shown}"
    );

    // Issue 24: the console's address is printed, the operator's token in the folder
    // opens it, and so does the printed approver's JWT; each with its role.
    let console = served
        .lines
        .iter()
        .find_map(|l| {
            l.split("the console")
                .nth(1)?
                .split_whitespace()
                .find(|w| w.starts_with("http://"))
        })
        .unwrap_or_else(|| panic!("no console address printed: {:?}", served.lines))
        .to_owned();
    assert!(console.ends_with("/console/"), "{console}");
    let operator = std::fs::read_to_string(folder.join("operator-token")).unwrap();
    let answer = post_bearer(&console, "/console/api/session", operator.trim());
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert!(answer.contains("\"role\":\"operator\""), "{answer}");
    let (code, jwt) = run(&served.command("token"));
    assert_eq!(code, 0, "{jwt}");
    let answer = post_bearer(&console, "/console/api/session", jwt.trim());
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert!(answer.contains("\"role\":\"approver\""), "{answer}");
    let answer = post_bearer(&console, "/console/api/session", "not-the-token");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
}
