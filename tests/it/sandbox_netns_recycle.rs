//! Restricted launches' network namespaces are recycled (`launcher::netns`): one a finished
//! launch left serves a later launch, and carries nothing of it; one whose launch still has a
//! process alive (a background job holding an abstract socket in it) is never handed to
//! another launch, which cannot reach that socket.

use crate::common;
use crate::sandbox_support;

use common::*;
use sandbox_support::*;

/// The namespace a sandboxed `sh` finds itself in, and the sockets it can see there.
const REPORT: &str = "readlink /proc/self/ns/net; tail -n +2 /proc/self/net/unix | wc -l";

#[tokio::test]
async fn a_finished_launch_namespace_serves_another_and_carries_nothing_of_it() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dirs = Dirs::new();
    let sandbox = workspace_write(&dirs.ws, "restricted");
    // Each launch binds an abstract socket in its namespace, for the next to find.
    let script = format!(
        "{REPORT}; {} -c 'import socket; s=socket.socket(socket.AF_UNIX); s.bind(\"\\0left-behind\")'",
        python()
    );
    let mut seen = Vec::new();
    for index in 0..12 {
        let outcome = sh(&client, &format!("r{index}"), &dirs.ws, &sandbox, &script).await;
        assert_ok(&outcome);
        let mut lines = outcome.output.lines();
        let namespace = lines.next().unwrap().to_owned();
        assert_eq!(
            lines.next(),
            Some("0"),
            "a socket is left in {namespace}: {outcome:?}"
        );
        seen.push(namespace);
        // Time for the helper to exit and its namespace to be kept.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Namespace inode numbers are reused by the kernel, so the daemon's count tells reuse.
    let addr = daemon.url.strip_prefix("ws://").unwrap();
    let (status, metrics) = crate::metrics::http_get(addr, "/metrics", None);
    assert_eq!(status, 200, "{metrics}");
    let recycled: f64 = metrics
        .lines()
        .find_map(|line| {
            line.strip_prefix("exec_server_sandbox_network_namespaces_recycled_total ")
        })
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(
        recycled >= 3.0,
        "{recycled} namespaces recycled over {seen:?}"
    );
}

#[tokio::test]
async fn a_live_launch_namespace_is_never_handed_on() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dirs = Dirs::new();
    let sandbox = workspace_write(&dirs.ws, "restricted");
    // The holder's background job keeps an abstract socket listening after the command exits.
    let holder = format!(
        "readlink /proc/self/ns/net; {} -c 'import socket,time; s=socket.socket(socket.AF_UNIX); \
         s.bind(\"\\0held\"); s.listen(); time.sleep(30)' >/dev/null 2>&1 &",
        python()
    );
    let held = sh(&client, "holder", &dirs.ws, &sandbox, &holder).await;
    let held_namespace = held.output.lines().next().unwrap().to_owned();
    let probe = format!(
        "readlink /proc/self/ns/net; {} -c 'import socket; s=socket.socket(socket.AF_UNIX)\n\
         try:\n s.connect(\"\\0held\"); print(\"reached\")\nexcept OSError as e: print(\"refused\")'",
        python()
    );
    for index in 0..10 {
        let outcome = sh(&client, &format!("p{index}"), &dirs.ws, &sandbox, &probe).await;
        assert_ok(&outcome);
        let mut lines = outcome.output.lines();
        assert_ne!(lines.next(), Some(held_namespace.as_str()), "{outcome:?}");
        assert_eq!(lines.next(), Some("refused"), "{outcome:?}");
    }
    client
        .call(
            "process/signal",
            serde_json::json!({"processId": "holder", "signal": "kill"}),
        )
        .await;
}
