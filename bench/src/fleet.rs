//! The fleet family (issue 45): daemons as agent-sandbox's pods, each on its own loopback
//! address and port 8888, behind nginx configured as agent-sandbox's router contract says, as
//! tests/it/agent_sandbox_fleet.rs and tests/agent_sandbox/ run them; beside the reference
//! runtime (FastAPI under uvicorn) for memory, start and round trip.

use crate::daemon::{status_kib, Daemon};
use crate::harness::{alternate, stats, Results, Size};
use crate::report::Row;
use anyhow::Context as _;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The fleet's pods, and so the fan-out's width.
const SANDBOXES: usize = 50;
const TOKEN: &str = "bench-fleet";
/// The reference runtime's dependencies, pinned: its `File` routes need python-multipart.
pub(crate) const REFERENCE_PACKAGES: &[&str] = &[
    "fastapi==0.163.2",
    "uvicorn==0.54.0",
    "python-multipart==0.0.34",
];
/// How long every runtime idles before its RSS is read.
const SETTLE: Duration = Duration::from_secs(1);

fn name(index: usize) -> String {
    format!("sandbox-{index}")
}

/// `sandbox-K`'s pod: 127.0.48.(10+K):8888, apart from the fleet tests' 127.0.45.x and
/// 127.0.46.x, so the bench and a test run can share the machine.
fn address(index: usize) -> String {
    format!("127.0.48.{}:8888", 10 + index)
}

fn millis(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1e3
}

/// The sandboxes' pods, started one after another, with each one's start to ready in ms.
struct Fleet {
    pods: Vec<Daemon>,
    ready_ms: Vec<f64>,
    _bases: tempfile::TempDir,
}

impl Fleet {
    async fn start(binary: &Path, http: &reqwest::Client) -> anyhow::Result<Self> {
        let bases = tempfile::tempdir()?;
        // The token from a file, as the template mounts it (on the command line the daemon
        // warns that every local user can read it).
        let token = bases.path().join("token");
        std::fs::write(&token, TOKEN)?;
        std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let token = token.to_str().context("temporary path is not UTF-8")?;
        let (mut pods, mut ready_ms) = (Vec::new(), Vec::new());
        for index in 0..SANDBOXES {
            let base = bases.path().join(name(index));
            std::fs::create_dir(&base)?;
            std::fs::write(base.join("id"), name(index))?;
            let base = base.to_str().context("temporary path is not UTF-8")?;
            let started = Instant::now();
            let pod = Daemon::start_pod(
                binary,
                &format!("ws://{}", address(index)),
                &["--connection-token-file", token, "--runtime-base-dir", base],
                &[("EXEC_SERVER_SANDBOX_ID", &name(index))],
            )?;
            wait_ok(http, &format!("http://{}/readyz", address(index))).await?;
            ready_ms.push(millis(started.elapsed()));
            pods.push(pod);
        }
        Ok(Self {
            pods,
            ready_ms,
            _bases: bases,
        })
    }
}

/// Polls `url` until it answers 200 (a refused connection is "not yet"), for 10 s at most.
async fn wait_ok(http: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(response) = http.get(url).send().await {
            if response.status() == 200 {
                return Ok(());
            }
        }
        anyhow::ensure!(Instant::now() < deadline, "{url} not ready after 10 s");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// `POST {base}/execute` as the SDK sends it through the router: the sandbox's name in
/// `X-Sandbox-ID`, the token in `X-Access-Token` (the router drops `Authorization`).
async fn execute(
    http: &reqwest::Client,
    base: &str,
    sandbox: &str,
    command: &str,
) -> anyhow::Result<Value> {
    let response = http
        .post(format!("{base}/execute"))
        .header("Content-Type", "application/json")
        .header("X-Sandbox-ID", sandbox)
        .header("X-Access-Token", TOKEN)
        .body(serde_json::json!({ "command": command }).to_string())
        .send()
        .await?;
    let status = response.status();
    let body = response.bytes().await?;
    anyhow::ensure!(
        status == 200,
        "{base} {sandbox}: {status} {}",
        String::from_utf8_lossy(&body)
    );
    let answer: Value = serde_json::from_slice(&body)?;
    anyhow::ensure!(answer["exit_code"] == 0, "{base} {sandbox}: {answer}");
    Ok(answer)
}

/// One `/execute` of `true` to sandbox-0 at `base`, in µs.
async fn execute_true(http: &reqwest::Client, base: &str) -> anyhow::Result<f64> {
    let started = Instant::now();
    execute(http, base, &name(0), "true").await?;
    Ok(crate::harness::micros(started.elapsed()))
}

/// nginx as agent-sandbox's router: the pod by `X-Sandbox-ID`, HTTP/1.1 to it over kept-alive
/// connections (as the Go router's transport keeps them), `Authorization` removed, upgrades
/// passed with no timeout. The tests' configuration, with an upstream per pod for keepalive.
struct Router {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

fn nginx() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| path.exists())
}

impl Router {
    /// Err: why there is no router (nginx missing and not installable).
    fn start() -> Result<Self, String> {
        crate::packages::ensure(&["nginx-light"], || nginx().is_some())?;
        let nginx = nginx().ok_or("nginx is not installed")?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let addr = crate::envd::free_addr().map_err(|e| e.to_string())?;
        let root = dir.path().display();
        let routes: String = (0..SANDBOXES)
            .map(|index| format!("    {0} {0};\n", name(index)))
            .collect();
        let upstreams: String = (0..SANDBOXES)
            .map(|index| {
                format!(
                    "  upstream {} {{ server {}; keepalive 4; }}\n",
                    name(index),
                    address(index)
                )
            })
            .collect();
        let config = format!(
            "daemon off; master_process off; pid {root}/nginx.pid; error_log {root}/error.log;\n\
             events {{ worker_connections 1024; }}\n\
             http {{ access_log off; client_body_temp_path {root}/body; proxy_temp_path {root}/proxy;\n\
             fastcgi_temp_path {root}/fastcgi; uwsgi_temp_path {root}/uwsgi; scgi_temp_path {root}/scgi;\n\
             map $http_upgrade $connection_upgrade {{ default upgrade; '' ''; }}\n\
             map $http_x_sandbox_id $sandbox {{\n{routes}    default unrouted;\n  }}\n\
             {upstreams}  upstream unrouted {{ server 127.0.48.1:9; }}\n\
             server {{ listen {addr};\n\
               location / {{ proxy_pass http://$sandbox; proxy_http_version 1.1;\n\
                 proxy_set_header Authorization \"\";\n\
                 proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection $connection_upgrade;\n\
                 proxy_read_timeout 1d; proxy_send_timeout 1d; proxy_buffering off;\n\
                 proxy_request_buffering off; client_max_body_size 0; }} }} }}\n"
        );
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, config).map_err(|e| e.to_string())?;
        let child = Command::new(nginx)
            .args([
                "-p",
                &root.to_string(),
                "-e",
                &format!("{root}/error.log"),
                "-c",
            ])
            .arg(&path)
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start nginx: {e}"))?;
        let router = Self {
            child,
            url: format!("http://{addr}"),
            _dir: dir,
        };
        wait_listening(&addr)?;
        Ok(router)
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_listening(addr: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            return Err(format!("nothing listens on {addr} after 10 s"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// The stored reference runtime (agent-sandbox's examples/python-runtime-sandbox/main.py),
/// beside the repository as architecture.md's tools are.
const REFERENCE_APP: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/reference/agent-sandbox"
);
const REFERENCE_MODULE: &str = "python-runtime-main";

/// The reference runtime under uvicorn, one process as its image runs it.
struct Reference {
    child: Child,
    url: String,
    ready_ms: f64,
    _base: tempfile::TempDir,
}

impl Reference {
    /// Err: why it cannot run here (no stored copy, no python3 venv or pip, no PyPI).
    async fn start(http: &reqwest::Client) -> Result<Self, String> {
        let app = Path::new(REFERENCE_APP);
        if !app.join(format!("{REFERENCE_MODULE}.py")).exists() {
            return Err(format!("{} has no {REFERENCE_MODULE}.py", app.display()));
        }
        let python = reference_venv()?;
        let base = tempfile::tempdir().map_err(|e| e.to_string())?;
        let addr = crate::envd::free_addr().map_err(|e| e.to_string())?;
        let (host, port) = addr.rsplit_once(':').ok_or("no port")?;
        let started = Instant::now();
        let child = Command::new(python)
            .args(["-m", "uvicorn", "--app-dir"])
            .arg(app)
            .args(["--host", host, "--port", port, "--log-level", "warning"])
            .arg(format!("{REFERENCE_MODULE}:app"))
            .env("SANDBOX_BASE_DIR", base.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start uvicorn: {e}"))?;
        let mut reference = Self {
            child,
            url: format!("http://{addr}"),
            ready_ms: f64::NAN,
            _base: base,
        };
        // Its template's probes ask `/`: it has no /readyz.
        wait_ok(http, &format!("{}/", reference.url))
            .await
            .map_err(|e| e.to_string())?;
        reference.ready_ms = millis(started.elapsed());
        Ok(reference)
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The python of a venv under target/ holding [`REFERENCE_PACKAGES`], installed with pip
/// when they are not (a stamp file names the set installed).
fn reference_venv() -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fleet-reference-venv");
    let python = venv.join("bin/python");
    let stamp = venv.join("installed.txt");
    let wanted = REFERENCE_PACKAGES.join("\n");
    if std::fs::read_to_string(&stamp).is_ok_and(|installed| installed == wanted) {
        return Ok(python);
    }
    eprintln!(
        "bench: installing {} with pip",
        REFERENCE_PACKAGES.join(" ")
    );
    let run = |command: &mut Command, what: &str| {
        let output = command
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{what}: {e}"))?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        match output.status.success() {
            true => Ok(()),
            false => Err(format!(
                "{what} failed: {}",
                stderr.trim().lines().last().unwrap_or("")
            )),
        }
    };
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "python3 -m venv",
    )?;
    run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(REFERENCE_PACKAGES),
        "pip install",
    )?;
    std::fs::write(&stamp, wanted).map_err(|e| e.to_string())?;
    Ok(python)
}

/// Every figure of the family, side by side in one run: the reference runtime first, then the
/// fleet's start, its idle memory, the round trips (direct, routed and the reference's,
/// interleaved) and the fan-out through the router.
pub(crate) async fn measure(binary: &Path, size: &Size, r: &mut Results) -> anyhow::Result<()> {
    let http = reqwest::Client::builder().http1_only().build()?;
    eprintln!("bench: the reference runtime (FastAPI under uvicorn)");
    let reference = Reference::start(&http).await.map_err(|why| {
        eprintln!("bench: no reference runtime: {why}");
        for key in [
            "fleet_fastapi_ready_ms",
            "fleet_fastapi_rss_mib",
            "fleet_fastapi_rtt_us",
        ] {
            r.note(key, why.clone());
        }
    });
    if let Ok(reference) = &reference {
        r.put("fleet_fastapi_ready_ms", Some(reference.ready_ms));
    }
    eprintln!("bench: {SANDBOXES} daemons as a fleet's pods, started one after another");
    let fleet = Fleet::start(binary, &http).await?;
    let (p50, p99) = stats(&mut fleet.ready_ms.clone());
    r.put("fleet_ready_p50_ms", Some(p50));
    r.put("fleet_ready_p99_ms", Some(p99));
    tokio::time::sleep(SETTLE).await;
    idle_rss(&fleet, reference.as_ref().ok(), r);
    let router = Router::start().map_err(|why| {
        eprintln!("bench: no router: {why}");
        for key in ["fleet_routed_rtt_us", "fleet_fanout_wall_ms"] {
            r.note(key, why.clone());
        }
    });
    eprintln!("bench: /execute round trips, direct, routed and the reference's (interleaved)");
    let (routed, reference) = (router.as_ref().ok(), reference.as_ref().ok());
    round_trips(&http, routed, reference, size.fleet_round_trips, r).await?;
    if let Some(router) = routed {
        eprintln!("bench: fan-out of {SANDBOXES} /execute through the router");
        fan_out(&http, &router.url, size.fleet_fanout_rounds, r).await?;
    }
    Ok(())
}

/// Every pod's RSS after [`SETTLE`], and the reference's at the same moment.
fn idle_rss(fleet: &Fleet, reference: Option<&Reference>, r: &mut Results) {
    let rss: Vec<f64> = fleet
        .pods
        .iter()
        .map(|pod| pod.rss_kib() / 1024.0)
        .collect();
    let mean = rss.iter().sum::<f64>() / rss.len() as f64;
    r.put("fleet_idle_rss_mib", Some(mean));
    r.put("fleet_idle_rss_max_mib", rss.into_iter().reduce(f64::max));
    if let Some(reference) = reference {
        let kib = status_kib(reference.child.id(), "VmRSS:");
        r.put("fleet_fastapi_rss_mib", Some(kib / 1024.0));
        r.ratio(
            "fleet_fastapi_vs_ours_rss",
            "fleet_fastapi_rss_mib",
            "fleet_idle_rss_mib",
        );
    }
}

/// `/execute` of `true` to sandbox-0 directly, through the router and to the reference, each
/// on its own kept-alive connection, run by run in turn.
async fn round_trips(
    http: &reqwest::Client,
    router: Option<&Router>,
    reference: Option<&Reference>,
    runs: usize,
    r: &mut Results,
) -> anyhow::Result<()> {
    let direct = format!("http://{}", address(0));
    let mut cases = vec![("fleet_direct_rtt_us", direct.as_str())];
    if let Some(router) = router {
        cases.push(("fleet_routed_rtt_us", router.url.as_str()));
    }
    if let Some(reference) = reference {
        cases.push(("fleet_fastapi_rtt_us", reference.url.as_str()));
    }
    alternate(runs, &cases, |base| execute_true(http, base))
        .await?
        .record(r);
    r.ratio(
        "fleet_routed_vs_direct_rtt",
        "fleet_routed_rtt_us",
        "fleet_direct_rtt_us",
    );
    Ok(())
}

/// A first round on fresh connections, then `rounds` more: the median round's wall time and
/// the p99 of every request in them.
async fn fan_out(
    http: &reqwest::Client,
    router: &str,
    rounds: usize,
    r: &mut Results,
) -> anyhow::Result<()> {
    r.put(
        "fleet_fanout_first_ms",
        Some(fan_out_once(http, router).await?.0),
    );
    let (mut walls, mut each) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (wall, requests) = fan_out_once(http, router).await?;
        walls.push(wall);
        each.extend(requests);
    }
    r.put("fleet_fanout_wall_ms", Some(stats(&mut walls).0));
    r.put("fleet_fanout_p99_ms", Some(stats(&mut each).1));
    Ok(())
}

/// `cat id` in every sandbox at once; each must answer with its own name (the router reached
/// the pod the request named). The round's wall time and each request's, in ms.
async fn fan_out_once(http: &reqwest::Client, router: &str) -> anyhow::Result<(f64, Vec<f64>)> {
    let started = Instant::now();
    let requests = (0..SANDBOXES).map(|index| async move {
        let sent = Instant::now();
        let answer = execute(http, router, &name(index), "cat id").await?;
        anyhow::ensure!(answer["stdout"] == name(index), "{}: {answer}", name(index));
        Ok(millis(sent.elapsed()))
    });
    let each = futures::future::try_join_all(requests).await?;
    Ok((millis(started.elapsed()), each))
}

pub(crate) const ROWS: &[Row] = &[
    Row {
        what: "fleet of 50 (agent-sandbox's pods, `--state-dir none`): idle RSS per daemon, mean, MiB",
        ours: "fleet_idle_rss_mib",
        baselines: &[
            ("max of the 50", "fleet_idle_rss_max_mib"),
            ("the reference runtime (FastAPI, uvicorn)", "fleet_fastapi_rss_mib"),
            ("reference ÷ ours", "fleet_fastapi_vs_ours_rss"),
        ],
        target: "≤ 15 MiB each",
        met: |r| Some(r.get("fleet_idle_rss_max_mib")? <= 15.0),
    },
    Row {
        what: "fleet: start to ready (spawn to the first 200 of `GET /readyz`), 50 one after another, p50 ms",
        ours: "fleet_ready_p50_ms",
        baselines: &[
            ("p99", "fleet_ready_p99_ms"),
            ("the reference runtime, to its first 200 of `GET /`", "fleet_fastapi_ready_ms"),
        ],
        target: "",
        met: |_| None,
    },
    Row {
        what: "fleet: `/execute` of `true` through the router (nginx), one keep-alive connection, median µs",
        ours: "fleet_routed_rtt_us",
        baselines: &[
            ("direct", "fleet_direct_rtt_us"),
            ("routed ÷ direct", "fleet_routed_vs_direct_rtt"),
            ("the reference runtime, direct", "fleet_fastapi_rtt_us"),
        ],
        target: "≤ 1.25× direct (routed throughput ≥ 0.8×)",
        met: |r| Some(r.get("fleet_routed_vs_direct_rtt")? <= 1.25),
    },
    Row {
        what: "fleet: fan-out, 50 `/execute` (`cat id`) at once through one router, one per sandbox, wall ms (median round)",
        ours: "fleet_fanout_wall_ms",
        baselines: &[
            ("p99 of a request", "fleet_fanout_p99_ms"),
            ("first round, fresh connections", "fleet_fanout_first_ms"),
        ],
        target: "",
        met: |_| None,
    },
];
