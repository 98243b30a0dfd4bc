//! Upstream's `codex-rs/exec-server/tests/file_system/shared.rs` cases that run with and without
//! `followSymlinks` and inside upstream's strict workspace-write sandbox (one writable root, and
//! nothing else readable, not even `/`): what an agent's file edits do in codex's everyday mode.

use super::{assert_same, at, nothing, Scenario};
use serde_json::{json, Value};

/// A restricted profile as upstream's tests build them (`tests/file_system/support.rs`):
/// exactly these `(path under the fixture, access)` entries, nothing else readable.
pub fn restricted(entries: &[(&str, &str)]) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .map(|(path, access)| {
            let uri = format!(
                "file://{{root}}{}{path}",
                if path.is_empty() { "" } else { "/" }
            );
            json!({"path": {"type": "path", "path": uri}, "access": access})
        })
        .collect();
    json!({
        "permissions": {"type": "managed", "network": "restricted",
            "file_system": {"type": "restricted", "entries": entries}},
        "cwd": "file://{root}",
        "windowsSandboxLevel": "disabled",
    })
}

/// Upstream's `workspace_write_sandbox(root)`: the fixture directory writable, no other entry.
pub fn strict_workspace_write() -> Value {
    restricted(&[("", "write")])
}

/// The variants every upstream case here runs: follow, no-follow, sandboxed no-follow; each
/// request's params with `followSymlinks` and the sandbox set accordingly.
fn variants(params: Value) -> [Value; 3] {
    [(true, false), (false, false), (false, true)].map(|(follow, sandboxed)| {
        let mut params = params.clone();
        params["followSymlinks"] = json!(follow);
        if sandboxed {
            params["sandbox"] = strict_workspace_write();
        }
        params
    })
}

/// Upstream: `file_system_create_directory_creates_nested_directories` (local/remote ×
/// follow/no_follow/sandboxed_no_follow): `source/nested` is created in each variant.
#[tokio::test]
async fn file_system_create_directory_creates_nested_directories() {
    let mut scenario = Scenario::initialized();
    for (n, params) in variants(json!({"recursive": true})).into_iter().enumerate() {
        let n = n as i64;
        let mut params = params;
        params["path"] = json!(at(&format!("source{n}/nested")));
        scenario = scenario
            .request(10 * n + 1, "fs/createDirectory", params)
            .then()
            .request(
                10 * n + 2,
                "fs/getMetadata",
                json!({"path": at(&format!("source{n}/nested"))}),
            );
    }
    let replies = assert_same(&scenario, nothing).await;
    assert!(
        replies.iter().all(|r| r.get("error").is_none()),
        "{replies:?}"
    );
}

/// Upstream: `file_system_write_file_writes_bytes` (the same variants): a new file is created
/// and an existing one replaced in each.
#[tokio::test]
async fn file_system_write_file_writes_bytes() {
    let mut scenario = Scenario::initialized();
    for (n, params) in variants(json!({})).into_iter().enumerate() {
        let n = n as i64;
        for (step, (name, data)) in [("note", "aGVsbG8="), ("existing", "YWZ0ZXI=")]
            .into_iter()
            .enumerate()
        {
            let path = at(&format!("{name}{n}.txt"));
            let mut params = params.clone();
            params["path"] = json!(path);
            params["dataBase64"] = json!(data);
            let id = 10 * n + 2 * step as i64;
            scenario = scenario
                .request(id + 1, "fs/writeFile", params)
                .then()
                .request(id + 2, "fs/readFile", json!({"path": path}));
        }
    }
    let replies = assert_same(&scenario, |root| {
        for n in 0..3 {
            std::fs::write(root.join(format!("existing{n}.txt")), "before").unwrap();
        }
    })
    .await;
    assert!(
        replies.iter().all(|r| r.get("error").is_none()),
        "{replies:?}"
    );
}

/// Upstream: `file_system_remove_no_follow_removes_file_and_empty_directory` (unsandboxed and
/// sandboxed): with `recursive: false, force: false, followSymlinks: false` a file and an
/// empty directory are removed.
#[tokio::test]
async fn file_system_remove_no_follow_removes_file_and_empty_directory() {
    let mut scenario = Scenario::initialized();
    let options = json!({"recursive": false, "force": false});
    for (n, params) in variants(options).into_iter().enumerate().skip(1) {
        let n = n as i64;
        for (step, name) in ["remove-me.txt", "remove-me"].into_iter().enumerate() {
            let path = at(&format!("{n}/{name}"));
            let mut params = params.clone();
            params["path"] = json!(path);
            let id = 10 * n + 2 * step as i64;
            scenario = scenario
                .request(id + 1, "fs/remove", params)
                .then()
                .request(id + 2, "fs/getMetadata", json!({"path": path}));
        }
    }
    let replies = assert_same(&scenario, |root| {
        for n in 1..3 {
            std::fs::create_dir_all(root.join(format!("{n}/remove-me"))).unwrap();
            std::fs::write(root.join(format!("{n}/remove-me.txt")), "remove").unwrap();
        }
    })
    .await;
    let codes: Vec<_> = replies.iter().map(|r| &r["error"]["code"]).collect();
    assert_eq!(
        codes.iter().filter(|c| **c == &json!(-32004)).count(),
        4,
        "{replies:?}"
    );
    assert!(
        codes.iter().filter(|c| c.is_null()).count() == 4,
        "{replies:?}"
    );
}
