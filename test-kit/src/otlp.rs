//! An OTLP/HTTP receiver for the trace tests: it keeps every JSON body posted to
//! `/v1/traces`, and reads the spans back as OTLP/JSON shows them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::post;
use serde_json::Value;

/// The bodies a receiver was sent, in order.
pub type Received = Arc<Mutex<Vec<Value>>>;

/// A receiver on `127.0.0.1:0`: its base URL (what `--otlp-endpoint` takes) and what it
/// receives. It serves until the test's runtime ends.
pub async fn receiver() -> (String, Received) {
    let bodies: Received = Arc::default();
    let kept = bodies.clone();
    let app = Router::new().route(
        "/v1/traces",
        post(move |body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                let value: Value = serde_json::from_slice(&body).expect("an OTLP/JSON body");
                kept.lock().expect("the receiver's lock").push(value);
                "{}"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, bodies)
}

/// Every span received.
pub fn spans(received: &Received) -> Vec<Value> {
    let bodies = received.lock().expect("the receiver's lock").clone();
    bodies
        .iter()
        .flat_map(|b| b["resourceSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|r| r["scopeSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|s| s["spans"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn attributes(span: &Value) -> HashMap<String, Value> {
    span["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| {
            let value = a["value"].as_object()?.values().next()?.clone();
            Some((a["key"].as_str()?.to_owned(), value))
        })
        .collect()
}

/// A span's attribute as text (`""` when it has none of that name).
pub fn attribute(span: &Value, key: &str) -> String {
    match attributes(span).get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string().trim_matches('"').to_owned(),
        None => String::new(),
    }
}
