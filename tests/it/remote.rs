//! Remote mode end to end: the test plays the environment registry and the rendezvous on
//! loopback (`support::registry`) and the JSON-RPC client over the socket the executor dials.
//! Each scenario runs against this daemon and against codex's own exec-server (CODEX_VERSION): an
//! orchestrator written for codex's direct mode works with this daemon unchanged.

use crate::common::codex_peer::{CodexPeer, RemoteCodex};
use crate::common::{private_tempdir, start_params, unb64, Client, STATE_DIR_VAR, TIMEOUT};
use crate::support::registry::{self, Registry, ENVIRONMENT};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Binary {
    Ours,
    Codex,
}

/// An executor in remote mode; killed on drop.
pub(crate) enum Executor {
    Ours {
        child: Child,
        _state: tempfile::TempDir,
    },
    Codex(RemoteCodex),
}

impl Executor {
    /// `binary` in remote mode against `registry`, SigV4-signing with the test's credentials
    /// (given in its environment only), with `extra` arguments.
    pub(crate) fn start(binary: Binary, registry: &Registry, extra: &[&str]) -> Self {
        Self::start_with(binary, registry, extra, &[])
    }

    /// [`Self::start`] with `more_env` added to the executor's environment (an empty value
    /// leaves the variable out).
    pub(crate) fn start_with(
        binary: Binary,
        registry: &Registry,
        extra: &[&str],
        more_env: &[(&str, &str)],
    ) -> Self {
        let mut args = vec![
            "--remote",
            &registry.url,
            "--environment-id",
            ENVIRONMENT,
            "--remote-transport",
            "direct",
        ];
        if !extra.contains(&"--remote-token-file") {
            args.push("--aws-sigv4");
        }
        args.extend_from_slice(extra);
        let env: Vec<(&str, &str)> = registry::SIGV4_ENV
            .iter()
            .chain(more_env)
            // Of a key given twice the last value wins (as in `Command::envs`); empty: none.
            .filter(|(key, _)| !more_env.contains(&(key, "")))
            .copied()
            .collect();
        match binary {
            Binary::Codex => Self::Codex(CodexPeer::spawn_remote(&args, &env)),
            Binary::Ours => {
                let state = private_tempdir();
                let child = Command::new(env!("CARGO_BIN_EXE_exec-server"))
                    .args(&args)
                    .envs(env.iter().copied())
                    .env_remove("AWS_SESSION_TOKEN")
                    .env_remove("AWS_PROFILE")
                    .env(STATE_DIR_VAR, state.path())
                    .env("EXEC_SERVER_LOG", "info")
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("spawn exec-server");
                Self::Ours {
                    child,
                    _state: state,
                }
            }
        }
    }

    /// The executor's process id.
    pub(crate) fn pid(&mut self) -> u32 {
        self.child().id()
    }

    fn child(&mut self) -> &mut Child {
        match self {
            Self::Ours { child, .. } => child,
            Self::Codex(codex) => &mut codex.child,
        }
    }

    /// The exit status, within `patience`, and everything on stderr; None if still running.
    pub(crate) fn exit(
        &mut self,
        patience: Duration,
    ) -> Option<(std::process::ExitStatus, String)> {
        let deadline = Instant::now() + patience;
        loop {
            if let Some(status) = self.child().try_wait().unwrap() {
                let mut stderr = String::new();
                use std::io::Read as _;
                let _ = self.child().stderr.take()?.read_to_string(&mut stderr);
                return Some((status, stderr));
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        if let Self::Ours { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What codex and this daemon alike must send on the first dial: a SigV4-signed handshake to
/// the URL the registry gave, without a browser's Origin.
async fn first_socket(registry: &mut Registry) -> registry::Socket {
    let (handshake, socket) = registry.dial(TIMEOUT).await.expect("the executor dials");
    assert_eq!(handshake.method, "GET");
    assert_eq!(
        handshake.target,
        format!("/rendezvous/{ENVIRONMENT}?sig=abc&role=environment")
    );
    let signed = registry::verify_sigv4(&handshake).expect("a valid handshake signature");
    assert!(signed.contains(&"host".to_owned()), "{signed:?}");
    assert!(handshake.header("origin").is_none());
    socket.expect("accepted")
}

/// The registration: one signed POST of codex's exact body.
pub(crate) async fn check_registration(registry: &mut Registry) {
    let registration = registry
        .registration(TIMEOUT)
        .await
        .expect("the executor registers");
    assert_eq!(registration.method, "POST");
    assert_eq!(
        registration.target,
        format!("/cloud/environment/{ENVIRONMENT}/direct/register")
    );
    assert_eq!(
        registration.header("content-type"),
        Some("application/json")
    );
    assert_eq!(registration.body, br#"{"transport":"direct_jsonrpc_v1"}"#);
    let signed = registry::verify_sigv4(&registration).expect("a valid registration signature");
    assert_eq!(signed, ["content-type", "host", "x-amz-date"]);
}

/// Output of `id` read from `afterSeq` 0 once the process is closed.
pub(crate) async fn read_closed(client: &Client, id: &str) -> (Vec<u8>, Value) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let read = client
            .call("process/read", json!({"processId": id, "afterSeq": 0}))
            .await;
        if read["closed"] == true {
            let bytes = read["chunks"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|chunk| unb64(&chunk["chunk"]))
                .collect();
            return (bytes, read);
        }
        assert!(Instant::now() < deadline, "{id} never closed: {read}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn serves_and_resumes_across_a_redial(binary: Binary) {
    let mut registry = Registry::start().await;
    let _executor = Executor::start(binary, &registry, &[]);
    check_registration(&mut registry).await;
    let client = Client::from_stream(first_socket(&mut registry).await);
    let session = client.initialize(None).await.expect("initialize");
    let again = client
        .request("initialize", json!({"clientName": "e2e"}))
        .await
        .expect_err("a second initialize is refused");
    assert_eq!(again["code"], -32600, "{again}");
    assert_eq!(
        again["message"], "initialize may only be sent once per connection",
        "{again}"
    );
    // Unparsable text: an error with id -1, and the socket stays.
    client.send_text("not json").await;
    let unparsable = client.next_unsolicited().await;
    assert_eq!(unparsable["id"], -1, "{unparsable}");
    assert_eq!(unparsable["error"]["code"], -32600, "{unparsable}");
    let message = unparsable["error"]["message"].as_str().unwrap();
    let rendezvous = registry.rendezvous_url.split('?').next().unwrap();
    assert!(
        message.starts_with(&format!(
            "failed to parse websocket JSON-RPC message from direct exec-server websocket \
             {rendezvous}: "
        )),
        "{binary:?}: {message}"
    );
    // Output before the drop, while nobody is connected, and after the resume.
    let script = "echo before; sleep 1.5; echo during; sleep 1.5; echo after";
    let started = client
        .call("process/start", start_params("p1", &["sh", "-c", script]))
        .await;
    assert_eq!(started["processId"], "p1", "{started}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    client.close().await;
    let dropped = Instant::now();
    let (handshake, socket) = registry
        .dial(Duration::from_secs(10))
        .await
        .expect("a redial");
    let redialed = dropped.elapsed();
    assert!(redialed < Duration::from_secs(10), "{redialed:?}");
    registry::verify_sigv4(&handshake).expect("the redial is signed too");
    let client = Client::from_stream(socket.expect("accepted"));
    let resumed = client.initialize(Some(&session)).await.expect("resume");
    assert_eq!(resumed, session);
    let (output, read) = read_closed(&client, "p1").await;
    assert_eq!(output, b"before\nduring\nafter\n", "{read}");
    assert_eq!(read["exitCode"], 0, "{read}");
    assert!(
        registry
            .registration(Duration::from_millis(200))
            .await
            .is_none(),
        "registered once"
    );
    eprintln!("{binary:?}: redialed {redialed:?} after the drop");
}

#[tokio::test]
async fn serves_and_resumes_across_a_redial_ours() {
    serves_and_resumes_across_a_redial(Binary::Ours).await;
}

#[tokio::test]
async fn serves_and_resumes_across_a_redial_codex() {
    serves_and_resumes_across_a_redial(Binary::Codex).await;
}

/// The peer's pings are answered; this daemon pings too (codex does not, which leaves a dead
/// rendezvous unnoticed).
#[tokio::test]
async fn pings_go_both_ways() {
    let mut registry = Registry::start().await;
    let _executor = Executor::start(Binary::Ours, &registry, &["--ping-interval", "300ms"]);
    let mut socket = first_socket(&mut registry).await;
    socket
        .send(Message::Ping(b"rendezvous".to_vec().into()))
        .await
        .unwrap();
    let (mut pong, mut pinged) = (false, false);
    while !(pong && pinged) {
        let message = tokio::time::timeout(TIMEOUT, socket.next())
            .await
            .expect("pings and pongs in time")
            .expect("open")
            .unwrap();
        match message {
            Message::Pong(payload) => pong |= &payload[..] == b"rendezvous",
            Message::Ping(_) => pinged = true,
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// A rendezvous that stops answering (no pong for two ping intervals) is left and dialed
/// again: codex, which never pings, would wait on it until TCP gives up.
#[tokio::test]
async fn a_silent_rendezvous_is_left_and_dialed_again() {
    let mut registry = Registry::start().await;
    let _executor = Executor::start(Binary::Ours, &registry, &["--ping-interval", "300ms"]);
    // Accepted, then never read: its pings go unanswered.
    let _silent = first_socket(&mut registry).await;
    let started = Instant::now();
    let (_, socket) = registry.dial(TIMEOUT).await.expect("a new dial");
    assert!(socket.is_some());
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(3), "{waited:?}");
}

/// Beyond codex: a bearer token from a file instead of SigV4, on the registration and on the
/// handshake.
#[tokio::test]
async fn a_token_file_sends_a_bearer_token_on_both_requests() {
    let dir = private_tempdir();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "remote-secret\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut registry = Registry::start().await;
    let _executor = Executor::start(
        Binary::Ours,
        &registry,
        &["--remote-token-file", token_file.to_str().unwrap()],
    );
    let registration = registry
        .registration(TIMEOUT)
        .await
        .expect("a registration");
    assert_eq!(
        registration.header("authorization"),
        Some("Bearer remote-secret")
    );
    let (handshake, socket) = registry.dial(TIMEOUT).await.expect("a dial");
    assert_eq!(
        handshake.header("authorization"),
        Some("Bearer remote-secret")
    );
    let client = Client::from_stream(socket.unwrap());
    client.initialize(None).await.expect("initialize");
}

/// Beyond codex: with `--listen` too, both serve one daemon's sessions; a session begun over
/// the rendezvous is resumed on the listener. SIGTERM then stops the daemon as usual.
#[tokio::test(flavor = "multi_thread")]
async fn a_listener_beside_remote_mode_shares_its_sessions() {
    let mut registry = Registry::start().await;
    let mut executor = Executor::start(Binary::Ours, &registry, &["--listen", "ws://127.0.0.1:0"]);
    let mut banner = String::new();
    use std::io::BufRead as _;
    std::io::BufReader::new(executor.child().stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let remote = Client::from_stream(first_socket(&mut registry).await);
    let session = remote.initialize(None).await.expect("initialize");
    remote
        .call(
            "process/start",
            start_params("p", &["echo", "over the rendezvous"]),
        )
        .await;
    remote.close().await;
    // The daemon may not have seen the rendezvous connection close yet: until it has, the
    // session is still attached there (-32010), and the resume is asked again.
    let deadline = std::time::Instant::now() + TIMEOUT;
    let local = loop {
        let local = Client::connect(banner.trim()).await;
        match local.initialize(Some(&session)).await {
            Ok(resumed) => {
                assert_eq!(resumed, session);
                break local;
            }
            Err(error) if error["code"] == -32010 && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(error) => panic!("resuming on the listener: {error}"),
        }
    };
    let (output, _) = read_closed(&local, "p").await;
    assert_eq!(output, b"over the rendezvous\n");
    // The listener's /metrics counts remote mode's dials: the first and the one after the drop.
    let listener = banner.trim().strip_prefix("ws://").unwrap().to_owned();
    registry.dial(TIMEOUT).await.expect("a redial");
    // Counted once the daemon has read the 101, maybe after the rendezvous sent it.
    crate::common::eventually("both dials counted", || {
        let (status, metrics) = crate::metrics::http_get(&listener, "/metrics", None);
        status == 200 && metrics.contains("exec_server_remote_dials_total{outcome=\"connected\"} 2")
    })
    .await;
    let pid = executor.child().id() as i32;
    // SAFETY: a plain signal to the child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let (status, stderr) =
        tokio::task::block_in_place(|| executor.exit(TIMEOUT)).expect("SIGTERM stops the daemon");
    assert!(status.success(), "{stderr}");
}

/// Off loopback the rendezvous is `wss://`: the dial checks its certificate against the
/// system's roots (here a test CA given in `SSL_CERT_FILE`, which both executors honour).
async fn a_wss_rendezvous_is_dialed_over_tls(binary: Binary) {
    let dir = tempfile::tempdir().unwrap();
    let certs = crate::tls::issue(dir.path(), "rendezvous");
    let rendezvous = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("wss://{}/tls", rendezvous.local_addr().unwrap());
    let answer = json!({"environment_id": ENVIRONMENT, "url": url,
        "transport": "direct_jsonrpc_v1", "registration_id": "r"});
    let registry = Registry::answering(Some((200, answer.to_string()))).await;
    let ca = certs.join("ca.pem");
    let _executor = Executor::start_with(
        binary,
        &registry,
        &[],
        &[("SSL_CERT_FILE", ca.to_str().unwrap())],
    );
    let (tcp, _) = tokio::time::timeout(TIMEOUT, rendezvous.accept())
        .await
        .expect("a dial")
        .unwrap();
    let tls = tls_acceptor(&certs)
        .accept(tcp)
        .await
        .expect("a TLS handshake");
    let mut socket = tokio_tungstenite::accept_async(tls)
        .await
        .expect("an upgrade");
    let initialize = json!({"id": 1, "method": "initialize", "params": {"clientName": "tls"}});
    socket
        .send(Message::text(initialize.to_string()))
        .await
        .unwrap();
    let reply = tokio::time::timeout(TIMEOUT, socket.next())
        .await
        .expect("a reply")
        .unwrap()
        .unwrap();
    let reply: Value = serde_json::from_str(reply.to_text().unwrap()).unwrap();
    assert!(
        reply["result"]["sessionId"].is_string(),
        "{binary:?}: {reply}"
    );
}

/// A TLS acceptor for the certificate and key `crate::tls::issue` wrote to `dir`.
fn tls_acceptor(dir: &std::path::Path) -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(dir.join("cert.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("key.pem")).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config))
}

#[tokio::test]
async fn a_wss_rendezvous_is_dialed_over_tls_ours() {
    a_wss_rendezvous_is_dialed_over_tls(Binary::Ours).await;
}

#[tokio::test]
async fn a_wss_rendezvous_is_dialed_over_tls_codex() {
    a_wss_rendezvous_is_dialed_over_tls(Binary::Codex).await;
}

/// What is done over the dialed socket is audited as over an accepted one, the principal being
/// the environment and the peer the rendezvous (its URL without the query).
#[tokio::test]
async fn the_audit_log_names_the_environment() {
    let dir = private_tempdir();
    let log = dir.path().join("audit.log");
    let mut registry = Registry::start().await;
    let _executor = Executor::start(
        Binary::Ours,
        &registry,
        &["--audit-log", log.to_str().unwrap()],
    );
    let client = Client::from_stream(first_socket(&mut registry).await);
    client.initialize(None).await.expect("initialize");
    client
        .call("process/start", start_params("p", &["echo", "audited"]))
        .await;
    read_closed(&client, "p").await;
    let records: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let start = records
        .iter()
        .find(|record| record["action"] == "process/start")
        .expect("the start audited");
    assert_eq!(
        start["principal"],
        format!("environment:{ENVIRONMENT}"),
        "{start}"
    );
    let rendezvous = registry.rendezvous_url.split('?').next().unwrap();
    assert_eq!(start["peer"], rendezvous, "{start}");
}

/// Without keys in the environment, the static keys and the region of the profile named by
/// `--aws-profile` in the shared files sign.
#[tokio::test]
async fn a_profile_of_the_shared_files_signs() {
    let dir = private_tempdir();
    let (config, credentials) = (dir.path().join("config"), dir.path().join("credentials"));
    std::fs::write(
        &config,
        format!("[profile devbox]\nregion = {}\n", registry::REGION),
    )
    .unwrap();
    std::fs::write(
        &credentials,
        format!(
            "[default]\naws_access_key_id = WRONG\naws_secret_access_key = WRONG\n\n\
             [devbox]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            registry::KEY_ID,
            registry::SECRET
        ),
    )
    .unwrap();
    let mut registry = Registry::start().await;
    let _executor = Executor::start_with(
        Binary::Ours,
        &registry,
        &["--aws-profile", "devbox"],
        &[
            ("AWS_ACCESS_KEY_ID", ""),
            ("AWS_SECRET_ACCESS_KEY", ""),
            ("AWS_REGION", ""),
            ("AWS_CONFIG_FILE", config.to_str().unwrap()),
            ("AWS_SHARED_CREDENTIALS_FILE", credentials.to_str().unwrap()),
        ],
    );
    check_registration(&mut registry).await;
    first_socket(&mut registry).await;
}

/// The Rust client drives a socket the daemon dialed (an orchestrator that is its own
/// rendezvous), processes and all.
#[tokio::test]
async fn the_rust_client_drives_a_dialed_socket() {
    use exec_server_client::ClientOptions;
    let mut registry = Registry::start().await;
    let _executor = Executor::start(Binary::Ours, &registry, &[]);
    let socket = first_socket(&mut registry).await;
    let client =
        exec_server_client::Client::over_dialed_socket(socket, ClientOptions::new("rendezvous"))
            .await
            .expect("the handshake over the dialed socket");
    assert_eq!(crate::tls::echo(&client, "dialed").await, "dialed\n");
}
