//! Sandboxed `fs/*` calls over the WebSocket: each runs in the daemon's `__fs-op` helper under
//! the request's intent, so the kernel decides. Every escape is really attempted and the disk is
//! checked afterwards.

mod common;
mod sandbox_support;

use common::*;
use sandbox_support::*;
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::time::Instant;

/// Read the platform files, write the workspace: reads outside the workspace are denied too.
fn read_restricted(ws: &Path) -> Value {
    restricted(
        ws,
        vec![
            entry(special("minimal"), "read"),
            entry(special("project_roots"), "write"),
        ],
        "restricted",
    )
}

async fn call(client: &Client, method: &str, mut params: Value, sandbox: &Value) -> Value {
    params["sandbox"] = sandbox.clone();
    match client.request(method, params.clone()).await {
        Ok(result) => result,
        Err(error) => panic!("{method} {params} failed: {error}"),
    }
}

async fn fail(client: &Client, method: &str, mut params: Value, sandbox: &Value) -> Value {
    params["sandbox"] = sandbox.clone();
    match client.request(method, params.clone()).await {
        Ok(result) => panic!("{method} {params} unexpectedly succeeded: {result}"),
        Err(error) => error,
    }
}

/// A failure the sandbox caused, with the operation's own error text.
fn assert_denied(error: &Value, message: &str) {
    assert_eq!(error["data"]["sandboxDenied"], true, "{error}");
    assert_eq!(error["message"], message, "{error}");
    let code = error["code"].as_i64().unwrap();
    assert!([-32600, -32603].contains(&code), "{error}");
}

const EACCES: &str = "Permission denied (os error 13)";
const EROFS: &str = "Read-only file system (os error 30)";

#[tokio::test]
async fn reads_follow_the_profile_and_results_match_the_direct_path() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::write(d.ws("a.txt"), "inside").unwrap();
    std::fs::create_dir(d.ws("real")).unwrap();
    std::fs::write(d.ws("real/f"), "x").unwrap();
    std::os::unix::fs::symlink(d.ws("real"), d.ws("alias")).unwrap();
    let sandbox = read_restricted(&d.ws);

    let started = Instant::now();
    let read = call(
        &client,
        "fs/readFile",
        json!({"path": uri(&d.ws("a.txt"))}),
        &sandbox,
    )
    .await;
    let elapsed = started.elapsed();
    assert_eq!(unb64(&read["dataBase64"]), b"inside");
    eprintln!("one sandboxed fs/readFile: {elapsed:?}");

    let error = fail(
        &client,
        "fs/readFile",
        json!({"path": uri(&d.out("f"))}),
        &sandbox,
    )
    .await;
    assert_denied(&error, EACCES);
    assert_eq!(error["code"], -32600);
    assert_eq!(error["data"]["path"], uri(&d.out("f")));
    let error = fail(
        &client,
        "fs/readDirectory",
        json!({"path": uri(&d.outside)}),
        &sandbox,
    )
    .await;
    assert_denied(&error, EACCES);
    // Not the sandbox's doing: a missing file inside the root.
    let error = fail(
        &client,
        "fs/readFile",
        json!({"path": uri(&d.ws("missing"))}),
        &sandbox,
    )
    .await;
    assert_eq!(error["code"], -32004, "{error}");
    assert!(error["data"].get("sandboxDenied").is_none(), "{error}");

    // Same results as the direct path, and no placeholder of a protected name in listings.
    for (method, params) in [
        ("fs/getMetadata", json!({"path": uri(&d.ws("a.txt"))})),
        ("fs/canonicalize", json!({"path": uri(&d.ws("alias"))})),
        ("fs/readDirectory", json!({"path": uri(&d.ws)})),
        (
            "fs/walk",
            json!({"path": uri(&d.ws), "options": {"maxDepth": 4, "maxDirectories": 10,
                "maxEntries": 100, "followDirectorySymlinks": false}}),
        ),
    ] {
        let direct = client.call(method, params.clone()).await;
        let confined = call(&client, method, params, &sandbox).await;
        assert_eq!(confined, direct, "{method}");
    }
    let canonical = client
        .call("fs/canonicalize", json!({"path": uri(&d.ws("alias"))}))
        .await;
    assert_eq!(canonical["path"], uri(&d.ws("real")));
    assert_eq!(d.ws_names(), ["a.txt", "alias", "real"]);
}
