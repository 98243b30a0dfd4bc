//! A fleet in miniature (issue #45): 50 daemons, each on its own loopback address and port
//! 8888 as a pod would be, behind nginx configured as agent-sandbox's router contract says
//! (route by `X-Sandbox-ID`, HTTP/1.1 upstream, `Authorization` removed, WebSocket upgrades
//! passed with no timeout), driven over the legacy runtime API and by the Rust client over a
//! WebSocket whose session outlives a restart of the router. The stock Python SDK drives the
//! same fleet in tests/agent_sandbox/.

use crate::agent_sandbox::{json_of, multipart, send_to};
use crate::common::*;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SANDBOXES: usize = 50;
const TOKEN: &str = "s3cret";

/// The fleet's pods: sandbox `sandbox-K` on 127.0.45.(10+K):8888, its base dir holding `id`.
struct Fleet {
    daemons: Vec<Daemon>,
    bases: Vec<tempfile::TempDir>,
}

fn address(index: usize) -> String {
    format!("127.0.45.{}:8888", 10 + index)
}

impl Fleet {
    fn start() -> (Self, Vec<Duration>) {
        let (mut daemons, mut bases, mut starts) = (Vec::new(), Vec::new(), Vec::new());
        for index in 0..SANDBOXES {
            let base = scratch_dir();
            std::fs::write(base.path().join("id"), format!("sandbox-{index}")).unwrap();
            let mut command = Command::new(env!("CARGO_BIN_EXE_exec-server"));
            command
                .args(["--listen", &format!("ws://{}", address(index))])
                .args(["--connection-token", TOKEN, "--runtime-base-dir"])
                .arg(base.path())
                .arg("--sandboxd-root")
                .arg(base.path())
                .env("EXEC_SERVER_SANDBOX_ID", format!("sandbox-{index}"))
                .env(STATE_DIR_VAR, "none")
                .env("EXEC_SERVER_LOG", "error")
                .stdout(Stdio::piped());
            let started = Instant::now();
            daemons.push(Daemon::launch(command));
            starts.push(started.elapsed());
            bases.push(base);
        }
        let fleet = Self { daemons, bases };
        (fleet, starts)
    }
}

/// nginx as the router, on `port`, restartable on the same port.
struct Router {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Router {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().display().to_string();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut routes: String = (0..SANDBOXES)
            .map(|index| format!("    sandbox-{index} {};\n", address(index)))
            .collect();
        // A stale route: the router's cache still sends `sandbox-gone` to sandbox-0's pod.
        routes.push_str(&format!("    sandbox-gone {};\n", address(0)));
        // The router contract (sandbox-router-README.md), in nginx's words.
        let config = format!(
            "daemon off; master_process off; pid {root}/nginx.pid; error_log {root}/error.log;\n\
             events {{ worker_connections 1024; }}\n\
             http {{ access_log off; client_body_temp_path {root}/body; proxy_temp_path {root}/proxy;\n\
             fastcgi_temp_path {root}/fastcgi; uwsgi_temp_path {root}/uwsgi; scgi_temp_path {root}/scgi;\n\
             map $http_upgrade $connection_upgrade {{ default upgrade; '' ''; }}\n\
             map $http_x_sandbox_id $sandbox {{\n{routes}    default 127.0.45.1:9;\n}}\n\
             server {{ listen 127.0.0.1:{port};\n\
               location / {{ proxy_pass http://$sandbox; proxy_http_version 1.1;\n\
                 proxy_set_header Authorization \"\";\n\
                 proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection $connection_upgrade;\n\
                 proxy_read_timeout 1d; proxy_send_timeout 1d; proxy_buffering off;\n\
                 proxy_request_buffering off; client_max_body_size 0; }} }} }}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), config).unwrap();
        let child = Self::spawn(&dir);
        let router = Self { child, dir, port };
        router.wait_listening();
        router
    }

    fn spawn(dir: &tempfile::TempDir) -> Child {
        let root = dir.path().display().to_string();
        let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|path| std::path::Path::new(path).exists())
            .expect("nginx is required by this test (CI installs Debian's nginx-light: .ci/run)");
        Command::new(nginx)
            .args(["-p", &root, "-e", &format!("{root}/error.log"), "-c"])
            .arg(dir.path().join("nginx.conf"))
            .stdin(Stdio::null())
            .spawn()
            .expect("start nginx")
    }

    fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "nginx did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops nginx (every proxied connection with it) and starts it again.
    fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(&self.dir);
        self.wait_listening();
    }

    /// `method path` to `sandbox` through the router, with a wrong bearer token beside the
    /// right `X-Access-Token`: the router must drop `Authorization` for it to pass.
    fn send(
        &self,
        sandbox: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, String) {
        let stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        let routed = [("X-Sandbox-ID", sandbox), ("Authorization", "Bearer wrong")];
        send_to(stream, method, path, &[headers, &routed].concat(), body)
    }

    fn execute(&self, sandbox: &str, command: &str) -> serde_json::Value {
        let body = serde_json::json!({ "command": command }).to_string();
        let json = [("Content-Type", "application/json")];
        let (status, answer) = self.send(sandbox, "POST", "/execute", &json, body.as_bytes());
        assert_eq!(status, 200, "{sandbox}: {answer}");
        json_of(&answer)
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// agent-sandbox's sandboxd file API (`/v1/files`) through the router, each pod's rooted at
/// its own base: what one sandbox writes, another does not see.
fn sandboxd_files_through(router: &Router, fleet: &Fleet) {
    let put = router.send("sandbox-9", "PUT", "/v1/files/rest/a.txt", &[], b"rest");
    assert_eq!(put.0, 204, "{}", put.1);
    let written = fleet.bases[9].path().join("rest/a.txt");
    assert_eq!(std::fs::read_to_string(written).unwrap(), "rest");
    let (status, body) = router.send("sandbox-9", "GET", "/v1/files/rest/a.txt", &[], b"");
    assert_eq!((status, body.as_str()), (200, "rest"));
    let (status, listing) = router.send("sandbox-9", "GET", "/v1/files/rest", &[], b"");
    assert_eq!(status, 200, "{listing}");
    assert_eq!(
        json_of(&listing)["entries"][0]["name"],
        "a.txt",
        "{listing}"
    );
    let elsewhere = router.send("sandbox-10", "GET", "/v1/files/rest/a.txt", &[], b"");
    assert_eq!(elsewhere.0, 404, "{}", elsewhere.1);
    // Encoded, so that nginx passes the dots on rather than resolving them itself.
    let out = "/v1/files/%2e%2e/%2e%2e/etc/passwd";
    let traversal = router.send("sandbox-9", "GET", out, &[], b"");
    assert_eq!(traversal.0, 403, "{traversal:?}");
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_sandboxes_behind_a_router_by_sandbox_id() {
    let (fleet, mut starts) = Fleet::start();
    starts.sort();
    let rss: Vec<u64> = fleet
        .daemons
        .iter()
        .map(|daemon| crate::common::rss_kib(daemon.pid()))
        .collect();
    eprintln!(
        "fleet: {SANDBOXES} daemons; start to ready p50 {:?} p99 {:?}; idle RSS mean {} KiB, max {} KiB",
        percentile(&starts, 50),
        percentile(&starts, 99),
        rss.iter().sum::<u64>() / rss.len() as u64,
        rss.iter().max().unwrap()
    );
    let mut router = Router::start();
    // Fan-out: every sandbox at once, each answering as itself.
    let started = Instant::now();
    let answers = std::thread::scope(|scope| {
        let router = &router;
        let handles: Vec<_> = (0..SANDBOXES)
            .map(|index| scope.spawn(move || router.execute(&format!("sandbox-{index}"), "cat id")))
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect::<Vec<_>>()
    });
    eprintln!(
        "fleet: {SANDBOXES} /execute through one router at once in {:?}",
        started.elapsed()
    );
    for (index, answer) in answers.iter().enumerate() {
        assert_eq!(answer["stdout"], format!("sandbox-{index}"), "{answer}");
    }
    // Files through the router.
    let (content_type, body) = multipart("out/report.txt", b"routed");
    let upload = [("Content-Type", content_type.as_str())];
    assert_eq!(
        router
            .send("sandbox-7", "POST", "/upload", &upload, &body)
            .0,
        200
    );
    let (status, body) = router.send("sandbox-7", "GET", "/download/out/report.txt", &[], b"");
    assert_eq!((status, body.as_str()), (200, "routed"));
    assert_eq!(
        router
            .send("sandbox-8", "GET", "/download/out/report.txt", &[], b"")
            .0,
        404
    );
    sandboxd_files_through(&router, &fleet);
    // A stale route reaches another tenant's pod, which refuses it.
    let (status, body) = router.send("sandbox-gone", "GET", "/list/", &[], b"");
    assert_eq!(status, 421, "{body}");

    // A WebSocket session through the router, resumed after the router restarts.
    let url = format!("ws://127.0.0.1:{}/", router.port);
    let options = exec_server_client::ClientOptions::new(url)
        .token(Some(TOKEN.into()))
        .header("X-Sandbox-ID", "sandbox-3");
    let client = exec_server_client::Client::connect(options).await.unwrap();
    let command = exec_server_client::Command::new(["sh", "-c", "cat id; sleep 2; echo ' after'"])
        .cwd(&fleet.bases[3].path().to_string_lossy())
        .unwrap();
    let mut process = client.start(command).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    router.restart();
    let collected = process.collect().await;
    assert_eq!(collected.exit_code, Some(0));
    assert_eq!(
        String::from_utf8_lossy(&collected.output),
        "sandbox-3 after\n"
    );
}
