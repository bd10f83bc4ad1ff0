//! The console's pages on a store of many finished sagas (`WHOLE_PATH_CONSOLE=N`): after
//! the rounds, sagas are sent until the executor's store holds `N` finished ones, then
//! the console's API is read as the page reads it, over HTTP with an operator's session,
//! from the real binary: the first page of the list, pages deep into it by their keys,
//! a search by idempotency key, a search by text (which reads the store page by page),
//! one saga's page, and the overview. Each is timed over repeated requests.

use std::time::{Duration, Instant};

use serde_json::Value;

/// Requests of each kind.
const REQUESTS: usize = 40;

/// How many sagas the store must hold for the console's measurement, if asked.
pub fn wanted() -> Option<usize> {
    std::env::var("WHOLE_PATH_CONSOLE")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0)
}

/// The finished sagas the executor's store holds (the console's own counts).
pub async fn finished(http: &reqwest::Client, url: &str, session: &str) -> usize {
    let overview = get(http, url, session, "/overview").await.1;
    ["completed", "compensated", "canceled"]
        .iter()
        .filter_map(|k| overview["sagas"][k].as_u64())
        .sum::<u64>() as usize
}

pub async fn log_in(http: &reqwest::Client, url: &str, token: &str) -> String {
    let answer: Value = http
        .post(format!("{url}/console/api/session"))
        .bearer_auth(token)
        .send()
        .await
        .expect("the console answers")
        .json()
        .await
        .expect("a session");
    answer["session"].as_str().expect("a session id").to_owned()
}

async fn get(http: &reqwest::Client, url: &str, session: &str, path: &str) -> (Duration, Value) {
    let started = Instant::now();
    let response = http
        .get(format!("{url}/console/api{path}"))
        .bearer_auth(session)
        .send()
        .await
        .expect("the console answers");
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    let body: Value = response.json().await.expect("JSON");
    (started.elapsed(), body)
}

fn quantiles(mut ms: Vec<f64>) -> String {
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    format!(
        "p50 {:.2} ms, p90 {:.2} ms, max {:.2} ms",
        at(0.5),
        at(0.9),
        at(1.0)
    )
}

async fn timed(http: &reqwest::Client, url: &str, session: &str, path: &str) -> (String, Value) {
    let mut took = Vec::new();
    let mut last = Value::Null;
    for _ in 0..REQUESTS {
        let (t, body) = get(http, url, session, path).await;
        took.push(t.as_secs_f64() * 1000.0);
        last = body;
    }
    (quantiles(took), last)
}

/// Reads and times the console's pages; prints one line per page.
pub async fn measure(url: &str, token: &str, held: usize) {
    let http = reqwest::Client::new();
    let session = log_in(&http, url, token).await;
    println!(
        "\nthe console on {held} finished sagas (the real binary over HTTP, an operator's session, {REQUESTS} requests each, one at a time):"
    );
    let (first, page) = timed(&http, url, &session, "/sagas?pageSize=50").await;
    println!("  list, first page of 50:               {first}");
    // Deep pages: follow the keys 100 pages in (5,000 sagas), then time that page.
    let mut token_at = page["nextPageToken"].as_str().map(str::to_owned);
    let mut pages = 1;
    while pages < 100 {
        let Some(next) = token_at.clone() else { break };
        let (_, body) = get(
            &http,
            url,
            &session,
            &format!("/sagas?pageSize=50&pageToken={next}"),
        )
        .await;
        token_at = body["nextPageToken"].as_str().map(str::to_owned);
        pages += 1;
    }
    if let Some(deep) = &token_at {
        let (deep_times, _) = timed(
            &http,
            url,
            &session,
            &format!("/sagas?pageSize=50&pageToken={deep}"),
        )
        .await;
        println!("  list, page {pages} of 50 (by its key):      {deep_times}");
    }
    let some_saga = page["sagas"][7]["sagaId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (by_key, found) = timed(
        &http,
        url,
        &session,
        &format!("/sagas?q={some_saga}:s3&pageSize=50"),
    )
    .await;
    println!(
        "  list, search by idempotency key:      {by_key} (found {}, read {} tasks)",
        found["sagas"].as_array().map(Vec::len).unwrap_or(0),
        found["scanned"]
    );
    let (by_text, found) = timed(
        &http,
        url,
        &session,
        "/sagas?q=no-such-goal-text&pageSize=50",
    )
    .await;
    println!(
        "  list, text found nowhere:             {by_text} (read {} tasks, the most one page reads)",
        found["scanned"]
    );
    let (saga, _) = timed(&http, url, &session, &format!("/sagas/{some_saga}")).await;
    println!("  one saga (audit, timeline, ledger):   {saga}");
    let (overview, _) = timed(&http, url, &session, "/overview").await;
    println!("  overview:                             {overview}");
}
