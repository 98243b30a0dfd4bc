//! Gap 5 of issue 29: no-follow reads and symlinks in any path component.

use super::fs_sandboxed::strict_workspace_write;
use super::{
    assert_same, assert_same_but_errors, at, handshaken, lines, mkfifo, run_both,
    run_both_unprivileged, Both, Scenario,
};
use serde_json::{json, Value};
use std::path::Path;

/// A FIFO nobody writes to.
fn fifo(root: &Path) {
    mkfifo(&root.join("fifo"));
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
    let ours = assert_same(&scenario, fifo).await;
    assert_eq!(ours[0]["error"]["message"], "path is not a regular file");
}

/// `real/{existing.txt, removable.txt}`, `directory-link -> real`, `file-link ->
/// real/existing.txt`: upstream's fixture for the any-component case.
fn component_links(root: &Path) {
    std::fs::create_dir(root.join("real")).unwrap();
    std::fs::write(root.join("real/existing.txt"), "unchanged").unwrap();
    std::fs::write(root.join("real/removable.txt"), "keep").unwrap();
    std::os::unix::fs::symlink("real", root.join("directory-link")).unwrap();
    std::os::unix::fs::symlink("real/existing.txt", root.join("file-link")).unwrap();
}

/// Upstream's operations on the links of [`component_links`], each with `followSymlinks:
/// false` under `sandbox` (null: none).
fn no_follow_operations(sandbox: &Value) -> Vec<(&'static str, Value)> {
    let no_follow = |path: &str| {
        let (path, sandbox) = (at(path), sandbox.clone());
        json!({"path": path, "followSymlinks": false, "sandbox": sandbox})
    };
    let write = |path: &str| {
        let mut params = no_follow(path);
        params["dataBase64"] = json!("Y2hhbmdlZA==");
        params
    };
    let mut mkdir = no_follow("directory-link/created");
    mkdir["recursive"] = json!(true);
    let remove = |path: &str| {
        let mut params = no_follow(path);
        params["recursive"] = json!(false);
        params["force"] = json!(false);
        params
    };
    vec![
        ("fs/readFile", no_follow("file-link")),
        ("fs/readFile", no_follow("directory-link/existing.txt")),
        ("fs/writeFile", write("file-link")),
        ("fs/writeFile", write("directory-link/existing.txt")),
        ("fs/getMetadata", no_follow("file-link")),
        ("fs/getMetadata", no_follow("real")),
        ("fs/createDirectory", mkdir),
        ("fs/remove", remove("directory-link/removable.txt")),
        ("fs/remove", remove("file-link")),
    ]
}

/// Upstream: `codex-rs/exec-server/tests/file_system_unix.rs`
/// `file_system_operations_can_reject_symlinks_in_any_path_component`, unsandboxed and inside
/// upstream's strict workspace-write sandbox: with `followSymlinks: false` every operation on
/// `file-link` or `directory-link/...` fails (`fs/getMetadata` and `fs/remove` of the link
/// itself too) and nothing is written, created or removed; a real directory still works.
/// Upstream asserts only that these fail: its messages are the kernel's (ENOTDIR, ELOOP) or
/// `path contains a symbolic link`, ours name the link (docs/protocol.md).
#[tokio::test]
async fn file_system_operations_can_reject_symlinks_in_any_path_component() {
    let mut scenario = Scenario::initialized();
    for (n, sandbox) in [Value::Null, strict_workspace_write()]
        .into_iter()
        .enumerate()
    {
        // One at a time, as upstream: a link removed early would change what the rest see.
        for (step, (method, params)) in no_follow_operations(&sandbox).into_iter().enumerate() {
            scenario = scenario
                .request(20 * n as i64 + step as i64 + 1, method, params)
                .then();
        }
    }
    scenario = scenario
        .request(91, "fs/readFile", json!({"path": at("real/existing.txt")}))
        .request(92, "fs/readFile", json!({"path": at("real/removable.txt")}))
        .request(93, "fs/getMetadata", json!({"path": at("real/created")}))
        .request(
            94,
            "fs/getMetadata",
            json!({"path": at("file-link"), "followSymlinks": false}),
        );
    let (ours, codex) = run_both(&scenario, component_links).await;
    let failed = |replies: &[Value]| -> Vec<bool> {
        replies.iter().map(|r| r.get("error").is_some()).collect()
    };
    let per_sandbox = [true, true, true, true, true, false, true, true, true];
    let expected: Vec<bool> = [
        &per_sandbox[..],
        &per_sandbox[..],
        &[false, false, true, true],
    ]
    .concat();
    assert_eq!(failed(&codex), expected, "codex:\n{}", lines(&codex));
    assert_eq!(failed(&ours), expected, "ours:\n{}", lines(&ours));
    // The real directory's metadata, the untouched files, nothing created.
    for at in [5, 14, 18, 19, 20] {
        assert_eq!(
            ours[at],
            codex[at],
            "ours:\n{}\ncodex:\n{}",
            lines(&ours),
            lines(&codex)
        );
    }
    assert!(
        ours[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("file-link` is a symbolic link"),
        "{}",
        ours[0]
    );
}

/// Upstream: `file_system_no_follow_non_recursive_root_creation_fails`, with the no-follow
/// metadata of `/` from `file_system_no_follow_operations_support_search_only_ancestors`: the
/// walk from `/` has no parent to open. Upstream says `directory already exists` for `/`
/// where ours passes on the kernel's `File exists`; both are -32603.
#[tokio::test]
async fn file_system_no_follow_non_recursive_root_creation_fails() {
    let root = json!({"path": "file:///", "recursive": false, "followSymlinks": false});
    let scenario = Scenario::initialized()
        .request(1, "fs/createDirectory", root)
        .request(
            2,
            "fs/getMetadata",
            json!({"path": "file:///", "followSymlinks": false}),
        );
    let replies = assert_same_but_errors(&scenario, fifo, &[1]).await;
    assert_eq!(replies[0]["error"]["code"], -32603, "{}", replies[0]);
}

/// A deliberate difference (docs/protocol.md): upstream refuses every recursive no-follow
/// removal (`recursive: true` is the default); ours removes the tree, which never follows a
/// link inside it anyway. Outside a tree both agree.
#[tokio::test]
async fn recursive_no_follow_removal_is_a_documented_difference() {
    let remove = |path: &str, recursive: bool| {
        let path = at(path);
        json!({"path": path, "followSymlinks": false, "recursive": recursive})
    };
    let scenario = Scenario::initialized()
        .request(1, "fs/remove", remove("tree", true))
        .request(2, "fs/remove", remove("missing/x", false));
    let tree = |root: &Path| std::fs::create_dir_all(root.join("tree/nested")).unwrap();
    let (ours, codex) = run_both(&scenario, tree).await;
    assert_eq!(
        codex[0]["error"]["message"],
        "recursive no-follow removal is unsupported"
    );
    assert_eq!(ours[0]["result"], json!({}), "{}", ours[0]);
    assert_eq!(ours[1], codex[1]);
}

/// Upstream: `file_system_no_follow_operations_support_search_only_ancestors`: under a
/// directory its user may search and write but not read (0300), every no-follow operation
/// works, since the walk opens each component for search only. Both daemons run as `nobody`
/// (as root the mode would not bite).
#[tokio::test]
async fn file_system_no_follow_operations_support_search_only_ancestors() {
    use std::os::unix::fs::PermissionsExt as _;
    let nobody = |path: &Path| std::os::unix::fs::chown(path, Some(65534), Some(65534)).unwrap();
    let fixture = |root: &Path| {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let search_only = root.join("search-only");
        std::fs::create_dir(&search_only).unwrap();
        for (name, contents) in [("existing.txt", "before"), ("removable.txt", "remove")] {
            std::fs::write(search_only.join(name), contents).unwrap();
            nobody(&search_only.join(name));
        }
        let unreadable = search_only.join("unreadable.txt");
        std::fs::write(&unreadable, "metadata only").unwrap();
        nobody(&unreadable);
        std::fs::set_permissions(&unreadable, std::fs::Permissions::from_mode(0o000)).unwrap();
        // A socket file stays one once its listener is closed.
        drop(std::os::unix::net::UnixListener::bind(search_only.join("socket")).unwrap());
        nobody(&search_only);
        std::fs::set_permissions(&search_only, std::fs::Permissions::from_mode(0o300)).unwrap();
    };
    let no_follow = |path: &str| json!({"path": at(path), "followSymlinks": false});
    let mut write = no_follow("search-only/existing.txt");
    write["dataBase64"] = json!("YWZ0ZXI=");
    let mut mkdir = no_follow("search-only/created/nested");
    mkdir["recursive"] = json!(true);
    let mut remove = no_follow("search-only/removable.txt");
    remove["recursive"] = json!(false);
    remove["force"] = json!(false);
    let scenario = Scenario::initialized()
        .request(
            1,
            "fs/getMetadata",
            json!({"path": "file:///", "followSymlinks": false}),
        )
        .request(2, "fs/readFile", no_follow("search-only/existing.txt"))
        .then()
        .request(3, "fs/writeFile", write)
        .then()
        .request(4, "fs/readFile", no_follow("search-only/existing.txt"))
        .request(5, "fs/getMetadata", no_follow("search-only/unreadable.txt"))
        .request(6, "fs/getMetadata", no_follow("search-only/socket"))
        .request(7, "fs/createDirectory", mkdir)
        .then()
        .request(8, "fs/getMetadata", no_follow("search-only/created/nested"))
        .request(9, "fs/remove", remove)
        .then()
        .request(10, "fs/getMetadata", no_follow("search-only/removable.txt"));
    let (ours, codex) = run_both_unprivileged(&scenario, fixture).await;
    assert_eq!(
        ours,
        codex,
        "ours:\n{}\ncodex:\n{}",
        lines(&ours),
        lines(&codex)
    );
    let failed: Vec<bool> = ours.iter().map(|r| r.get("error").is_some()).collect();
    let mut expected = vec![false; 9];
    expected.push(true);
    assert_eq!(failed, expected, "{}", lines(&ours));
    assert_eq!(ours[3]["result"]["dataBase64"], "YWZ0ZXI=", "{}", ours[3]);
}

/// Upstream: `file_system_no_follow_metadata_preserves_linux_birthtime`: a no-follow
/// `fs/getMetadata` reports the file's birth time (statx) as `createdAtMs`. The two fixtures'
/// times differ, so each daemon is checked against its own file rather than against the other.
#[tokio::test]
async fn file_system_no_follow_metadata_preserves_linux_birthtime() {
    let both = Both::start();
    for url in both.urls() {
        let root = crate::common::scratch_dir();
        let file = root.path().join("born.txt");
        std::fs::write(&file, "x").unwrap();
        let expected = match std::fs::metadata(&file).unwrap().created() {
            Ok(created) => {
                let since = created.duration_since(std::time::UNIX_EPOCH).unwrap();
                i64::try_from(since.as_millis()).unwrap()
            }
            // No birth time on this file system: upstream expects 0 then.
            Err(_) => 0,
        };
        let client = handshaken(url).await;
        let path = format!("file://{}", file.display());
        let metadata = client
            .call(
                "fs/getMetadata",
                json!({"path": path, "followSymlinks": false}),
            )
            .await;
        assert_eq!(
            metadata["createdAtMs"],
            json!(expected),
            "{url}: {metadata}"
        );
    }
}
