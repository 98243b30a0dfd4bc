//! codex's `exec-server` command line (issue 29, gap 10), each flag run against this daemon and
//! against codex's own exec-server (`common::codex_peer`) with the same arguments: the same
//! upgrades accepted, the same refused with the same status and text, the same start-up
//! refusals.

use crate::common::codex_peer::{codex_binary, CodexPeer};
use crate::common::{start_params, Client, Daemon, TIMEOUT};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest as _};

/// An upgrade's outcome: Ok, or the refusal's status and body.
async fn upgrade(url: &str, authorization: Option<&str>) -> Result<(), (u16, String)> {
    let mut request = url.into_client_request().unwrap();
    if let Some(value) = authorization {
        request
            .headers_mut()
            .insert("authorization", value.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok(_) => Ok(()),
        Err(tungstenite::Error::Http(response)) => Err((
            response.status().as_u16(),
            String::from_utf8_lossy(response.body().as_deref().unwrap_or_default()).into_owned(),
        )),
        Err(other) => panic!("unexpected error {other}"),
    }
}

/// Both daemons started with `args`: (ours, codex's).
fn both(args: &[&str]) -> (Daemon, CodexPeer) {
    (Daemon::start_with(args, &[]), CodexPeer::start(args))
}

/// An `Authorization` value (or none) and the upgrade's expected outcome.
type Case<'a> = (Option<&'a str>, Result<(), (u16, &'a str)>);

/// Each `Authorization` value gets the same answer from both, and `expected` from ours.
async fn same_answers(args: &[&str], cases: &[Case<'_>]) {
    let (ours, codex) = both(args);
    for (authorization, expected) in cases {
        let from_ours = upgrade(&ours.url, *authorization).await;
        let from_codex = upgrade(&codex.url, *authorization).await;
        assert_eq!(from_ours, from_codex, "ours vs codex for {authorization:?}");
        let expected = (*expected).map_err(|(status, text)| (status, text.to_owned()));
        assert_eq!(from_ours, expected, "for {authorization:?}");
    }
}

fn secret_file(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn sha256_hex(text: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[tokio::test]
async fn capability_token_upgrade_accepts_the_token_and_rejects_others() {
    let dir = tempfile::tempdir().unwrap();
    // codex trims the file; a trailing line break is the usual shape.
    let file = secret_file(&dir, "token", "capability-s3cret\n");
    let refused = |text| Err((401, text));
    let cases = [
        (None, refused("missing websocket bearer token")),
        (
            Some("Bearer wrong"),
            refused("invalid websocket bearer token"),
        ),
        (
            Some("Basic capability-s3cret"),
            refused("invalid authorization header"),
        ),
        (Some("Bearer "), refused("invalid authorization header")),
        (Some("Bearer capability-s3cret"), Ok(())),
        (Some("bearer capability-s3cret"), Ok(())),
    ];
    let by_file = ["--ws-auth", "capability-token", "--ws-token-file", &file];
    same_answers(&by_file, &cases).await;
    let digest = sha256_hex("capability-s3cret");
    let by_digest = [
        "--ws-auth",
        "capability-token",
        "--ws-token-sha256",
        &digest,
    ];
    same_answers(&by_digest, &cases).await;
}

fn jwt(secret: &str, claims: serde_json::Value) -> String {
    let key = jsonwebtoken::EncodingKey::from_secret(secret.as_bytes());
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap()
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test]
async fn signed_bearer_token_upgrade_checks_signature_expiry_issuer_and_audience() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "0123456789abcdef0123456789abcdef-shared";
    let file = secret_file(&dir, "secret", &format!("{secret}\n"));
    let t = now();
    let good = json!({"exp": t + 300, "iss": "orchestrator", "aud": ["x", "executors"]});
    let bearer = |claims| format!("Bearer {}", jwt(secret, claims));
    let cases = [
        (bearer(good.clone()), Ok(())),
        (
            format!(
                "Bearer {}",
                jwt("another-secret-of-at-least-32-bytes!", good.clone())
            ),
            Err((401, "invalid websocket jwt")),
        ),
        (
            "Bearer not.a.jwt".to_owned(),
            Err((401, "invalid websocket jwt")),
        ),
        // Inside the 5 s leeway, then past it.
        (
            bearer(json!({"exp": t - 2, "iss": "orchestrator", "aud": "executors"})),
            Ok(()),
        ),
        (
            bearer(json!({"exp": t - 60, "iss": "orchestrator", "aud": "executors"})),
            Err((401, "expired websocket jwt")),
        ),
        (
            bearer(
                json!({"exp": t + 300, "nbf": t + 60, "iss": "orchestrator", "aud": "executors"}),
            ),
            Err((401, "websocket jwt is not valid yet")),
        ),
        (
            bearer(json!({"exp": t + 300, "iss": "someone", "aud": "executors"})),
            Err((401, "websocket jwt issuer mismatch")),
        ),
        (
            bearer(json!({"exp": t + 300, "iss": "orchestrator", "aud": "others"})),
            Err((401, "websocket jwt audience mismatch")),
        ),
        (
            bearer(json!({"iss": "orchestrator", "aud": "executors"})),
            Err((401, "invalid websocket jwt")),
        ),
    ];
    let cases: Vec<_> = cases
        .iter()
        .map(|(value, expected)| (Some(value.as_str()), *expected))
        .collect();
    let args = [
        "--ws-auth",
        "signed-bearer-token",
        "--ws-shared-secret-file",
        &file,
        "--ws-issuer",
        "orchestrator",
        "--ws-audience",
        "executors",
        "--ws-max-clock-skew-seconds",
        "5",
    ];
    same_answers(&args, &cases).await;
}

/// An HS256 token with this JOSE `header`, signed by hand: jsonwebtoken's `Header` cannot
/// carry `crit`.
fn jwt_with_header(secret: &str, header: serde_json::Value, claims: serde_json::Value) -> String {
    use base64::Engine as _;
    let encode = |value: serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string())
    };
    let signed = format!("{}.{}", encode(header), encode(claims));
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let signature = ring::hmac::sign(&key, signed.as_bytes());
    let signature = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signature.as_ref());
    format!("{signed}.{signature}")
}

/// Issue 41, item 10: a token whose header names critical extensions (`crit`, RFC 7515
/// §4.1.11) must be refused, since this daemon understands none; it was accepted, as codex
/// still accepts it (jsonwebtoken ignores the member), so this is ours alone.
#[tokio::test]
async fn a_signed_token_naming_critical_header_extensions_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "0123456789abcdef0123456789abcdef-shared";
    let file = secret_file(&dir, "secret", secret);
    let daemon = Daemon::start_with(
        &[
            "--ws-auth",
            "signed-bearer-token",
            "--ws-shared-secret-file",
            &file,
        ],
        &[],
    );
    let claims = json!({"exp": now() + 300});
    let plain = json!({"alg": "HS256", "typ": "JWT"});
    let bearer = |header| format!("Bearer {}", jwt_with_header(secret, header, claims.clone()));
    // The same token without `crit` is good: only the member makes the difference.
    assert_eq!(upgrade(&daemon.url, Some(&bearer(plain))).await, Ok(()));
    for crit in [json!(["exp"]), json!(["b64"]), json!([]), json!(null)] {
        let header = json!({"alg": "HS256", "typ": "JWT", "crit": crit, "b64": true});
        assert_eq!(
            upgrade(&daemon.url, Some(&bearer(header))).await,
            Err((401, "invalid websocket jwt".to_owned())),
            "crit: {crit}"
        );
    }
}

/// The first line of stderr of `binary ARGS` that must refuse to start, and that it did.
fn refusal(binary: &std::path::Path, prefix: &[&str], args: &[&str]) -> String {
    let home = tempfile::tempdir_in("/var/tmp").unwrap();
    let output = std::process::Command::new(binary)
        .args(prefix)
        .args(["--listen", "ws://127.0.0.1:0"])
        .args(args)
        .env("CODEX_HOME", home.path())
        .env("EXEC_SERVER_STATE_DIR", "none")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success(), "{args:?} started");
    assert!(output.stdout.is_empty(), "{args:?} printed a banner");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn websocket_auth_flags_are_refused_in_the_same_combinations() {
    let dir = tempfile::tempdir().unwrap();
    let short = secret_file(&dir, "short", "too-short");
    let empty = secret_file(&dir, "empty", " \n");
    let missing = dir.path().join("missing").to_str().unwrap().to_owned();
    let cases: &[(&[&str], String)] = &[
        (
            &["--ws-auth", "capability-token"],
            "`--ws-token-file` or `--ws-token-sha256` is required when `--ws-auth capability-token` is set".into(),
        ),
        (
            &["--ws-token-file", &short],
            "websocket auth flags require `--ws-auth capability-token` or `--ws-auth signed-bearer-token`".into(),
        ),
        (
            &["--ws-auth", "capability-token", "--ws-token-sha256", "abc"],
            "--ws-token-sha256 must be a 64-character hex SHA-256 digest".into(),
        ),
        (
            &["--ws-auth", "capability-token", "--ws-token-file", &short, "--ws-issuer", "i"],
            "`--ws-shared-secret-file`, `--ws-issuer`, `--ws-audience`, and `--ws-max-clock-skew-seconds` require `--ws-auth signed-bearer-token`".into(),
        ),
        (
            &["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", &short],
            format!("signed websocket bearer secret {short} must be at least 32 bytes"),
        ),
        (
            &["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", &empty],
            format!("websocket auth secret {empty} must not be empty"),
        ),
        (
            &["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", &missing],
            format!("failed to read websocket auth secret {missing}: No such file or directory (os error 2)"),
        ),
    ];
    let ours = std::path::Path::new(env!("CARGO_BIN_EXE_exec-server"));
    for (args, message) in cases {
        let codex = refusal(&codex_binary(), &["exec-server"], args);
        assert!(
            codex.contains(message.as_str()),
            "codex for {args:?}: {codex}"
        );
        let ours = refusal(ours, &[], args);
        assert!(ours.contains(message.as_str()), "ours for {args:?}: {ours}");
    }
}

/// How long `environment/info` takes to answer while a `process/read` waits 1.5 s for output
/// that never comes, on a connection of a daemon started with `--concurrent-requests N`.
async fn second_reply_delay(url: &str) -> Duration {
    let client = Client::connect(url).await;
    client.initialize(None).await.unwrap();
    client
        .call("process/start", start_params("quiet", &["sleep", "5"]))
        .await;
    let waiting = client.request(
        "process/read",
        json!({"processId": "quiet", "afterSeq": 0, "waitMs": 1500}),
    );
    let other = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let asked = Instant::now();
        client.call("environment/info", json!({})).await;
        asked.elapsed()
    };
    let (_, delay) = tokio::time::timeout(TIMEOUT, futures::future::join(waiting, other))
        .await
        .expect("replies in time");
    client
        .call("process/terminate", json!({"processId": "quiet"}))
        .await;
    delay
}

#[tokio::test]
async fn concurrent_requests_bounds_the_requests_of_one_connection() {
    for (count, serialised) in [("1", true), ("2", false)] {
        let (ours, codex) = both(&["--concurrent-requests", count]);
        for (who, url) in [("ours", &ours.url), ("codex", &codex.url)] {
            let delay = second_reply_delay(url).await;
            assert_eq!(
                delay > Duration::from_millis(1000),
                serialised,
                "{who} with --concurrent-requests {count}: the second reply took {delay:?}"
            );
        }
    }
}

#[test]
fn exit_on_stdin_close_ends_the_daemon_with_its_parent_pipe() {
    // Close-on-exec: a daemon another test starts meanwhile must not hold the writing end.
    let (reader, writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let mut command = Daemon::command(
        env!("CARGO_BIN_EXE_exec-server"),
        &["--exit-on-stdin-close"],
        &[],
    );
    command.stdin(std::process::Stdio::from(reader));
    let mut daemon = Daemon::launch(command);
    assert_eq!(daemon.wait_exit(Duration::from_millis(500)), None);
    drop(writer);
    let status = daemon
        .wait_exit(TIMEOUT)
        .expect("the daemon exits once stdin closes");
    assert!(status.success(), "{status:?}");
    // codex takes the flag only for a daemon registered with --remote, the mode whose
    // credentials arrive on stdin; this daemon has no such mode, and honours it alone.
    let codex = refusal(
        &codex_binary(),
        &["exec-server"],
        &["--exit-on-stdin-close"],
    );
    assert!(codex.contains("--remote <URL>"), "{codex}");
}

#[tokio::test]
async fn codex_config_flags_are_accepted_and_logged() {
    let args = [
        "-c",
        "model=\"o3\"",
        "--config",
        "shell_environment_policy.inherit=all",
        "--enable",
        "executor_capability_discovery",
        "--disable",
        "apps",
        "--strict-config",
    ];
    let (ours, codex) = both(&args);
    for url in [&ours.url, &codex.url] {
        let client = Client::connect(url).await;
        client.initialize(None).await.expect("serves");
    }
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_exec-server"))
        .args(["--listen", "stdio://"])
        .args(args)
        .env("EXEC_SERVER_STATE_DIR", "none")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    for line in [
        "-c model=\"o3\": ignored, a codex config.toml override",
        "-c shell_environment_policy.inherit=all: ignored",
        "--enable executor_capability_discovery: ignored, a codex feature flag",
        "--disable apps: ignored",
        "--strict-config: nothing to check",
    ] {
        assert!(log.contains(line), "{line:?} not in {log}");
    }
}
