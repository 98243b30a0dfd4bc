//! Fault isolation: requests that cannot finish (a FIFO with no writer, an HTTP server that never
//! answers) leave other sessions' round trips alone, and are let go with their connection.

use crate::common;

use common::*;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Stuck requests of each kind in flight at once: more than the runtime's workers, so a
/// request that blocked one would stall everything.
const STUCK: usize = 16;

/// Accepts and never answers; counts the connections its peers still hold open.
async fn silent_server() -> (String, Arc<AtomicUsize>) {
    use tokio::io::AsyncReadExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let open = Arc::new(AtomicUsize::new(0));
    let counter = open.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let open = counter.clone();
            open.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                while tcp.read(&mut [0; 4096]).await.is_ok_and(|read| read > 0) {}
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (url, open)
}

#[tokio::test]
async fn stuck_requests_stall_no_one_and_end_with_their_connection() {
    let daemon = Daemon::start();
    let dir = scratch_dir();
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let (url, open) = silent_server().await;
    let (stuck, _) = daemon.session().await;
    for id in 0..STUCK {
        stuck
            .send_text(
                json!({"id": format!("http{id}"), "method": "http/request", "params": {
                    "method": "GET", "url": url, "requestId": format!("r{id}")}})
                .to_string(),
            )
            .await;
    }
    // A FIFO with no writer is refused at once, never waited on.
    let fifos = (0..STUCK).map(|id| {
        stuck.raw_request(json!({"id": format!("fifo{id}"), "method": "fs/readFile",
            "params": {"path": file_uri(&fifo)}}))
    });
    for reply in futures::future::join_all(fifos).await {
        let message = reply["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("not a file"), "{reply}");
    }
    eventually("every stuck request to reach the server", || {
        open.load(Ordering::SeqCst) == STUCK
    })
    .await;
    // Another session's round trips go on.
    let (other, _) = daemon.session().await;
    for _ in 0..20 {
        let started = Instant::now();
        other.call("environment/info", json!({})).await;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
    // The stuck requests end with their connection: the daemon lets go of the server.
    stuck.close().await;
    eventually("the daemon to close its stuck HTTP connections", || {
        open.load(Ordering::SeqCst) == 0
    })
    .await;
}
