//! Soak: many clients whose connections drop at random while their processes stream output
//! and take stdin. At the end every output byte arrived exactly once and in order, every stdin
//! write landed exactly once, no child or zombie is left, and the daemon's memory is back near
//! its baseline once the sessions expired.
//!
//! The CI size is 100 clients. `EXEC_SERVER_SOAK=long` runs 500 clients with longer streams;
//! `EXEC_SERVER_SOAK_SEED=N` replays one random schedule.
//!
//! The restart mode also kills the daemon (SIGKILL) at random moments and starts it again on
//! its port and state directory: the same guarantees hold across the restarts.

use crate::common;

use common::Daemon;
use exec_server_client::{Client, ClientOptions, Command, ProcessEvent};
use std::time::Duration;

struct Size {
    clients: usize,
    counter_lines: usize,
    stdin_lines: usize,
    max_drops: usize,
    time_limit: Duration,
    /// What every client's process leaves running when it exits (`sleep TAG`, found by it).
    detached_tag: &'static str,
}

const CI: Size = Size {
    clients: 100,
    counter_lines: 2_000,
    stdin_lines: 40,
    max_drops: 4,
    time_limit: Duration::from_secs(60),
    detached_tag: "4242999",
};

const LONG: Size = Size {
    clients: 500,
    counter_lines: 20_000,
    stdin_lines: 400,
    max_drops: 20,
    time_limit: Duration::from_secs(600),
    detached_tag: "4242999",
};

/// How far the daemon's RSS may stay above its baseline once everything expired (about 1.5 MiB
/// was measured: allocator fragmentation and tables that keep their grown capacity).
const RSS_TOLERANCE_KIB: u64 = 8 * 1024;

/// A small deterministic generator (xorshift64*), so a failing schedule can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Live `sleep TAG` processes.
fn detached_sleeps(tag: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|entry| {
            std::fs::read(entry.path().join("cmdline"))
                .is_ok_and(|cmdline| cmdline == format!("sleep\0{tag}\0").as_bytes())
        })
        .count()
}

/// A connected client: a restart may come before its first handshake is done, and it connects
/// again, as it would to a daemon that is starting (the client resumes by itself only once it
/// has a session).
async fn connect_through_restarts(url: &str, seed: u64) -> Client {
    let deadline = tokio::time::Instant::now() + common::TIMEOUT;
    loop {
        match Client::connect(ClientOptions::new(url.to_owned())).await {
            Ok(client) => return client,
            Err(err) if tokio::time::Instant::now() < deadline => {
                eprintln!("client {seed}: connecting again after {err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => panic!("client {seed}: {err}"),
        }
    }
}

/// One client's run; returns how many times its connection was dropped, and its session.
async fn soak_one(
    url: String,
    size: &'static Size,
    seed: u64,
    dir: std::path::PathBuf,
) -> (usize, String) {
    let mut rng = Rng(seed | 1);
    let client = connect_through_restarts(&url, seed).await;
    let tee_file = dir.join(format!("{seed}.out"));
    // Numbered stdin echoes and a counter, interleaved; tee records exactly what was written.
    // A detached sleep outlives the process, and must not outlive its session.
    let script = format!(
        "setsid sleep {tag} >/dev/null 2>&1 & \
         {{ i=0; while [ $i -lt {n} ]; do echo \"c $i\"; i=$((i+1)); done & \
         while IFS= read -r l; do echo \"e $l\"; done; wait; }} | tee {file}",
        n = size.counter_lines,
        tag = size.detached_tag,
        file = tee_file.display()
    );
    let mut process = client
        .start(
            Command::new(["sh", "-c", &script])
                .cwd("/tmp")
                .unwrap()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .stdin(),
        )
        .await
        .unwrap();
    let writer = process.handle();
    let write_pauses: Vec<u64> = (0..size.stdin_lines).map(|_| rng.below(6)).collect();
    let writes = tokio::spawn(async move {
        for (k, pause) in write_pauses.into_iter().enumerate() {
            writer.write(format!("w{k}\n").as_bytes()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
        writer.close_stdin().await.unwrap();
    });
    let drop_pauses: Vec<u64> = (0..size.max_drops).map(|_| 20 + rng.below(180)).collect();
    let dropper = {
        let client = client.clone();
        tokio::spawn(async move {
            let mut drops = 0;
            for pause in drop_pauses {
                tokio::time::sleep(Duration::from_millis(pause)).await;
                client.drop_connection();
                drops += 1;
            }
            drops
        })
    };
    let mut output = Vec::new();
    let mut exit_code = None;
    while let Some(event) = process.next_event().await {
        match event {
            ProcessEvent::Output { data, .. } => output.extend_from_slice(&data),
            ProcessEvent::Exited {
                exit_code: code, ..
            } => exit_code = Some(code),
            ProcessEvent::Closed { .. } => {}
            other => panic!("client {seed}: {other:?}"),
        }
    }
    writes.await.unwrap();
    dropper.abort();
    let drops = dropper.await.unwrap_or(size.max_drops);
    assert_eq!(exit_code, Some(0), "client {seed}");
    let written = std::fs::read(&tee_file).unwrap();
    assert!(
        output == written,
        "client {seed}: received {} bytes, the child wrote {}",
        output.len(),
        written.len()
    );
    let text = String::from_utf8(output).unwrap();
    let counter: Vec<&str> = text.lines().filter(|l| l.starts_with("c ")).collect();
    let expected: Vec<String> = (0..size.counter_lines).map(|i| format!("c {i}")).collect();
    assert!(
        counter == expected,
        "client {seed}: counter lines out of order or repeated"
    );
    let echoes: Vec<&str> = text.lines().filter(|l| l.starts_with("e ")).collect();
    let expected: Vec<String> = (0..size.stdin_lines).map(|k| format!("e w{k}")).collect();
    assert_eq!(
        echoes, expected,
        "client {seed}: each write exactly once, in order"
    );
    let session = client.session_id().to_owned();
    client.close().await;
    (drops, session)
}

/// Live processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|entry| {
            std::fs::read(entry.path().join("cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(needle))
        })
        .count()
}

/// Restarts at random: the daemon is killed (SIGKILL) and started again on its port and state
/// directory while the clients stream, write and drop their connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_and_a_daemon_restarting_at_random_lose_and_duplicate_nothing() {
    const RESTARTS: usize = 3;
    static SIZE: Size = Size {
        clients: 40,
        counter_lines: 2_000,
        stdin_lines: 40,
        max_drops: 2,
        time_limit: Duration::from_secs(90),
        detached_tag: "4242998",
    };
    let seed: u64 = std::env::var("EXEC_SERVER_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::process::id() as u64 * 7927);
    eprintln!("soak with restarts: {} clients, seed {seed}", SIZE.clients);
    let state = common::private_tempdir();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let state_path = state.path().to_owned();
    let start = move || {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_exec-server"));
        command
            .args(["--listen", &format!("ws://127.0.0.1:{port}")])
            .args(["--session-ttl", "5s", "--exited-retention", "1s"])
            .env(common::STATE_DIR_VAR, &state_path)
            .env("EXEC_SERVER_LOG", "warn")
            .stdout(std::process::Stdio::piped());
        Daemon::launch(command)
    };
    let daemon = std::sync::Arc::new(std::sync::Mutex::new(Some(start())));
    let url = format!("ws://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let restarter = {
        let daemon = daemon.clone();
        let start = start.clone();
        let mut rng = Rng(seed | 1);
        let pauses: Vec<u64> = (0..RESTARTS).map(|_| 200 + rng.below(800)).collect();
        tokio::task::spawn_blocking(move || {
            for pause in pauses {
                std::thread::sleep(Duration::from_millis(pause));
                let mut current = daemon.lock().unwrap();
                let mut old = current.take().unwrap();
                old.send_signal(libc::SIGKILL);
                old.wait_exit(common::TIMEOUT).expect("killed");
                // Its drop would signal a successor's pid only if reused; it is gone.
                *current = Some(start());
            }
        })
    };
    let run = async {
        let tasks: Vec<_> = (1..=SIZE.clients as u64)
            .map(|n| {
                tokio::spawn(soak_one(
                    url.clone(),
                    &SIZE,
                    seed.wrapping_add(n * 0x9e37_79b9),
                    dir.path().to_owned(),
                ))
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    };
    tokio::time::timeout(SIZE.time_limit, run)
        .await
        .expect("the soak finishes in its time limit");
    restarter.await.unwrap();
    // Every session expires (5 s), and with it what its processes left running.
    let needle = dir.path().to_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(6_500)).await;
    common::eventually("no process of the soak left", || {
        processes_mentioning(&needle) == 0 && detached_sleeps(SIZE.detached_tag) == 0
    })
    .await;
    let processes = state.path().join("processes");
    common::eventually("no process kept in the state directory", || {
        common::kept_processes(&processes) == 0
    })
    .await;
    drop(daemon.lock().unwrap().take());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_dropping_at_random_lose_and_duplicate_nothing() {
    let size: &'static Size = match std::env::var("EXEC_SERVER_SOAK").as_deref() {
        Ok("long") => &LONG,
        _ => &CI,
    };
    let seed: u64 = std::env::var("EXEC_SERVER_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::process::id() as u64 * 7919);
    eprintln!("soak: {} clients, seed {seed}", size.clients);
    let ttl = Duration::from_secs(5);
    let daemon = Daemon::start_with(&["--session-ttl", "5s", "--exited-retention", "1s"], &[]);
    let dir = tempfile::tempdir().unwrap();
    let pid = daemon.pid();
    let expired = |session: String| {
        let url = daemon.url.clone();
        async move {
            // The detached sleeps keep their trees (and supervisors) until the session expires.
            tokio::time::sleep(ttl + Duration::from_millis(1_500)).await;
            common::eventually("no child left", || {
                common::workload_children_of(pid).is_empty()
            })
            .await;
            let probe = common::Client::connect(&url).await;
            let error = probe.initialize(Some(&session)).await.unwrap_err();
            assert!(
                error["message"]
                    .as_str()
                    .unwrap()
                    .contains("unknown session"),
                "{error}"
            );
        }
    };

    // The baseline includes one finished session, so first-use allocations do not count.
    let (_, warm_session) = soak_one(daemon.url.clone(), size, seed, dir.path().to_owned()).await;
    expired(warm_session).await;
    let baseline = crate::common::rss_kib(pid);

    let run = async {
        let tasks: Vec<_> = (1..=size.clients as u64)
            .map(|n| {
                tokio::spawn(soak_one(
                    daemon.url.clone(),
                    size,
                    seed.wrapping_add(n * 0x9e37_79b9),
                    dir.path().to_owned(),
                ))
            })
            .collect();
        let mut drops = 0;
        let mut last_session = String::new();
        for task in tasks {
            let (dropped, session) = task.await.unwrap();
            drops += dropped;
            last_session = session;
        }
        (drops, last_session)
    };
    let (drops, last_session) = tokio::time::timeout(size.time_limit, run)
        .await
        .expect("the soak finishes in its time limit");
    let peak = crate::common::rss_kib(pid);
    eprintln!(
        "soak: {drops} connections dropped; daemon RSS {baseline} KiB idle, {peak} KiB at the end"
    );
    assert!(
        drops >= size.clients,
        "the schedule must actually drop connections"
    );

    expired(last_session).await;
    assert!(
        common::workload_children_of(pid).is_empty(),
        "no child or zombie is left"
    );
    assert_eq!(
        detached_sleeps(size.detached_tag),
        0,
        "nothing detached outlives its session"
    );
    common::eventually("the daemon's memory to return near its baseline", || {
        crate::common::rss_kib(pid) <= baseline + RSS_TOLERANCE_KIB
    })
    .await;
    eprintln!(
        "soak: daemon RSS {} KiB after the sessions expired",
        crate::common::rss_kib(pid)
    );
}
