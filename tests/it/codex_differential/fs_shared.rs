//! Upstream's `codex-rs/exec-server/tests/file_system/shared.rs` and the plain cases of
//! `file_system_unix.rs`, on the wire: each file operation against both daemons, with the
//! files it left behind read back through the wire, so what landed on disk is compared too.

use super::fs_sandboxed::restricted;
use super::{assert_same, at, mkfifo, Scenario};
use serde_json::{json, Value};
use std::path::Path;

fn path(path: &str) -> Value {
    json!({"path": at(path)})
}

fn copy(source: &str, destination: &str, recursive: bool) -> Value {
    json!({"sourcePath": at(source), "destinationPath": at(destination), "recursive": recursive})
}

fn write(root: &Path, relative: &str, contents: &str) {
    let file = root.join(relative);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, contents).unwrap();
}

/// Upstream: `file_system_get_metadata_reports_files_and_directories`,
/// `file_system_read_file_returns_bytes` (and `_read_file_text_returns_string`, the same call),
/// `file_system_read_directory_lists_entries`, `file_system_write_file_reports_missing_parent`
/// and `file_system_remove_removes_directory`.
#[tokio::test]
async fn file_system_basic_operations_match_upstream() {
    let mut missing_parent = path("missing/note.txt");
    missing_parent["dataBase64"] = json!("aGk=");
    let scenario = Scenario::initialized()
        .request(1, "fs/getMetadata", path("note.txt"))
        .request(2, "fs/getMetadata", path("notes"))
        .request(3, "fs/readFile", path("note.txt"))
        .request(4, "fs/readDirectory", path("source"))
        .request(5, "fs/writeFile", missing_parent)
        .then()
        .request(6, "fs/getMetadata", path("missing"))
        .request(7, "fs/remove", path("remove-me"))
        .then()
        .request(8, "fs/getMetadata", path("remove-me"));
    let replies = assert_same(&scenario, |root| {
        write(root, "note.txt", "hello");
        std::fs::create_dir(root.join("notes")).unwrap();
        write(root, "source/root.txt", "hello");
        std::fs::create_dir(root.join("source/nested")).unwrap();
        write(root, "remove-me/nested/f", "x");
    })
    .await;
    assert_eq!(replies[4]["error"]["code"], -32004, "{}", replies[4]);
}

/// Upstream: `file_system_copy_copies_file`, `_copies_directory_recursively`,
/// `_rejects_directory_without_recursive`, `_rejects_copying_directory_into_descendant`,
/// `_preserves_symlinks_in_recursive_copy`, `_ignores_unknown_special_files_in_recursive_copy`
/// and `_rejects_standalone_fifo_source`.
#[tokio::test]
async fn file_system_copy_matches_upstream() {
    let scenario = Scenario::initialized()
        .request(1, "fs/copy", copy("source.txt", "copy.txt", false))
        .request(2, "fs/copy", copy("source", "copied", true))
        .request(3, "fs/copy", copy("source", "dest", false))
        .request(4, "fs/copy", copy("source", "source/nested/copy", true))
        .request(5, "fs/copy", copy("fifo", "fifo-copy", false))
        .then()
        .request(6, "fs/readFile", path("copy.txt"))
        .request(7, "fs/readFile", path("copied/nested/note.txt"))
        .request(8, "fs/getMetadata", path("copied/named-pipe"))
        .request(
            9,
            "fs/getMetadata",
            json!({"path": at("copied/nested-link"), "followSymlinks": true}),
        )
        .request(10, "fs/getMetadata", path("dest"))
        .request(11, "fs/getMetadata", path("source/nested/copy"));
    let replies = assert_same(&scenario, |root| {
        write(root, "source.txt", "hello from trait");
        write(root, "source/nested/note.txt", "hello from trait");
        std::os::unix::fs::symlink("nested", root.join("source/nested-link")).unwrap();
        mkfifo(&root.join("source/named-pipe"));
        mkfifo(&root.join("fifo"));
    })
    .await;
    assert_eq!(
        replies[2]["error"]["message"],
        "fs/copy requires recursive: true when sourcePath is a directory"
    );
}

/// Upstream (`file_system_unix.rs`): `file_system_canonicalize_resolves_directory_symlink`,
/// `file_system_sandboxed_canonicalize_resolves_directory_symlink` and
/// `file_system_metadata_and_directory_listing_follow_symlinks`: a link is resolved by
/// canonicalize (inside a read sandbox too), described by its target in getMetadata (a
/// dangling one is -32004) and listed as its target's kind.
#[tokio::test]
async fn file_system_symlinks_resolve_as_upstream() {
    let mut sandboxed = path("source-alias/nested/note.txt");
    sandboxed["sandbox"] = restricted(&[("", "read")]);
    let scenario = Scenario::initialized()
        .request(1, "fs/canonicalize", path("source-alias/nested/note.txt"))
        .request(2, "fs/canonicalize", sandboxed)
        .request(3, "fs/getMetadata", path("note-link.txt"))
        .request(4, "fs/getMetadata", path("notes-link"))
        .request(5, "fs/getMetadata", path("dangling-link"))
        .request(6, "fs/readDirectory", path("links"));
    assert_same(&scenario, |root| {
        write(root, "source/nested/note.txt", "canonical hello");
        std::os::unix::fs::symlink(root.join("source"), root.join("source-alias")).unwrap();
        write(root, "note.txt", "hello");
        std::os::unix::fs::symlink(root.join("note.txt"), root.join("note-link.txt")).unwrap();
        std::fs::create_dir(root.join("notes")).unwrap();
        std::os::unix::fs::symlink(root.join("notes"), root.join("notes-link")).unwrap();
        std::os::unix::fs::symlink(root.join("missing"), root.join("dangling-link")).unwrap();
        std::fs::create_dir(root.join("links")).unwrap();
        std::os::unix::fs::symlink("../note.txt", root.join("links/note-link.txt")).unwrap();
        std::os::unix::fs::symlink("../notes", root.join("links/notes-link")).unwrap();
    })
    .await;
}

/// Upstream (`file_system_unix.rs`): `file_system_no_follow_write_rejects_fifo_without_blocking`
/// and `file_system_no_follow_recursive_mkdir_handles_concurrent_creators`: a no-follow write
/// to a FIFO fails at once and leaves it a FIFO; 16 concurrent recursive no-follow mkdirs of
/// one path all succeed.
#[tokio::test]
async fn file_system_no_follow_fifo_write_and_concurrent_mkdir_match_upstream() {
    let mut fifo_write = path("fifo");
    fifo_write["dataBase64"] = json!("bXVzdCBub3QgYmUgd3JpdHRlbg==");
    fifo_write["followSymlinks"] = json!(false);
    let mut scenario = Scenario::initialized().request(1, "fs/writeFile", fifo_write);
    for n in 0..16 {
        let mut mkdir = path("shared/nested");
        mkdir["followSymlinks"] = json!(false);
        scenario = scenario.request(10 + n, "fs/createDirectory", mkdir);
    }
    scenario = scenario
        .then()
        .request(30, "fs/getMetadata", path("shared/nested"))
        .request(31, "fs/readDirectory", json!({"path": "file://{root}"}));
    let replies = assert_same(&scenario, |root| mkfifo(&root.join("fifo"))).await;
    assert!(replies[0].get("error").is_some(), "{}", replies[0]);
}

/// Upstream (`file_system_unix.rs`): `remote_read_file_materializes_environment_workspace_roots`
/// and `remote_read_file_preserves_empty_workspace_roots`: a `project_roots` read entry grants
/// the sandbox's `workspaceRoots`, and none at all when that list is empty (not the cwd).
#[tokio::test]
async fn sandboxed_reads_materialize_workspace_roots_as_upstream() {
    let project_roots = |roots: Value| {
        json!({
            "permissions": {"type": "managed", "network": "restricted", "file_system": {
                "type": "restricted", "entries": [{"path": {"type": "special",
                    "value": {"kind": "project_roots"}}, "access": "read"}]}},
            "cwd": "file://{root}",
            "workspaceRoots": roots,
            "windowsSandboxLevel": "disabled",
        })
    };
    let read =
        |file: &str, roots: Value| json!({"path": at(file), "sandbox": project_roots(roots)});
    let workspace = json!([at("workspace")]);
    let scenario = Scenario::initialized()
        .request(
            1,
            "fs/readFile",
            read("workspace/included.txt", workspace.clone()),
        )
        .request(2, "fs/readFile", read("excluded.txt", workspace))
        .request(3, "fs/readFile", read("excluded.txt", json!([])));
    let fixture = |root: &Path| {
        write(root, "workspace/included.txt", "included");
        write(root, "excluded.txt", "excluded");
    };
    // The denials' codes differ on purpose (docs/protocol.md); both must be denials.
    let replies = super::assert_same_but_errors(&scenario, fixture, &[2, 3]).await;
    assert_eq!(replies[0]["result"]["dataBase64"], "aW5jbHVkZWQ=");
    assert!(replies[1..]
        .iter()
        .all(|reply| reply.get("error").is_some()));
}
