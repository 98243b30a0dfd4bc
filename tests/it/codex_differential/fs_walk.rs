//! Gap 6 of issue 29: `fs/walk` as upstream walks (`codex-rs/file-system/src/lib.rs`).

use super::{assert_same, mkfifo, Scenario};
use serde_json::{json, Value};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

fn options(depth: usize, follow: bool, prune: bool) -> Value {
    json!({"maxDepth": depth, "maxDirectories": 100, "maxEntries": 1000,
        "followDirectorySymlinks": follow, "pruneHiddenDirectories": prune})
}

fn walk(path: &str, options: Value) -> Value {
    json!({"path": format!("file://{{root}}{path}"), "options": options})
}

/// `source/{root.txt, nested/note.txt, nested/deeper/leaf}`, a hidden directory with a
/// visible alias, a link back to the root, a dangling link, a FIFO, and a name that is not
/// UTF-8.
fn tree(root: &Path) {
    let source = root.join("source");
    std::fs::create_dir_all(source.join("nested/deeper")).unwrap();
    std::fs::write(source.join("root.txt"), "r").unwrap();
    std::fs::write(source.join("nested/note.txt"), "n").unwrap();
    std::fs::write(source.join("nested/deeper/leaf"), "l").unwrap();
    std::fs::create_dir(source.join(".hidden")).unwrap();
    std::fs::write(source.join(".hidden/secret"), "s").unwrap();
    std::os::unix::fs::symlink(".hidden", source.join("visible")).unwrap();
    std::os::unix::fs::symlink(&source, source.join("nested/root-link")).unwrap();
    std::os::unix::fs::symlink("missing", source.join("dangling")).unwrap();
    std::os::unix::fs::symlink("root.txt", source.join("file-link")).unwrap();
    let invalid = std::ffi::OsStr::from_bytes(b"invalid-\xff");
    std::fs::write(source.join(invalid), "x").unwrap();
    mkfifo(&source.join("fifo"));
}

/// Upstream: the `fs/walk` cases of `codex-rs/exec-server/tests/file_system_unix.rs` and
/// `tests/file_system/shared.rs`: depth counted from 0, a missing root as a -32004 error,
/// aliases listed but entered once, a pruned hidden directory claiming no identity, and a
/// non-UTF-8 name reported as an error for its lossy path.
#[tokio::test]
async fn file_system_walk_matches_upstream_traversal() {
    let scenario = Scenario::initialized()
        .request(1, "fs/walk", walk("/source", options(0, false, false)))
        .request(2, "fs/walk", walk("/source", options(4, false, false)))
        .request(3, "fs/walk", walk("/source", options(4, true, false)))
        .request(4, "fs/walk", walk("/source", options(4, true, true)))
        .request(5, "fs/walk", walk("/missing", options(1, false, false)))
        .request(
            6,
            "fs/walk",
            walk("/source/root.txt", options(1, false, false)),
        )
        .request(
            7,
            "fs/walk",
            walk("/source/visible", options(1, false, false)),
        )
        .request(
            8,
            "fs/walk",
            walk(
                "/missing",
                json!({"maxDepth": 1, "maxDirectories": 0,
            "maxEntries": 1, "followDirectorySymlinks": false}),
            ),
        )
        .request(
            9,
            "fs/walk",
            walk(
                "/source",
                json!({"maxDepth": 4, "maxDirectories": 2,
            "maxEntries": 5, "followDirectorySymlinks": true}),
            ),
        );
    let replies = assert_same(&scenario, tree).await;
    assert_eq!(replies[4]["error"]["code"], -32004, "{}", replies[4]);
}
