//! `sagaplane cards register` and `plan validate --catalog URL` against a real executor
//! (its service, served on loopback): curated cards get in, others are refused with the
//! executor's reason, and a plan validates against the executor's catalog.

mod common;

use std::path::Path;
use std::process::Output;

use common::*;
use executor_agent::agent::DEFAULT_MAX_RUNNING_SAGAS;
use executor_agent::service::{Settings, build};
use shared_types::{SigningIdentity, TrustStore};
use tokio_util::sync::CancellationToken;

const ADMIN_TOKEN: &str = "admin-token-for-cli-tests";
use test_kit::AGENTS;

/// Starts an executor that trusts `platform` cards and `planner` plans; returns its URL.
async fn executor(dir: &Path, platform: &SigningIdentity, planner: &SigningIdentity) -> String {
    executor_with(dir, platform, planner, Default::default()).await
}

/// `executor`, holding `credentials` for the tools.
async fn executor_with(
    dir: &Path,
    platform: &SigningIdentity,
    planner: &SigningIdentity,
    credentials: std::collections::HashMap<String, String>,
) -> String {
    let mut platform_keys = TrustStore::new();
    platform_keys.add_jwk(&platform.public_jwk()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let service = build(
        Settings {
            store: executor_agent::service::Store::DataDir(dir.join("executor")),
            executor_id: "executor".into(),
            public_url: url.clone(),
            platform_keys,
            planners: vec![(planner.kid().to_owned(), planner.public_jwk())],
            principals: vec![
                serde_json::from_str(&std::fs::read_to_string(test_principal_pub()).unwrap())
                    .unwrap(),
            ],
            approvers: Vec::new(),
            admin_token: ADMIN_TOKEN.into(),
            operator_token: None,
            otlp_endpoint: None,
            credentials,
            pause_after_journal_writes: None,
            max_running_sagas: DEFAULT_MAX_RUNNING_SAGAS,
            max_parallel_steps: executor_agent::saga::spec::DEFAULT_MAX_PARALLEL_STEPS,
            undo_expiring_within: executor_agent::metrics::DEFAULT_UNDO_EXPIRING_WITHIN,
            registration_hosts: Default::default(),
        },
        shutdown.clone(),
    )
    .await
    .unwrap();
    tokio::spawn(agent_host::serve(listener, service.router, shutdown));
    url
}

/// Runs the CLI off the runtime's threads, with the admin token in the environment.
async fn cli(args: Vec<String>, token: Option<&str>) -> Output {
    let token = token.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let mut command = assert_cmd::Command::cargo_bin("sagaplane").unwrap();
        command.args(&args).env_remove("SAGAPLANE_ADMIN_TOKEN");
        if let Some(token) = token {
            command.env("SAGAPLANE_ADMIN_TOKEN", token);
        }
        command.output().unwrap()
    })
    .await
    .unwrap()
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> String {
    std::fs::write(path, serde_json::to_string(value).unwrap()).unwrap();
    p(path).to_owned()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cards_register_and_validate_against_the_executors_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let platform = SigningIdentity::from_seed([51; 32], Some("platform".into()));
    // The example plan's mandate is granted to key id test-planner.
    let planner = SigningIdentity::from_seed([52; 32], Some("test-planner".into()));
    let url = executor(dir.path(), &platform, &planner).await;

    let card = |agent: &str, signer: Option<&SigningIdentity>| {
        let mut card: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(root().join(format!("agent-cards/{agent}.json"))).unwrap(),
        )
        .unwrap();
        if let Some(signer) = signer {
            signer.sign_in_place(&mut card).unwrap();
        }
        write_json(&dir.path().join(format!("{agent}.json")), &card)
    };
    let register = |file: String| args(&["cards", "register", &file, "--executor", &url]);

    let out = cli(register(card("budget", None)), Some(ADMIN_TOKEN)).await;
    assert_eq!(out.status.code(), Some(1), "an unsigned card is refused");
    assert!(stderr(&out).contains("not curated"), "{}", stderr(&out));
    let stranger = SigningIdentity::from_seed([53; 32], Some("stranger".into()));
    let out = cli(register(card("budget", Some(&stranger))), Some(ADMIN_TOKEN)).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let out = cli(
        register(card("budget", Some(&platform))),
        Some("wrong-token"),
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("refused the credential"),
        "{}",
        stderr(&out)
    );
    let out = cli(register(card("budget", Some(&platform))), None).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("SAGAPLANE_ADMIN_TOKEN"),
        "{}",
        stderr(&out)
    );

    for agent in AGENTS {
        let out = cli(register(card(agent, Some(&platform))), Some(ADMIN_TOKEN)).await;
        assert!(out.status.success(), "{agent}: {}", stderr(&out));
        assert!(
            stdout(&out).contains(&format!("registered: agent {agent} (signed by platform)")),
            "{}",
            stdout(&out)
        );
    }

    let key = write_json(&dir.path().join("planner.jwk"), &planner.private_jwk());
    let trust = write_json(&dir.path().join("planner.pub.jwk"), &planner.public_jwk());
    let mut plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(example_plan()).unwrap()).unwrap();
    planner.sign_in_place(&mut plan).unwrap();
    let plan = write_json(&dir.path().join("plan.json"), &plan);
    let validate = |extra: &[&str]| {
        let mut list = args(&[
            "plan",
            "validate",
            &plan,
            "--catalog",
            &url,
            "--trust",
            &trust,
            "--principal",
            p(&test_principal_pub()),
        ]);
        list.extend(args(extra));
        list
    };
    let out = cli(validate(&["--planner-key", &key]), None).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("valid: plan sg_demo_supplier_onboarding"),
        "{}",
        stdout(&out)
    );

    let out = cli(validate(&[]), None).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--planner-key"), "{}", stderr(&out));

    // `plan submit`: a plan with five mistakes is refused, every violation with its code,
    // with --watch and without.
    let mut five: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("examples/plans/five-violations.json")).unwrap(),
    )
    .unwrap();
    planner.sign_in_place(&mut five).unwrap();
    let five = write_json(&dir.path().join("five.json"), &five);
    for watch in [true, false] {
        let mut submit = args(&[
            "plan",
            "submit",
            &five,
            "--executor",
            &url,
            "--jwt-key",
            &key,
        ]);
        if watch {
            submit.push("--watch".into());
        }
        let out = cli(submit, None).await;
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let said = stdout(&out);
        assert!(said.contains("REJECTED"), "{said}");
        for code in [
            "IDEMPOTENCY_KEY_MISMATCH",
            "ARGS_INVALID",
            "BAD_REFERENCE",
            "MANDATE_EXCEEDED",
            "CLASS_MISMATCH",
        ] {
            assert!(said.contains(code), "watch {watch}: no {code} in\n{said}");
        }
    }
    let out = cli(args(&["plan", "submit", &five, "--executor", &url]), None).await;
    assert_eq!(out.status.code(), Some(2), "no credential");
    assert!(stderr(&out).contains("--jwt-key"), "{}", stderr(&out));
    let stranger_key = write_json(&dir.path().join("stranger.jwk"), &stranger.private_jwk());
    let out = cli(validate(&["--planner-key", &stranger_key]), None).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "an untrusted planner cannot read the catalog"
    );
    assert!(
        stderr(&out).contains("refused the credential"),
        "{}",
        stderr(&out)
    );

    let out = cli(
        args(&[
            "cards",
            "register",
            "--url",
            "http://127.0.0.1:9",
            "--executor",
            "http://127.0.0.1:9",
        ]),
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot reach the executor"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_is_registered_with_a_signed_manifest_and_refused_once_it_changes() {
    use sagaplane_examples::checkout::{self, CheckoutSettings, RecoveryVariant};

    let dir = tempfile::tempdir().unwrap();
    let platform = SigningIdentity::from_seed([54; 32], Some("platform".into()));
    let planner = SigningIdentity::from_seed([55; 32], Some("planner-1".into()));
    let credentials = [("shop".to_owned(), "shop-token".to_owned())].into();
    let url = executor_with(dir.path(), &platform, &planner, credentials).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let settings = CheckoutSettings {
        token: Some("shop-token".into()),
        ..CheckoutSettings::default()
    };
    let shop = checkout::start(settings, listener, CancellationToken::new())
        .await
        .unwrap();

    // The curator names the endpoint in the manifest before signing it.
    let mut template: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("examples/checkout-mcp/manifest.json")).unwrap(),
    )
    .unwrap();
    template["server"]["url"] = serde_json::json!(shop.mcp_url);
    let manifest = dir.path().join("manifest.json");
    write_json(&manifest, &template);
    let key = write_json(&dir.path().join("platform.jwk"), &platform.private_jwk());
    let trust = write_json(&dir.path().join("platform.pub.jwk"), &platform.public_jwk());
    let signed = p(&dir.path().join("signed.json")).to_owned();
    let out = cli(
        args(&[
            "cards",
            "sign",
            p(&manifest),
            "--key",
            &key,
            "--out",
            &signed,
        ]),
        None,
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cli(args(&["cards", "verify", &signed, "--trust", &trust]), None).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!(
            "MCP manifest for shop (server \"checkout-mcp\" at {}, 6 tools)",
            shop.mcp_url
        )),
        "{}",
        stdout(&out)
    );

    let register = |manifest: &str| {
        args(&[
            "cards",
            "register",
            "--mcp",
            &shop.mcp_url,
            "--manifest",
            manifest,
            "--executor",
            &url,
        ])
    };
    let out = cli(register(p(&manifest)), Some(ADMIN_TOKEN)).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "an unsigned manifest is refused"
    );
    assert!(stderr(&out).contains("not curated"), "{}", stderr(&out));

    let out = cli(register(&signed), Some(ADMIN_TOKEN)).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("registered: agent shop (signed by platform)")
            && stdout(&out)
                .contains("charge_payment, create_shipment, payment_status, refund_payment"),
        "{}",
        stdout(&out)
    );

    // The server now declares other compensations than the ones the curator signed.
    shop.switches().set_variant(RecoveryVariant::Altered);
    let out = cli(register(&signed), Some(ADMIN_TOKEN)).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("changed after signing"),
        "{}",
        stderr(&out)
    );
}
