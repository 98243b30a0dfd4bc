//! Staying connected through a reverse proxy with a short idle timeout: nginx (Debian's
//! package; CI installs it) with `proxy_read_timeout 5s` in front of the daemon. The daemon's
//! WebSocket pings (`--ping-interval`) are reads for nginx, so an idle session and a long-poll
//! outlive the timeout; without them nginx drops the connection.

use crate::common;

use common::*;
use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// nginx proxying to each of `upstreams` (ws:// URLs) on a port of its own, as a child of the
/// test, killed when dropped.
struct Nginx {
    child: Child,
    urls: Vec<String>,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn nginx_binary() -> &'static str {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|path| std::path::Path::new(path).exists())
        .expect("nginx is required by this test (CI installs Debian's nginx-light: .ci/run)")
}

impl Nginx {
    fn start(upstreams: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().display().to_string();
        let mut servers = String::new();
        let mut urls = Vec::new();
        for upstream in upstreams {
            let port = free_port();
            let upstream = upstream.replacen("ws://", "http://", 1);
            // What docs/operations.md tells a deployer to write.
            servers.push_str(&format!(
                "server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass {upstream}; \
                 proxy_http_version 1.1; proxy_set_header Upgrade $http_upgrade; \
                 proxy_set_header Connection \"upgrade\"; proxy_read_timeout 5s; \
                 proxy_send_timeout 5s; }} }}\n"
            ));
            urls.push(format!("ws://127.0.0.1:{port}/"));
        }
        let config = format!(
            "daemon off; master_process off; pid {root}/nginx.pid; error_log {root}/error.log info;\n\
             events {{ worker_connections 64; }}\n\
             http {{ access_log off; client_body_temp_path {root}/body; proxy_temp_path {root}/proxy;\n\
             fastcgi_temp_path {root}/fastcgi; uwsgi_temp_path {root}/uwsgi; scgi_temp_path {root}/scgi;\n\
             {servers}}}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), config).unwrap();
        let child = Command::new(nginx_binary())
            .args(["-p", &root, "-e", &format!("{root}/error.log"), "-c"])
            .arg(dir.path().join("nginx.conf"))
            .stdin(Stdio::null())
            .spawn()
            .expect("start nginx");
        let nginx = Self {
            child,
            urls,
            _dir: dir,
        };
        let deadline = Instant::now() + TIMEOUT;
        for url in &nginx.urls {
            let address = url.trim_start_matches("ws://").trim_end_matches('/');
            while std::net::TcpStream::connect(address).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "nginx did not listen on {address}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        nginx
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Idle for 30 s behind the proxy, then a call on the same connection.
async fn an_idle_session_stays_connected(url: &str) {
    let client = Client::connect(url).await;
    client.initialize(None).await.unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let info = client.call("environment/info", json!({})).await;
    assert!(info["shell"].is_object(), "{info}");
}

/// A 20 s long-poll `process/read` of a process that says nothing completes with its result.
async fn a_long_poll_completes(url: &str) {
    let client = Client::connect(url).await;
    client.initialize(None).await.unwrap();
    client
        .call("process/start", start_params("quiet", &["sleep", "60"]))
        .await;
    let started = Instant::now();
    let reply = client
        .raw_request_within(
            json!({"id": "poll", "method": "process/read",
                   "params": {"processId": "quiet", "afterSeq": 0, "waitMs": 20_000}}),
            Duration::from_secs(40),
        )
        .await;
    assert_eq!(reply["result"]["chunks"], json!([]), "{reply}");
    assert_eq!(reply["result"]["exited"], false, "{reply}");
    assert!(started.elapsed() >= Duration::from_secs(19), "{reply}");
    client
        .call("process/terminate", json!({"processId": "quiet"}))
        .await;
}

/// Without pings within the proxy's timeout, nginx drops the idle connection: what the test
/// above guards against.
async fn without_pings_the_proxy_drops_the_connection(url: &str) {
    let mut client = Client::connect(url).await;
    client.initialize(None).await.unwrap();
    let started = Instant::now();
    client.wait_closed().await;
    let after = started.elapsed();
    assert!(
        (Duration::from_secs(4)..Duration::from_secs(15)).contains(&after),
        "dropped after {after:?}"
    );
}

#[tokio::test]
async fn pings_keep_a_session_and_a_long_poll_alive_through_nginx() {
    let pinging = Daemon::start_with(&["--ping-interval", "2s"], &[]);
    let silent = Daemon::start_with(&["--ping-interval", "60s"], &[]);
    let nginx = Nginx::start(&[&pinging.url, &silent.url]);
    let (through_pinging, through_silent) = (&nginx.urls[0], &nginx.urls[1]);
    tokio::join!(
        an_idle_session_stays_connected(through_pinging),
        a_long_poll_completes(through_pinging),
        without_pings_the_proxy_drops_the_connection(through_silent),
    );
}
