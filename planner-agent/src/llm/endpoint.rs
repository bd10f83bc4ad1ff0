//! The model server as an HTTP peer: where its chat-completions endpoint is, how it is
//! asked (bearer key, JSON mode), and what is read of its answer. Everything it sends is
//! bounded and checked; nothing it sends can make the planner panic.
//!
//! JSON mode: the first request asks with `response_format: {"type": "json_object"}`. A
//! server that refuses that member (HTTP 400 or 422 whose body names `response_format`
//! or `json_object`: what vLLM, llama.cpp's server and hosted APIs answer for a
//! parameter they do not take) is asked again at once without it, and is remembered for
//! the rest of the process, so later goals do not pay that round trip again. The answer
//! is then read by the same strict rule (`draft::answer_json`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::error::{Error, Result};

/// Largest answer read from the model endpoint.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// How much of an error answer's body is quoted.
const QUOTED_CHARS: usize = 300;

/// The chat-completions URL for a base URL: `http://host:port` gets
/// `/v1/chat/completions`; a URL with a path (`…/v1`, `…/openai/v1`, `…/v1beta/openai`)
/// is the API's base and gets `/chat/completions`; one that already ends in
/// `/chat/completions` is used as it is. Trailing slashes do not matter. Credentials
/// in the URL are refused: the key goes in `SAGAPLANE_LLM_API_KEY`, never where URLs
/// are logged.
pub fn chat_url(base: &str) -> Result<reqwest::Url> {
    let bad = |why: String| Error::Config(format!("the model's URL {base:?} {why}"));
    let mut url =
        reqwest::Url::parse(base.trim()).map_err(|e| bad(format!("is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
        return Err(bad("is not an http:// or https:// URL".into()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad(
            "carries credentials; give the API key in SAGAPLANE_LLM_API_KEY instead".into(),
        ));
    }
    let path = url.path().trim_end_matches('/').to_owned();
    let path = if path.ends_with("/chat/completions") {
        path
    } else if path.is_empty() {
        "/v1/chat/completions".to_owned()
    } else {
        format!("{path}/chat/completions")
    };
    url.set_path(&path);
    Ok(url)
}

/// Whether a refused request was refused for its `response_format` (see the module
/// documentation).
pub fn lacks_json_mode(status: StatusCode, body: &str) -> bool {
    let body = body.to_ascii_lowercase();
    matches!(
        status,
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY
    ) && (body.contains("response_format") || body.contains("json_object"))
}

/// The HTTP client that asks the model: plain HTTP, or TLS (rustls with ring) checked
/// against the system's trusted roots. It follows no redirect: one would resend the key
/// wherever it points.
fn client(
    extra_roots: Option<&[u8]>,
) -> Result<Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>> {
    let mut roots = rustls::RootCertStore::empty();
    // A machine without trusted roots still reaches http:// servers; https:// ones then
    // fail their handshake, which says so.
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some(pem) = extra_roots {
        use rustls::pki_types::pem::PemObject;
        let extra: Vec<_> = rustls::pki_types::CertificateDer::pem_slice_iter(pem)
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| Error::Config(format!("the model's extra trusted certificates: {e}")))?;
        if extra.is_empty() {
            return Err(Error::Config(
                "the model's extra trusted certificates hold no PEM certificate".into(),
            ));
        }
        roots.add_parsable_certificates(extra);
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::Config(format!("cannot set up TLS for the model endpoint: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut plain = HttpConnector::new();
    plain.enforce_http(false);
    plain.set_connect_timeout(Some(Duration::from_secs(10)));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(plain);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// What the model answered.
#[derive(Debug, Clone)]
pub struct Answer {
    /// `choices[0].message.content`.
    pub content: String,
    /// The model id the server reports, if any.
    pub model: Option<String>,
}

/// One model server.
pub struct Endpoint {
    url: reqwest::Url,
    /// The URL as errors show it: no query (where some APIs take a key).
    shown: String,
    http: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// Never logged: `LlmConfig`'s `Debug` hides it, and errors never quote requests.
    api_key: Option<String>,
    timeout: Duration,
    /// Cleared once the server refused `response_format`.
    json_mode: AtomicBool,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.shown)
            .field("api_key", &self.api_key.as_ref().map(|_| "…"))
            .field("timeout", &self.timeout)
            .field("json_mode", &self.json_mode())
            .finish_non_exhaustive()
    }
}

/// A request's outcome before it is judged: the answer, or the server's refusal.
enum Reply {
    Answer(Answer),
    Refused(StatusCode, String),
}

impl Endpoint {
    pub fn new(base_url: &str, api_key: Option<String>, timeout: Duration) -> Result<Self> {
        Self::trusting(base_url, api_key, timeout, None)
    }

    /// `new`, trusting the PEM certificates `extra_roots` too for an https:// server.
    pub fn trusting(
        base_url: &str,
        api_key: Option<String>,
        timeout: Duration,
        extra_roots: Option<&[u8]>,
    ) -> Result<Self> {
        let url = chat_url(base_url)?;
        let mut shown = url.clone();
        shown.set_query(None);
        let http = client(extra_roots)?;
        Ok(Self {
            url,
            shown: shown.to_string(),
            http,
            api_key,
            timeout,
            json_mode: AtomicBool::new(true),
        })
    }

    /// The endpoint's URL (without its query).
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// Whether requests still ask for JSON mode.
    pub fn json_mode(&self) -> bool {
        self.json_mode.load(Ordering::Relaxed)
    }

    /// Asks `model` with `messages`: in JSON mode unless the server refused it, and once
    /// more without it when it refuses it now.
    pub async fn ask(&self, model: &str, messages: &Value) -> Result<Answer> {
        if self.json_mode() {
            match self.post(model, messages, true).await? {
                Reply::Answer(answer) => return Ok(answer),
                Reply::Refused(status, body) if lacks_json_mode(status, &body) => {
                    self.json_mode.store(false, Ordering::Relaxed);
                    tracing::info!(
                        endpoint = %self.shown,
                        %status,
                        "the model server does not take response_format; asking without JSON mode from now on"
                    );
                }
                Reply::Refused(status, body) => return Err(self.refused(status, &body)),
            }
        }
        match self.post(model, messages, false).await? {
            Reply::Answer(answer) => Ok(answer),
            Reply::Refused(status, body) => Err(self.refused(status, &body)),
        }
    }

    fn refused(&self, status: StatusCode, body: &str) -> Error {
        let excerpt: String = body.chars().take(QUOTED_CHARS).collect();
        Error::Backend(format!(
            "the model endpoint {} answered {status}: {excerpt}",
            self.shown
        ))
    }

    async fn post(&self, model: &str, messages: &Value, json_mode: bool) -> Result<Reply> {
        let mut body = json!({"model": model, "messages": messages, "temperature": 0});
        if json_mode {
            body["response_format"] = json!({"type": "json_object"});
        }
        let body = serde_json::to_vec(&body)
            .map_err(|e| Error::Backend(format!("cannot encode the model request: {e}")))?;
        let mut request = http::Request::post(self.url.as_str())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json");
        if let Some(key) = &self.api_key {
            request = request.header(AUTHORIZATION, format!("Bearer {key}"));
        }
        let shown = &self.shown;
        // The key never reaches an error's text: a request that cannot be built (a key
        // that cannot be a header) says only that.
        let request = request.body(Full::new(Bytes::from(body))).map_err(|_| {
            Error::Backend(format!(
                "the request to the model endpoint {shown} cannot be built (is the API key one line of text?)"
            ))
        })?;
        let failed = |e: &dyn std::error::Error| {
            // With the causes, which say what failed ("connection refused", a TLS alert…).
            let mut why = e.to_string();
            let mut source = e.source();
            while let Some(cause) = source {
                why.push_str(": ");
                why.push_str(&cause.to_string());
                source = cause.source();
            }
            Error::Backend(format!("the model endpoint {shown} failed: {why}"))
        };
        let exchange = async {
            let response = self.http.request(request).await.map_err(|e| failed(&e))?;
            let status = response.status();
            let mut body = response.into_body();
            let mut bytes = Vec::new();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| failed(&e))?;
                if let Ok(chunk) = frame.into_data() {
                    if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
                        return Err(Error::Backend(format!(
                            "the model endpoint {shown} answered more than {MAX_ANSWER_BYTES} bytes"
                        )));
                    }
                    bytes.extend_from_slice(&chunk);
                }
            }
            Ok((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| {
                Error::Backend(format!(
                    "the model endpoint {shown} did not answer within {} s",
                    self.timeout.as_secs_f64()
                ))
            })??;
        if !status.is_success() {
            return Ok(Reply::Refused(
                status,
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
        let answer: Value = serde_json::from_slice(&bytes).map_err(|e| {
            Error::Backend(format!(
                "the model endpoint {shown} did not answer with chat-completions JSON: {e}"
            ))
        })?;
        let content = answer
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Error::Backend(format!(
                    "the model endpoint {shown} answered without choices[0].message.content"
                ))
            })?;
        let model = answer
            .get("model")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
            .map(str::to_owned);
        Ok(Reply::Answer(Answer {
            content: content.to_owned(),
            model,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_https_endpoint_is_spoken_to_in_tls() {
        // A plain-HTTP server on loopback, asked over https://: the client begins a TLS
        // handshake (which this server cannot answer), rather than refusing the scheme.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while let Ok((mut stream, _)) = listener.accept().await {
                let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            }
        });
        let endpoint = Endpoint::new(
            &format!("https://127.0.0.1:{port}/v1"),
            None,
            Duration::from_secs(5),
        )
        .unwrap();
        let said = match endpoint.post("m", &json!([]), false).await {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a plain-HTTP server answered a TLS client"),
        };
        assert!(!said.contains("scheme is not http"), "{said}");
        assert!(
            said.to_lowercase().contains("tls")
                || said.contains("corrupt")
                || said.contains("InvalidContentType"),
            "{said}"
        );
    }

    #[test]
    fn every_form_of_a_base_url_reaches_chat_completions() {
        for (base, expected) in [
            (
                "http://127.0.0.1:11434",
                "http://127.0.0.1:11434/v1/chat/completions",
            ),
            (
                "http://127.0.0.1:11434/",
                "http://127.0.0.1:11434/v1/chat/completions",
            ),
            (
                "http://127.0.0.1:11434/v1",
                "http://127.0.0.1:11434/v1/chat/completions",
            ),
            (
                "http://127.0.0.1:11434/v1/",
                "http://127.0.0.1:11434/v1/chat/completions",
            ),
            (
                "http://h:8000/v1/chat/completions",
                "http://h:8000/v1/chat/completions",
            ),
            (
                "https://api.example/openai/v1",
                "https://api.example/openai/v1/chat/completions",
            ),
            (
                " https://api.example/v1beta/openai/ ",
                "https://api.example/v1beta/openai/chat/completions",
            ),
        ] {
            assert_eq!(chat_url(base).unwrap().as_str(), expected, "{base}");
        }
        for bad in [
            "127.0.0.1:11434",
            "ftp://h/v1",
            "not a url",
            "https://user:sk-secret@api.example/v1",
        ] {
            let Err(Error::Config(why)) = chat_url(bad) else {
                panic!("{bad} accepted");
            };
            assert!(!why.is_empty());
        }
    }

    #[test]
    fn the_key_is_never_shown() {
        let endpoint = Endpoint::new(
            "http://127.0.0.1:11434/v1?api_key=sk-query",
            Some("sk-secret-key".into()),
            Duration::from_secs(1),
        )
        .unwrap();
        let shown = format!("{endpoint:?}");
        assert!(
            !shown.contains("sk-secret-key") && !shown.contains("sk-query"),
            "{shown}"
        );
        assert_eq!(endpoint.url(), "http://127.0.0.1:11434/v1/chat/completions");
    }

    #[test]
    fn a_refused_response_format_is_told_from_other_refusals() {
        let bad = StatusCode::BAD_REQUEST;
        assert!(lacks_json_mode(
            bad,
            r#"{"error": {"message": "Unsupported parameter: 'response_format'"}}"#
        ));
        assert!(lacks_json_mode(
            StatusCode::UNPROCESSABLE_ENTITY,
            "type json_object is not supported"
        ));
        assert!(!lacks_json_mode(bad, "context length exceeded"));
        assert!(!lacks_json_mode(
            StatusCode::INTERNAL_SERVER_ERROR,
            "response_format crashed"
        ));
        assert!(!lacks_json_mode(
            StatusCode::UNAUTHORIZED,
            "response_format"
        ));
    }
}
