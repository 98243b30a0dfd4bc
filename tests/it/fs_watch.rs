//! `fs/watch`, `fs/unwatch` and `fs/changed` end to end.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// Collects `fs/changed` changes of `watch` until `done` holds for what was seen.
async fn changes_until(
    client: &Client,
    watch: &str,
    mut done: impl FnMut(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    while !done(&seen) {
        let notification = client.next_notification().await;
        assert_eq!(notification["method"], "fs/changed", "{notification}");
        let params = &notification["params"];
        assert_eq!(params["watchId"], watch);
        assert_eq!(params["eventsDropped"], false);
        for change in params["changes"].as_array().unwrap() {
            seen.push((
                change["kind"].as_str().unwrap().to_owned(),
                change["path"].as_str().unwrap().to_owned(),
            ));
        }
    }
    seen
}

fn has(seen: &[(String, String)], kind: &str, path: &Path) -> bool {
    let uri = file_uri(path);
    seen.iter().any(|(k, p)| k == kind && *p == uri)
}

#[tokio::test]
async fn watch_reports_create_modify_remove_until_unwatched() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let root = dir.path().to_owned();
    let result = client
        .call(
            "fs/watch",
            json!({"watchId": "w", "path": file_uri(&root), "recursive": true}),
        )
        .await;
    assert_eq!(result, json!({"watchId": "w"}));

    let file = root.join("a.txt");
    std::fs::write(&file, b"one").unwrap();
    changes_until(&client, "w", |seen| has(seen, "create", &file)).await;
    std::fs::write(&file, b"two").unwrap();
    changes_until(&client, "w", |seen| has(seen, "modify", &file)).await;
    // Recursive: a new subdirectory is watched too.
    std::fs::create_dir(root.join("sub")).unwrap();
    changes_until(&client, "w", |seen| has(seen, "create", &root.join("sub"))).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let nested = root.join("sub/n.txt");
    std::fs::write(&nested, b"n").unwrap();
    changes_until(&client, "w", |seen| has(seen, "create", &nested)).await;
    std::fs::rename(&file, root.join("b.txt")).unwrap();
    changes_until(&client, "w", |seen| {
        has(seen, "rename", &file) && has(seen, "rename", &root.join("b.txt"))
    })
    .await;
    std::fs::remove_file(root.join("b.txt")).unwrap();
    changes_until(&client, "w", |seen| {
        has(seen, "remove", &root.join("b.txt"))
    })
    .await;

    assert_eq!(
        client.call("fs/unwatch", json!({"watchId": "w"})).await,
        json!({})
    );
    std::fs::write(root.join("after.txt"), b"x").unwrap();
    let late = client
        .try_next_notification(Duration::from_millis(400))
        .await;
    assert!(late.is_none(), "a change after unwatch: {late:?}");
    // Unwatching again is fine.
    client.call("fs/unwatch", json!({"watchId": "w"})).await;
}

#[tokio::test]
async fn a_non_recursive_watch_sees_only_direct_children() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let watch = client
        .call("fs/watch", json!({"path": file_uri(dir.path())}))
        .await;
    let id = watch["watchId"].as_str().unwrap().to_owned();
    std::fs::write(dir.path().join("sub/deep.txt"), b"x").unwrap();
    let top = dir.path().join("top.txt");
    std::fs::write(&top, b"x").unwrap();
    let seen = changes_until(&client, &id, |seen| has(seen, "create", &top)).await;
    assert!(
        !has(&seen, "create", &dir.path().join("sub/deep.txt")),
        "{seen:?}"
    );
}

#[tokio::test]
async fn watches_are_bounded_and_validated() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let uri = file_uri(dir.path());
    let error = client
        .request(
            "fs/watch",
            json!({"watchId": "w", "path": file_uri(&dir.path().join("missing"))}),
        )
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32004, "{error}");
    assert_eq!(error["message"], "No such file or directory (os error 2)");
    let error = client
        .request("fs/watch", json!({"watchId": "x".repeat(33), "path": uri}))
        .await
        .unwrap_err();
    assert_eq!(error["message"], "watch ID must not exceed 32 bytes");
    for index in 0..32 {
        client
            .call(
                "fs/watch",
                json!({"watchId": format!("w{index}"), "path": uri}),
            )
            .await;
    }
    let error = client
        .request("fs/watch", json!({"watchId": "w0", "path": uri}))
        .await
        .unwrap_err();
    assert_eq!(
        (&error["code"], &error["message"]),
        (&json!(-32600), &json!("watch `w0` already exists"))
    );
    let error: Value = client
        .request("fs/watch", json!({"watchId": "w32", "path": uri}))
        .await
        .unwrap_err();
    assert_eq!(
        error["message"],
        "at most 32 watches may be open per connection"
    );
    client.call("fs/unwatch", json!({"watchId": "w3"})).await;
    client
        .call("fs/watch", json!({"watchId": "w32", "path": uri}))
        .await;
}

#[tokio::test]
async fn watches_end_with_their_connection() {
    let daemon = Daemon::start();
    let dir = scratch_dir();
    let inotify_instances = || {
        std::fs::read_dir(format!("/proc/{}/fd", daemon.pid()))
            .unwrap()
            .filter(|fd| {
                std::fs::read_link(fd.as_ref().unwrap().path())
                    .map(|target| target.to_string_lossy().contains("inotify"))
                    .unwrap_or(false)
            })
            .count()
    };
    let (client, _) = daemon.session().await;
    for index in 0..4 {
        client
            .call(
                "fs/watch",
                json!({"watchId": format!("w{index}"), "path": file_uri(dir.path())}),
            )
            .await;
    }
    assert_eq!(inotify_instances(), 4);
    client.abort();
    eventually("the watches of a dropped connection to stop", || {
        inotify_instances() == 0
    })
    .await;
}

/// A tree of `subdirectories` directories under a fresh `root`.
fn tree(root: &Path, subdirectories: usize) {
    for index in 0..subdirectories {
        std::fs::create_dir_all(root.join(format!("d{}/e{index}", index % 2))).unwrap();
    }
}

#[tokio::test]
async fn watched_directories_are_budgeted_per_connection_and_daemon_wide() {
    let daemon = Daemon::start_with(
        &[
            "--max-watched-directories-per-connection",
            "8",
            "--max-watched-directories",
            "11",
        ],
        &[],
    );
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let big = dir.path().join("big");
    tree(&big, 20);
    // Five directories each: the root, d0, d1, d0/e0 and d1/e1.
    let small: Vec<_> = (0..3)
        .map(|i| dir.path().join(format!("small{i}")))
        .collect();
    for root in &small {
        tree(root, 2);
    }
    let watch = |id: &str, path: &Path, recursive: bool| json!({"watchId": id, "path": file_uri(path), "recursive": recursive});
    let refused = |error: Value, scope: &str| {
        assert_eq!(error["code"], -32602, "{error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(scope), "{message}");
        assert!(message.starts_with("fs/watch would exceed"), "{message}");
    };
    let error = client
        .request("fs/watch", watch("big", &big, true))
        .await
        .unwrap_err();
    refused(error, "the limit of 8 watched directories per connection");
    client.call("fs/watch", watch("a", &small[0], true)).await;
    let error = client
        .request("fs/watch", watch("b", &small[1], true))
        .await
        .unwrap_err();
    refused(error, "5 are in use");
    // A non-recursive watch is one directory.
    client
        .call("fs/watch", watch("one", &small[1], false))
        .await;
    // Unwatching returns the budget.
    client.call("fs/unwatch", json!({"watchId": "a"})).await;
    client.call("fs/watch", watch("b", &small[1], true)).await;

    // The daemon-wide budget counts every connection: 6 used there, 11 allowed.
    let (other, _) = daemon.session().await;
    other.call("fs/watch", watch("c", &small[2], true)).await;
    let error = other
        .request("fs/watch", watch("d", &small[0], false))
        .await
        .unwrap_err();
    refused(error, "the limit of 11 watched directories for the daemon");
    // A connection that leaves gives its budget back.
    client.close().await;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while other
        .request("fs/watch", watch("d", &small[0], false))
        .await
        .is_err()
    {
        assert!(tokio::time::Instant::now() < deadline, "budget returned");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
