//! Upstream's sandboxed file-system cases (`codex-rs/exec-server/tests/file_system_unix.rs`,
//! `file_system/shared.rs`, `file_stream.rs`): `allowed/` is what the sandbox grants,
//! `outside/` holds a secret, and `allowed/link` points out. Every escape is refused by both
//! daemons, and the outside files are read back afterwards to show nothing changed.

use super::fs_sandboxed::restricted;
use super::{assert_same_but_errors, at, Scenario};
use crate::common::codex_peer::CodexPeer;
use crate::common::{Client, Daemon};
use serde_json::{json, Value};
use std::path::Path;

/// `params` with the sandbox granting `entries`.
fn inside(mut params: Value, entries: &[(&str, &str)]) -> Value {
    params["sandbox"] = restricted(entries);
    params
}

fn escape_fixture(root: &Path) {
    std::fs::create_dir_all(root.join("allowed/readable")).unwrap();
    std::fs::create_dir_all(root.join("allowed/writable")).unwrap();
    std::fs::create_dir(root.join("outside")).unwrap();
    std::fs::write(root.join("outside/secret.txt"), "outside").unwrap();
    std::fs::write(root.join("allowed/note.txt"), "sandboxed hello").unwrap();
    std::fs::write(root.join("allowed/source.txt"), "hello").unwrap();
    std::os::unix::fs::symlink(root.join("outside"), root.join("allowed/link")).unwrap();
    let secret = root.join("outside/secret.txt");
    std::os::unix::fs::symlink(&secret, root.join("allowed/file-link")).unwrap();
    std::fs::hard_link(&secret, root.join("allowed/hard-link.txt")).unwrap();
}

/// Upstream: `file_system_sandboxed_read_rejects_symlink_escape`,
/// `_sandboxed_write_rejects_symlink_escape`, `_create_directory_rejects_symlink_escape`,
/// `_read_directory_rejects_symlink_escape`, `_copy_rejects_symlink_escape_destination`,
/// `_copy_rejects_symlink_escape_source`, `_remove_rejects_symlink_escape` and
/// `_sandboxed_write_rejects_unwritable_path`: each is refused and nothing outside changes.
/// The errors differ on purpose (docs/protocol.md): ours are Landlock's EACCES/EROFS, upstream's
/// bwrap view answers ENOENT; upstream's tests accept each.
#[tokio::test]
async fn sandboxed_operations_reject_symlink_escapes() {
    let (read, write) = ([("allowed", "read")], [("allowed", "write")]);
    let escape = at("allowed/link/secret.txt");
    let copy = |source: &str, destination: &str| {
        let (source, destination) = (at(source), at(destination));
        json!({"sourcePath": source, "destinationPath": destination, "recursive": false})
    };
    let escapes = [
        ("fs/readFile", json!({"path": escape}), &read),
        (
            "fs/writeFile",
            json!({"path": at("allowed/link/blocked.txt"), "dataBase64": "bm9wZQ=="}),
            &write,
        ),
        (
            "fs/createDirectory",
            json!({"path": at("allowed/link/created"), "recursive": false}),
            &write,
        ),
        (
            "fs/readDirectory",
            json!({"path": at("allowed/link")}),
            &read,
        ),
        (
            "fs/copy",
            copy("allowed/source.txt", "allowed/link/copied.txt"),
            &write,
        ),
        (
            "fs/copy",
            copy("allowed/link/secret.txt", "allowed/copied.txt"),
            &write,
        ),
        (
            "fs/remove",
            json!({"path": escape, "recursive": false, "force": false}),
            &write,
        ),
        (
            "fs/writeFile",
            json!({"path": at("allowed/blocked.txt"), "dataBase64": "bm9wZQ=="}),
            &read,
        ),
    ];
    let mut scenario = Scenario::initialized();
    for (id, (method, params, grant)) in (1..).zip(escapes) {
        scenario = scenario.request(id, method, inside(params, grant));
    }
    let scenario = scenario
        .then()
        .request(9, "fs/readDirectory", json!({"path": at("outside")}))
        .request(10, "fs/readFile", json!({"path": at("outside/secret.txt")}))
        .request(
            11,
            "fs/getMetadata",
            json!({"path": at("allowed/copied.txt")}),
        )
        .request(
            12,
            "fs/getMetadata",
            json!({"path": at("allowed/blocked.txt")}),
        );
    let refused: Vec<i64> = (1..=8).collect();
    let replies = assert_same_but_errors(&scenario, escape_fixture, &refused).await;
    let failed = replies[..8]
        .iter()
        .all(|reply| reply.get("error").is_some());
    assert!(failed, "{replies:?}");
}

/// Upstream: `file_system_sandboxed_metadata_and_read_allow_readable_root`,
/// `file_system_walk_honors_read_sandbox`,
/// `file_system_sandboxed_write_preserves_existing_hard_link`,
/// `file_system_remove_removes_symlink_not_target`, `file_system_copy_preserves_symlink_source`
/// and `file_system_sandboxed_write_allows_additional_write_root`: what a sandbox grants works,
/// links and hard links inside it are handled as themselves.
#[tokio::test]
async fn sandboxed_operations_inside_the_grant_match_upstream() {
    let (read, write) = ([("allowed", "read")], [("allowed", "write")]);
    let split = [("allowed/readable", "read"), ("allowed/writable", "write")];
    let walk_options = json!({"maxDepth": 1, "maxDirectories": 2, "maxEntries": 20,
        "followDirectorySymlinks": false});
    let note = json!({"path": at("allowed/note.txt")});
    let copy_link = json!({"sourcePath": at("allowed/file-link"),
        "destinationPath": at("allowed/copied-link"), "recursive": false});
    let granted = [
        ("fs/getMetadata", note.clone(), &read[..]),
        ("fs/readFile", note, &read),
        (
            "fs/walk",
            json!({"path": at("allowed"), "options": walk_options}),
            &read,
        ),
        (
            "fs/writeFile",
            json!({"path": at("allowed/hard-link.txt"), "dataBase64": "dXBkYXRlZA=="}),
            &write,
        ),
        ("fs/copy", copy_link, &write),
        (
            "fs/writeFile",
            json!({"path": at("allowed/writable/note.txt"), "dataBase64": "Y3JlYXRlZA=="}),
            &split,
        ),
    ];
    let mut scenario = Scenario::initialized();
    for (id, (method, params, grant)) in (1..).zip(granted) {
        scenario = scenario.request(id, method, inside(params, grant));
    }
    let remove_link = json!({"path": at("allowed/file-link"), "recursive": false, "force": false});
    let scenario = scenario
        .then()
        .request(7, "fs/remove", inside(remove_link, &write))
        .then()
        .request(8, "fs/readFile", json!({"path": at("outside/secret.txt")}))
        .request(
            9,
            "fs/getMetadata",
            json!({"path": at("allowed/file-link")}),
        )
        .request(
            10,
            "fs/readFile",
            json!({"path": at("allowed/copied-link")}),
        )
        .request(
            11,
            "fs/readFile",
            json!({"path": at("allowed/writable/note.txt")}),
        );
    let replies = assert_same_but_errors(&scenario, escape_fixture, &[]).await;
    let updated = &replies[7]["result"]["dataBase64"];
    assert_eq!(updated, "dXBkYXRlZA==", "{}", replies[7]);
}

/// Upstream: `file_stream.rs` `writable_open_obeys_sandbox_write_permissions`: a `replace` open
/// outside the writable root is refused, with or without full-disk read, and one inside
/// writes.
#[tokio::test]
async fn writable_open_obeys_sandbox_write_permissions() {
    let mut scenario = Scenario::initialized();
    let full_disk =
        json!({"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"});
    for (n, full_disk_read) in [false, true].into_iter().enumerate() {
        let mut sandbox = restricted(&[("allowed", "write")]);
        if full_disk_read {
            let entries = &mut sandbox["permissions"]["file_system"]["entries"];
            entries.as_array_mut().unwrap().push(full_disk.clone());
        }
        let open = |handle: &str, path: &str| {
            let path = at(path);
            json!({"handleId": handle, "path": path, "mode": "replace", "sandbox": sandbox})
        };
        let first = 10 * n as i64;
        scenario = scenario
            .request(first + 1, "fs/open", open("denied", "outside/secret.txt"))
            .request(first + 2, "fs/open", open("allowed", "allowed/allowed.bin"))
            .then()
            .request(
                first + 3,
                "fs/writeBlock",
                json!({"handleId": "allowed", "offset": 0, "chunk": "YWxsb3dlZA=="}),
            )
            .then()
            .request(first + 4, "fs/close", json!({"handleId": "allowed"}))
            .then();
    }
    scenario = scenario
        .request(
            21,
            "fs/readFile",
            json!({"path": at("allowed/allowed.bin")}),
        )
        .request(22, "fs/readFile", json!({"path": at("outside/secret.txt")}));
    let replies = assert_same_but_errors(&scenario, escape_fixture, &[1, 11]).await;
    assert!(replies[0].get("error").is_some(), "{}", replies[0]);
}

/// Upstream: `file_system_sandboxed_read_rejects_symlink_parent_dotdot_escape`: a `..` after
/// a link out of the grant is resolved in the URI, before any file is touched, so the read
/// names `allowed/secret.txt`, which does not exist; nothing outside is read.
#[tokio::test]
async fn sandboxed_read_rejects_symlink_parent_dotdot_escape() {
    let read = json!({"path": "file://{root}/allowed/link/../secret.txt"});
    let scenario =
        Scenario::initialized().request(1, "fs/readFile", inside(read, &[("allowed", "read")]));
    let fixture = |root: &Path| {
        escape_fixture(root);
        std::fs::write(root.join("secret.txt"), "nope").unwrap();
    };
    let replies = assert_same_but_errors(&scenario, fixture, &[1]).await;
    assert!(replies[0].get("error").is_some(), "{}", replies[0]);
}

/// Upstream: `file_stream.rs` `stream_keeps_reading_the_open_file_after_path_replacement`:
/// a handle opened under a read sandbox keeps reading the file it opened after the path is
/// replaced between two blocks.
#[tokio::test]
async fn stream_keeps_reading_the_open_file_after_path_replacement() {
    let block = 1024 * 1024;
    let ours = Daemon::start();
    let codex = CodexPeer::start(&[]);
    let mut outcomes = Vec::new();
    for url in [&ours.url, &codex.url] {
        let dir = crate::common::scratch_dir();
        let path = dir.path().join("replaceable.bin");
        std::fs::write(&path, vec![b'a'; block + 1]).unwrap();
        let client = Client::connect(url).await;
        client.initialize(None).await.unwrap();
        let root = dir.path().to_str().unwrap();
        let sandbox = serde_json::to_string(&restricted(&[("", "read")]))
            .unwrap()
            .replace("{root}", root);
        let open = json!({"handleId": "r", "path": format!("file://{}", path.display()),
            "sandbox": serde_json::from_str::<Value>(&sandbox).unwrap()});
        client.call("fs/open", open).await;
        let read = |offset: usize| json!({"handleId": "r", "offset": offset, "len": block});
        let first = client.call("fs/readBlock", read(0)).await;
        let replacement = dir.path().join("replacement.bin");
        std::fs::write(&replacement, vec![b'b'; block + 1]).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::rename(&replacement, &path).unwrap();
        let second = client.call("fs/readBlock", read(block)).await;
        let third = client.call("fs/readBlock", read(block + 1)).await;
        let summary = |reply: &Value| {
            let chunk = crate::common::unb64(&reply["chunk"]);
            let distinct: std::collections::BTreeSet<&u8> = chunk.iter().collect();
            json!({"len": chunk.len(), "distinct": distinct, "eof": reply["eof"]})
        };
        outcomes.push([summary(&first), summary(&second), summary(&third)]);
    }
    assert_eq!(outcomes[0], outcomes[1]);
    assert_eq!(
        outcomes[0][1],
        json!({"len": 1, "distinct": [b'a'], "eof": true})
    );
}
