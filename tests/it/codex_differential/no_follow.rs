//! Gap 5 of issue 29: no-follow reads and symlinks in any path component.

use super::{assert_same, lines, run_both, Scenario};
use serde_json::{json, Value};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// `real/file`, `dirlink -> real`, `filelink -> real/file`, and a FIFO nobody writes to.
fn links(root: &Path) {
    std::fs::create_dir(root.join("real")).unwrap();
    std::fs::write(root.join("real/file"), "hi").unwrap();
    std::os::unix::fs::symlink("real", root.join("dirlink")).unwrap();
    std::os::unix::fs::symlink("real/file", root.join("filelink")).unwrap();
    let fifo = std::ffi::CString::new(root.join("fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo touches nothing else.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
}

fn at(path: &str) -> String {
    format!("file://{{root}}/{path}")
}

/// Upstream: `codex-rs/exec-server/tests/file_stream.rs`
/// `file_reads_reject_fifo_without_waiting_for_a_writer` (follow and no-follow variants): the
/// reply comes at once, and each variant's message is upstream's.
#[tokio::test]
async fn file_reads_reject_fifo_without_waiting_for_a_writer() {
    let scenario = Scenario::initialized()
        .request(
            1,
            "fs/readFile",
            json!({"path": at("fifo"), "followSymlinks": false}),
        )
        .request(2, "fs/readFile", json!({"path": at("fifo")}))
        .request(3, "fs/open", json!({"handleId": "f", "path": at("fifo")}));
    let ours = assert_same(&scenario, links).await;
    assert_eq!(ours[0]["error"]["message"], "path is not a regular file");
}

/// Upstream: `codex-rs/exec-server/tests/file_system_unix.rs`
/// `file_system_operations_can_reject_symlinks_in_any_path_component`: with
/// `followSymlinks: false` every operation fails for `dirlink/...` as for `filelink`, and
/// nothing is written, created or removed; a real directory still works. Upstream asserts only
/// that these fail: its messages are the kernel's (ENOTDIR, ELOOP), ours name the link.
#[tokio::test]
async fn file_system_operations_can_reject_symlinks_in_any_path_component() {
    let no_follow = |path: &str| json!({"path": at(path), "followSymlinks": false});
    let mut write = no_follow("dirlink/new");
    write["dataBase64"] = json!("eA==");
    let mut mkdir = no_follow("dirlink/a/b");
    mkdir["recursive"] = json!(true);
    let scenario = Scenario::initialized()
        .request(1, "fs/readFile", no_follow("dirlink/file"))
        .request(2, "fs/readFile", no_follow("filelink"))
        .request(3, "fs/getMetadata", no_follow("dirlink/file"))
        .request(4, "fs/writeFile", write)
        .request(5, "fs/createDirectory", mkdir)
        .request(6, "fs/remove", no_follow("dirlink/file"))
        .request(7, "fs/getMetadata", no_follow("real"))
        .request(8, "fs/readFile", no_follow("real/file"));
    let (ours, codex) = run_both(&scenario, links).await;
    let failed = |replies: &[Value]| -> Vec<bool> {
        replies.iter().map(|r| r.get("error").is_some()).collect()
    };
    let expected = [true, true, true, true, true, true, false, false];
    assert_eq!(failed(&codex), expected, "codex:\n{}", lines(&codex));
    assert_eq!(failed(&ours), expected, "ours:\n{}", lines(&ours));
    assert_eq!(ours[6..], codex[6..]);
    assert!(
        ours[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("dirlink` is a symbolic link"),
        "{}",
        ours[0]
    );
}
