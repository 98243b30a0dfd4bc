//! `GET /metrics`: Prometheus text, parsed by the Prometheus project's own Python parser
//! (`python3-prometheus-client`, installed by .ci/run), on the daemon's port behind the token and
//! on `--metrics-listen` without it; the values move with activity.

use crate::common::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read as _, Write as _};

/// `GET path` on `addr` (`IP:PORT`): the status and the body.
pub fn http_get(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let authorization = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{authorization}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, body.to_owned())
}

/// Sample (name with its labels sorted, e.g. `x{a="1"}`) → value, as the Python parser read
/// the exposition. Fails (never skips) when the parser is missing: CI installs it.
fn parse(text: &str) -> HashMap<String, f64> {
    const SCRIPT: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
samples = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join('%s="%s"' % kv for kv in sorted(s.labels.items()))
        samples[s.name + ("{" + labels + "}" if labels else "")] = s.value
print(json.dumps(samples))
"#;
    // Debian's interpreter, which the package is for (a pyenv `python3` on PATH would not see it).
    let mut child = std::process::Command::new("/usr/bin/python3")
        .args(["-c", SCRIPT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 (with python3-prometheus-client) is needed to parse the metrics");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "the Prometheus parser refused the exposition (or is missing: apt-get install \
         python3-prometheus-client): {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn value(samples: &HashMap<String, f64>, name: &str) -> f64 {
    samples.get(name).copied().unwrap_or(0.0)
}

/// A free loopback port for `--metrics-listen`.
pub(crate) fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn metrics_parse_and_move_with_activity() {
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let daemon = Daemon::start_with(
        &["--metrics-listen", &metrics_addr],
        &[("EXEC_SERVER_CONNECTION_TOKEN", "metrics-token")],
    );
    let addr = daemon.url.strip_prefix("ws://").unwrap().to_owned();

    // Behind the token on the daemon's own port; open on --metrics-listen.
    assert_eq!(http_get(&addr, "/metrics", None).0, 401);
    assert_eq!(http_get(&addr, "/metrics", Some("wrong")).0, 401);
    let (status, before) = http_get(&addr, "/metrics", Some("metrics-token"));
    assert_eq!(status, 200, "{before}");
    let before = parse(&before);
    assert_eq!(value(&before, "exec_server_connections_open"), 0.0);

    let client = Client::connect_with_token(&daemon.url, "metrics-token").await;
    client.initialize(None).await.unwrap();
    for id in ["one", "two"] {
        client
            .call("process/start", start_params(id, &["echo", "hello"]))
            .await;
        let (output, last) = read_all(&client, id).await;
        assert_eq!(output, b"hello\n", "{last}");
    }
    let dir = scratch_dir();
    let file = file_uri(&dir.path().join("f"));
    client
        .call(
            "fs/writeFile",
            json!({"path": file, "dataBase64": b64(b"data")}),
        )
        .await;
    let missing = file_uri(&dir.path().join("missing"));
    let error = client
        .request("fs/getMetadata", json!({"path": missing}))
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32004, "{error}");
    let error = client.request("no/such", Value::Null).await.unwrap_err();
    assert_eq!(error["code"], -32601, "{error}");

    let (status, after) = http_get(&metrics_addr, "/metrics", None);
    assert_eq!(status, 200, "{after}");
    let after = parse(&after);
    let moved = |name: &str| value(&after, name) - value(&before, name);
    let unsandboxed = "{sandboxed=\"false\"}";
    assert_eq!(
        moved(&format!("exec_server_process_launches_total{unsandboxed}")),
        2.0
    );
    assert_eq!(
        moved(&format!(
            "exec_server_process_launch_seconds_count{unsandboxed}"
        )),
        2.0
    );
    assert!(
        value(
            &after,
            &format!("exec_server_process_launch_seconds_sum{unsandboxed}")
        ) > 0.0
    );
    assert_eq!(
        moved("exec_server_process_launches_total{sandboxed=\"true\"}"),
        0.0
    );
    assert_eq!(moved("exec_server_connections_total"), 1.0);
    assert_eq!(value(&after, "exec_server_connections_open"), 1.0);
    assert_eq!(
        value(&after, "exec_server_sessions{state=\"attached\"}"),
        1.0
    );
    let finished = value(&after, "exec_server_processes{state=\"exited\"}")
        + value(&after, "exec_server_processes{state=\"closed\"}");
    assert_eq!(finished, 2.0);
    assert_eq!(
        value(&after, "exec_server_processes{state=\"running\"}"),
        0.0
    );
    assert_eq!(moved("exec_server_output_bytes_total"), 12.0);
    assert!(value(&after, "exec_server_retained_output_bytes") >= 12.0);
    assert_eq!(moved("exec_server_rpc_errors_total{code=\"-32004\"}"), 1.0);
    assert_eq!(moved("exec_server_rpc_errors_total{code=\"-32601\"}"), 1.0);
    assert_eq!(
        moved("exec_server_fs_calls_total{method=\"fs/writeFile\"}"),
        1.0
    );
    assert_eq!(
        moved("exec_server_fs_calls_total{method=\"fs/getMetadata\"}"),
        1.0
    );
    assert_eq!(moved("exec_server_http_calls_total"), 0.0);

    // A detached session is counted as such.
    client.close().await;
    eventually("the session detached", || {
        let samples = parse(&http_get(&metrics_addr, "/metrics", None).1);
        value(&samples, "exec_server_sessions{state=\"detached\"}") == 1.0
            && value(&samples, "exec_server_connections_open") == 0.0
    })
    .await;
}

#[tokio::test]
async fn metrics_are_open_on_the_port_without_a_token() {
    let daemon = Daemon::start();
    let addr = daemon.url.strip_prefix("ws://").unwrap();
    let (status, text) = http_get(addr, "/metrics", None);
    assert_eq!(status, 200);
    assert!(parse(&text).contains_key("exec_server_connections_total"));
}
