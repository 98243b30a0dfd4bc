//! `--listen wss://`: TLS with a certificate made here, refused under the wrong CA, and a new
//! certificate taken on SIGHUP while established connections go on.

use crate::common;

use common::Daemon;
use exec_server_client::{Client, ClientOptions, Command, ProcessEvent};
use std::path::{Path, PathBuf};
use std::process::Stdio;

const BIN: &str = env!("CARGO_BIN_EXE_exec-server");

/// A CA, and a certificate for 127.0.0.1 that it signed: files `ca.pem`, `cert.pem`, `key.pem`
/// in `dir`.
pub(crate) fn issue(dir: &Path, name: &str) -> PathBuf {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{name} test CA"));
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let out = dir.join(name);
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(out.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(out.join("key.pem"), key.serialize_pem()).unwrap();
    out
}

fn tls_daemon(cert: &Path, key: &Path) -> Daemon {
    let mut command = std::process::Command::new(BIN);
    command
        .args(["--listen", "wss://127.0.0.1:0", "--tls-cert"])
        .arg(cert)
        .arg("--tls-key")
        .arg(key)
        .env_remove("EXEC_SERVER_CONNECTION_TOKEN")
        .env("EXEC_SERVER_LOG", "warn")
        .stdout(Stdio::piped());
    Daemon::launch(command)
}

async fn connect(url: &str, ca: &Path) -> Result<Client, exec_server_client::Error> {
    let mut options = ClientOptions::new(url).ca_file(Some(ca.to_owned()));
    options.reconnect_deadline = None;
    Client::connect(options).await
}

/// `echo TEXT` run through `client`, its output.
pub(crate) async fn echo(client: &Client, text: &str) -> String {
    let command = Command::new(["echo", text])
        .cwd("/tmp")
        .unwrap()
        .env("PATH", "/usr/bin:/bin");
    let mut process = client.start(command).await.unwrap();
    let mut output = Vec::new();
    while let Some(event) = process.next_event().await {
        if let ProcessEvent::Output { data, .. } = event {
            output.extend_from_slice(&data);
        }
    }
    String::from_utf8(output).unwrap()
}

#[tokio::test]
async fn wss_serves_under_its_ca_refuses_another_and_reloads_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (issue(dir.path(), "first"), issue(dir.path(), "second"));
    // The files the daemon reads, replaced in place later.
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::copy(first.join("cert.pem"), &cert).unwrap();
    std::fs::copy(first.join("key.pem"), &key).unwrap();
    let daemon = tls_daemon(&cert, &key);
    assert!(daemon.url.starts_with("wss://127.0.0.1:"), "{}", daemon.url);

    let established = connect(&daemon.url, &first.join("ca.pem")).await.unwrap();
    assert_eq!(echo(&established, "over tls").await, "over tls\n");
    let refused = connect(&daemon.url, &second.join("ca.pem"))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("certificate"), "{refused}");
    // Plain WebSocket on the TLS port gets nowhere.
    let plain = daemon.url.replacen("wss://", "ws://", 1);
    let mut options = ClientOptions::new(plain);
    options.reconnect_deadline = None;
    assert!(Client::connect(options).await.is_err());

    std::fs::copy(second.join("cert.pem"), &cert).unwrap();
    std::fs::copy(second.join("key.pem"), &key).unwrap();
    daemon.send_signal(libc::SIGHUP);
    let mut reloaded = None;
    for _ in 0..100 {
        if let Ok(client) = connect(&daemon.url, &second.join("ca.pem")).await {
            reloaded = Some(client);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let reloaded = reloaded.expect("new handshakes use the reloaded certificate");
    assert_eq!(echo(&reloaded, "reloaded").await, "reloaded\n");
    assert!(connect(&daemon.url, &first.join("ca.pem")).await.is_err());
    assert_eq!(
        echo(&established, "still here").await,
        "still here\n",
        "an established connection outlives the reload"
    );

    // A pair that cannot be loaded leaves the previous one serving.
    std::fs::write(&key, "not a key").unwrap();
    daemon.send_signal(libc::SIGHUP);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let after = connect(&daemon.url, &second.join("ca.pem")).await.unwrap();
    assert_eq!(echo(&after, "kept").await, "kept\n");
    // The CLI takes the CA file too.
    let output = std::process::Command::new(BIN)
        .args(["run", "--url", &daemon.url, "--ca-file"])
        .arg(second.join("ca.pem"))
        .args(["--", "echo", "cli"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "cli\n");
    let ca = second.join("ca.pem");
    let probe = [
        "ready",
        "--url",
        &daemon.url,
        "--ca-file",
        ca.to_str().unwrap(),
    ];
    assert_eq!(common::exec_server(&probe).0, 0, "the ready probe over TLS");
}

#[tokio::test]
async fn tls_flags_must_match_the_listener() {
    let dir = tempfile::tempdir().unwrap();
    let pair = issue(dir.path(), "pair");
    let (code, _, stderr) = common::exec_server(&["--listen", "wss://127.0.0.1:0"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("needs --tls-cert and --tls-key"),
        "{stderr}"
    );
    let with_pair = |listen: &str, key: &Path| {
        let cert = pair.join("cert.pem");
        common::exec_server(&[
            "--listen",
            listen,
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ])
    };
    let (code, _, stderr) = with_pair("ws://127.0.0.1:0", &pair.join("key.pem"));
    assert_eq!(code, 1);
    assert!(stderr.contains("are for a wss:// listener"), "{stderr}");
    // A key that does not fit the certificate is found at startup.
    let other = issue(dir.path(), "other");
    let (code, _, stderr) = with_pair("wss://127.0.0.1:0", &other.join("key.pem"));
    assert_eq!(code, 1);
    assert!(stderr.contains("does not fit"), "{stderr}");
}

/// Reachable from elsewhere, with no token and no TLS: said loudly.
#[tokio::test]
async fn an_open_listener_beyond_loopback_is_warned_about() {
    let mut command = std::process::Command::new(BIN);
    command
        .args(["--listen", "ws://0.0.0.0:0"])
        .env_remove("EXEC_SERVER_CONNECTION_TOKEN")
        .env("EXEC_SERVER_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut daemon = Daemon::launch(command);
    let mut stderr = daemon.take_stderr().unwrap();
    daemon.send_signal(libc::SIGTERM);
    daemon.wait_exit(common::TIMEOUT);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
    assert!(text.contains("WITHOUT A TOKEN OR TLS"), "{text}");
}
