//! A hosted model API is reached over https://: a model server on loopback that speaks
//! TLS with a certificate the planner trusts (here one the test makes, given as an extra
//! root, as `--llm-ca-file` gives one) answers the planner, and one whose certificate
//! nobody trusts is refused before anything is sent.

use std::sync::Arc;
use std::time::Duration;

use planner_agent::llm::Endpoint;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A TLS server for `localhost` that answers every request with one chat completion;
/// its address.
async fn tls_model_server(cert: &rcgen::CertifiedKey<rcgen::KeyPair>) -> String {
    let chain = vec![cert.cert.der().clone()];
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                // The request's head and its small JSON body arrive together here.
                let mut request = vec![0; 64 * 1024];
                let _ = tls.read(&mut request).await;
                let body = json!({"model": "hosted-model",
                    "choices": [{"message": {"role": "assistant", "content": "{\"ok\": true}"}}]})
                .to_string();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    format!("https://localhost:{port}/v1")
}

#[tokio::test]
async fn an_https_model_server_is_asked_when_its_certificate_is_trusted_and_refused_otherwise() {
    let trusted = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let roots = trusted.cert.pem();

    let url = tls_model_server(&trusted).await;
    let endpoint = Endpoint::trusting(
        &url,
        Some("sk-test".into()),
        Duration::from_secs(10),
        Some(roots.as_bytes()),
    )
    .unwrap();
    let answer = endpoint.ask("hosted-model", &json!([])).await.unwrap();
    assert_eq!(answer.content, "{\"ok\": true}");
    assert_eq!(answer.model.as_deref(), Some("hosted-model"));

    let stranger = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let url = tls_model_server(&stranger).await;
    let endpoint = Endpoint::trusting(
        &url,
        Some("sk-test".into()),
        Duration::from_secs(10),
        Some(roots.as_bytes()),
    )
    .unwrap();
    let refused = endpoint
        .ask("hosted-model", &json!([]))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.to_lowercase().contains("certificate"), "{refused}");
    assert!(!refused.contains("sk-test"), "{refused}");
}
