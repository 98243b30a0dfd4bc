//! Sandboxed `fs/*` calls over the WebSocket: each runs in a sandbox helper under the request's
//! intent, so the kernel decides. Every escape is really attempted and the disk is
//! checked afterwards.

use crate::common;
use crate::sandbox_support;

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

/// Writing outside every grant where the root is not readable: the read-only view refuses it
/// under Landlock; the mount view alone has nothing there, which the daemon reports as
/// Landlock's refusal (EACCES).
fn outside_write() -> &'static str {
    match landlock_fs() {
        true => EROFS,
        false => EACCES,
    }
}

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
    d.assert_ws_names_settle(&["a.txt", "alias", "real"]).await;
}

#[tokio::test]
async fn writes_inside_work_and_outside_or_into_protected_names_are_denied() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::create_dir(d.ws(".git")).unwrap();
    std::fs::write(d.ws(".git/config"), "[core]\n").unwrap();
    std::fs::write(d.ws("orig"), "old").unwrap();
    std::fs::hard_link(d.ws("orig"), d.ws("hard")).unwrap();
    let inode = std::fs::metadata(d.ws("orig")).unwrap().ino();
    let sandbox = workspace_write(&d.ws, "restricted");
    let write = |path: &Path, atomic: bool| json!({"path": uri(path), "dataBase64": b64(b"pwned"), "atomic": atomic});

    let ok = call(
        &client,
        "fs/writeFile",
        write(&d.ws("new"), false),
        &sandbox,
    )
    .await;
    assert_eq!(ok, json!({}));
    assert_eq!(std::fs::read(d.ws("new")).unwrap(), b"pwned");
    call(
        &client,
        "fs/writeFile",
        write(&d.ws("atomic"), true),
        &sandbox,
    )
    .await;
    assert_eq!(std::fs::read(d.ws("atomic")).unwrap(), b"pwned");
    // A hard link inside the root is written through: same inode, both names see it.
    call(
        &client,
        "fs/writeFile",
        write(&d.ws("hard"), false),
        &sandbox,
    )
    .await;
    assert_eq!(std::fs::metadata(d.ws("hard")).unwrap().ino(), inode);
    assert_eq!(std::fs::read(d.ws("orig")).unwrap(), b"pwned");
    call(
        &client,
        "fs/createDirectory",
        json!({"path": uri(&d.ws("sub/deeper"))}),
        &sandbox,
    )
    .await;
    assert!(d.ws("sub/deeper").is_dir());

    for atomic in [false, true] {
        let error = fail(
            &client,
            "fs/writeFile",
            write(&d.out("new"), atomic),
            &sandbox,
        )
        .await;
        assert_denied(&error, EROFS);
        let error = fail(
            &client,
            "fs/writeFile",
            write(&d.out("f"), atomic),
            &sandbox,
        )
        .await;
        assert_denied(&error, EROFS);
        let error = fail(
            &client,
            "fs/writeFile",
            write(&d.ws(".git/config"), atomic),
            &sandbox,
        )
        .await;
        assert_denied(&error, EROFS);
        // A missing protected name is held by a placeholder while the call runs.
        let error = fail(
            &client,
            "fs/writeFile",
            write(&d.ws(".codex/config.toml"), atomic),
            &sandbox,
        )
        .await;
        assert_denied(&error, EROFS);
    }
    for (method, params) in [
        ("fs/createDirectory", json!({"path": uri(&d.out("dir"))})),
        (
            "fs/createDirectory",
            json!({"path": uri(&d.ws(".git/hooks"))}),
        ),
        ("fs/remove", json!({"path": uri(&d.out("f"))})),
        ("fs/remove", json!({"path": uri(&d.ws(".git/config"))})),
        (
            "fs/copy",
            json!({"sourcePath": uri(&d.ws("new")), "destinationPath": uri(&d.out("copy")),
                "recursive": false}),
        ),
        (
            "fs/rename",
            json!({"sourcePath": uri(&d.ws("new")), "destinationPath": uri(&d.out("moved"))}),
        ),
        (
            "fs/rename",
            json!({"sourcePath": uri(&d.out("f")), "destinationPath": uri(&d.ws("stolen"))}),
        ),
    ] {
        let error = fail(&client, method, params.clone(), &sandbox).await;
        assert_eq!(
            error["data"]["sandboxDenied"], true,
            "{method} {params}: {error}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(d.ws(".git/config")).unwrap(),
        "[core]\n"
    );
    assert_eq!(std::fs::read_dir(d.ws(".git")).unwrap().count(), 1);
    d.assert_outside_untouched();
    // No staged file, no placeholder left behind.
    d.assert_ws_names_settle(&[".git", "atomic", "hard", "new", "orig", "sub"])
        .await;
}

#[tokio::test]
async fn symlink_escapes_are_stopped_by_the_kernel() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::write(d.ws("mine"), "mine").unwrap();
    std::os::unix::fs::symlink(d.out("f"), d.ws("link")).unwrap();
    std::os::unix::fs::symlink(&d.outside, d.ws("dirlink")).unwrap();
    let sandbox = read_restricted(&d.ws);
    let escapes = [
        ("fs/readFile", json!({"path": uri(&d.ws("link"))})),
        ("fs/readFile", json!({"path": uri(&d.ws("dirlink/f"))})),
        (
            "fs/writeFile",
            json!({"path": uri(&d.ws("link")), "dataBase64": b64(b"pwned")}),
        ),
        (
            "fs/writeFile",
            json!({"path": uri(&d.ws("link")), "dataBase64": b64(b"pwned"), "atomic": true}),
        ),
        (
            "fs/writeFile",
            json!({"path": uri(&d.ws("dirlink/new")), "dataBase64": b64(b"pwned")}),
        ),
        (
            "fs/createDirectory",
            json!({"path": uri(&d.ws("dirlink/newdir"))}),
        ),
        ("fs/readDirectory", json!({"path": uri(&d.ws("dirlink"))})),
        (
            "fs/copy",
            json!({"sourcePath": uri(&d.ws("dirlink/f")), "destinationPath": uri(&d.ws("stolen")),
                "recursive": false}),
        ),
        (
            "fs/copy",
            json!({"sourcePath": uri(&d.ws("mine")), "destinationPath": uri(&d.ws("dirlink/mine")),
                "recursive": false}),
        ),
        (
            "fs/rename",
            json!({"sourcePath": uri(&d.ws("mine")), "destinationPath": uri(&d.ws("dirlink/mine"))}),
        ),
        ("fs/remove", json!({"path": uri(&d.ws("dirlink/f"))})),
    ];
    for (method, params) in escapes {
        let error = fail(&client, method, params.clone(), &sandbox).await;
        assert_eq!(
            error["data"]["sandboxDenied"], true,
            "{method} {params}: {error}"
        );
    }
    // Listing through the link reports the refusal instead of the outside entries.
    let walked = call(
        &client,
        "fs/walk",
        json!({"path": uri(&d.ws), "options": {"maxDepth": 4, "maxDirectories": 10,
            "maxEntries": 100, "followDirectorySymlinks": true}}),
        &sandbox,
    )
    .await;
    assert!(
        !walked.to_string().contains("dirlink/f"),
        "outside names leaked: {walked}"
    );
    // A link is removed, not its target.
    call(
        &client,
        "fs/remove",
        json!({"path": uri(&d.ws("link"))}),
        &sandbox,
    )
    .await;
    assert!(std::fs::symlink_metadata(d.ws("link")).is_err());
    d.assert_outside_untouched();
    assert_eq!(std::fs::read_to_string(d.ws("mine")).unwrap(), "mine");
    d.assert_ws_names_settle(&["dirlink", "mine"]).await;
}

#[tokio::test]
async fn streams_use_the_file_the_sandbox_opened() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::write(d.ws("digits"), "0123456789").unwrap();
    std::fs::create_dir(d.ws(".git")).unwrap();
    std::fs::write(d.ws(".git/HEAD"), "ref").unwrap();
    std::os::unix::fs::symlink(d.out("f"), d.ws("link")).unwrap();
    let sandbox = read_restricted(&d.ws);
    let open = |handle: &str, path: &Path, mode: &str| json!({"handleId": handle, "path": uri(path), "mode": mode});
    let block = |handle: &str, chunk: &[u8]| json!({"handleId": handle, "chunk": b64(chunk)});

    call(
        &client,
        "fs/open",
        open("r", &d.ws("digits"), "read"),
        &sandbox,
    )
    .await;
    // The handle pins the file the sandbox opened, whatever happens to the path later.
    std::fs::remove_file(d.ws("digits")).unwrap();
    let read = client
        .call(
            "fs/readBlock",
            json!({"handleId": "r", "offset": 6, "len": 8}),
        )
        .await;
    assert_eq!(read, json!({"chunk": b64(b"6789"), "eof": true}));
    client.call("fs/close", json!({"handleId": "r"})).await;

    call(
        &client,
        "fs/open",
        open("w", &d.ws("up"), "write"),
        &sandbox,
    )
    .await;
    let next = client.call("fs/writeBlock", block("w", b"abc")).await;
    assert_eq!(next, json!({"nextOffset": 3}));
    client.call("fs/close", json!({"handleId": "w"})).await;
    assert_eq!(std::fs::read(d.ws("up")).unwrap(), b"abc");

    call(
        &client,
        "fs/open",
        open("a", &d.ws("up"), "append"),
        &sandbox,
    )
    .await;
    let next = client.call("fs/writeBlock", block("a", b"de")).await;
    assert_eq!(next, json!({"nextOffset": 5}));
    client.call("fs/close", json!({"handleId": "a"})).await;
    assert_eq!(std::fs::read(d.ws("up")).unwrap(), b"abcde");

    // replaceOnClose: staged beside the target, renamed into place by the sandbox on close.
    call(
        &client,
        "fs/open",
        open("s", &d.ws("up"), "replaceOnClose"),
        &sandbox,
    )
    .await;
    client.call("fs/writeBlock", block("s", b"new")).await;
    assert_eq!(std::fs::read(d.ws("up")).unwrap(), b"abcde");
    client.call("fs/close", json!({"handleId": "s"})).await;
    assert_eq!(std::fs::read(d.ws("up")).unwrap(), b"new");
    call(
        &client,
        "fs/open",
        open("x", &d.ws("up"), "replaceOnClose"),
        &sandbox,
    )
    .await;
    client.call("fs/writeBlock", block("x", b"dropped")).await;
    client
        .call("fs/close", json!({"handleId": "x", "discard": true}))
        .await;
    assert_eq!(std::fs::read(d.ws("up")).unwrap(), b"new");

    for (path, mode, message) in [
        (d.out("f"), "read", EACCES),
        (d.ws("link"), "read", EACCES),
        (d.ws("link"), "write", outside_write()),
        (d.ws("link"), "append", outside_write()),
        (d.ws("link"), "replace", outside_write()),
        (d.out("new"), "write", outside_write()),
        (d.ws(".git/HEAD"), "write", EROFS),
        (d.ws(".git/HEAD"), "replace", EROFS),
    ] {
        let error = fail(&client, "fs/open", open("no", &path, mode), &sandbox).await;
        assert_denied(&error, message);
    }
    // Denied opens left no handle behind.
    let error = client
        .request(
            "fs/readBlock",
            json!({"handleId": "no", "offset": 0, "len": 1}),
        )
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32004, "{error}");
    d.assert_outside_untouched();
    assert_eq!(std::fs::read(d.ws(".git/HEAD")).unwrap(), b"ref");
    d.assert_ws_names_settle(&[".git", "link", "up"]).await;
}

#[tokio::test]
async fn watches_and_unenforceable_intents_fail_cleanly() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = read_restricted(&d.ws);
    let error = fail(&client, "fs/watch", json!({"path": uri(&d.ws)}), &sandbox).await;
    assert_eq!(error["code"], -32602, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("fs/watch cannot be confined"),
        "{error}"
    );

    let write = json!({"path": uri(&d.ws("x")), "dataBase64": b64(b"x")});
    let mut no_cwd = read_restricted(&d.ws);
    no_cwd.as_object_mut().unwrap().remove("cwd");
    no_cwd.as_object_mut().unwrap().remove("workspaceRoots");
    let unknown = restricted(
        &d.ws,
        vec![
            entry(special("minimal"), "read"),
            entry(special("project_roots"), "write"),
            entry(special("some_future_kind"), "read"),
        ],
        "enabled",
    );
    let binary = Path::new(env!("CARGO_BIN_EXE_exec-server"));
    let exposes_daemon = restricted(
        &d.ws,
        vec![
            entry(special("minimal"), "read"),
            entry(path(binary.parent().unwrap()), "write"),
        ],
        "enabled",
    );
    for (sandbox, message) in [
        (
            no_cwd,
            "file system sandbox context with dynamic permissions requires cwd",
        ),
        (unknown, "special path kind"),
        (exposes_daemon, "exec-server binary"),
    ] {
        let error = fail(&client, "fs/writeFile", write.clone(), &sandbox).await;
        assert_eq!(error["code"], -32602, "{error}");
        assert!(
            error["message"].as_str().unwrap().contains(message),
            "{message}: {error}"
        );
    }
}

/// A profile that grants only `entries` (explicit paths and their access), with no `root` or
/// `minimal` read and no cwd or roots, as the codex client sends it: nothing of the platform or
/// of the daemon is readable unless listed.
fn explicit(entries: &[(&Path, &str)]) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .map(|(granted, access)| entry(path(granted), access))
        .collect();
    json!({"permissions": {"type": "managed", "network": "restricted",
        "file_system": {"type": "restricted", "entries": entries}}})
}

fn names(listing: &Value) -> Vec<String> {
    let mut names: Vec<String> = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["fileName"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn explicit_path_profiles_grant_what_they_list_and_stop_every_escape() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let (allowed, root) = (d.ws("allowed"), d.ws("root"));
    std::fs::create_dir(&allowed).unwrap();
    std::fs::create_dir_all(root.join("real")).unwrap();
    std::fs::write(allowed.join("data"), "data").unwrap();
    std::fs::write(d.ws("secret.txt"), "nope").unwrap();
    std::os::unix::fs::symlink(&d.outside, allowed.join("link")).unwrap();
    std::fs::write(root.join("real/f"), "real").unwrap();
    std::fs::write(root.join("mine"), "mine").unwrap();
    std::os::unix::fs::symlink(root.join("real"), root.join("alias")).unwrap();
    std::os::unix::fs::symlink(d.out("f"), root.join("link")).unwrap();
    std::os::unix::fs::symlink(&d.outside, root.join("dirlink")).unwrap();
    let sandbox = explicit(&[(&allowed, "read"), (&root, "write")]);

    // What is listed is granted.
    let read = call(
        &client,
        "fs/readFile",
        json!({"path": uri(&allowed.join("data"))}),
        &sandbox,
    )
    .await;
    assert_eq!(unb64(&read["dataBase64"]), b"data");
    let listing = call(
        &client,
        "fs/readDirectory",
        json!({"path": uri(&allowed)}),
        &sandbox,
    )
    .await;
    // Landlock lets a listing stat the link's target outside; the mount view alone has no
    // target there, and lists the link among the entries it could not inspect.
    match landlock_fs() {
        true => assert_eq!(names(&listing), ["data", "link"]),
        false => assert_eq!(names(&listing), ["data"], "{listing}"),
    }
    let write = |path: &Path, data: &[u8]| json!({"path": uri(path), "dataBase64": b64(data)});
    call(
        &client,
        "fs/writeFile",
        write(&root.join("new"), b"new"),
        &sandbox,
    )
    .await;
    assert_eq!(std::fs::read(root.join("new")).unwrap(), b"new");
    call(
        &client,
        "fs/createDirectory",
        json!({"path": uri(&root.join("sub/deeper"))}),
        &sandbox,
    )
    .await;
    assert!(root.join("sub/deeper").is_dir());
    call(
        &client,
        "fs/copy",
        json!({"sourcePath": uri(&allowed.join("data")), "destinationPath": uri(&root.join("copied")),
            "recursive": false}),
        &sandbox,
    )
    .await;
    assert_eq!(std::fs::read(root.join("copied")).unwrap(), b"data");
    // Canonicalize resolves a directory link inside the root.
    let canonical = call(
        &client,
        "fs/canonicalize",
        json!({"path": uri(&root.join("alias/f"))}),
        &sandbox,
    )
    .await;
    assert_eq!(canonical["path"], uri(&root.join("real/f")));

    // What is not listed is not: a sibling, a write to a read grant.
    let error = fail(
        &client,
        "fs/readFile",
        json!({"path": uri(&d.ws("secret.txt"))}),
        &sandbox,
    )
    .await;
    assert_denied(&error, EACCES);
    let error = fail(
        &client,
        "fs/writeFile",
        write(&allowed.join("data"), b"pwned"),
        &sandbox,
    )
    .await;
    assert_eq!(error["data"]["sandboxDenied"], true, "{error}");
    // `link/..` is resolved lexically, as the reference does: never the link's parent.
    let error = fail(
        &client,
        "fs/readFile",
        json!({"path": format!("{}/link/../secret.txt", uri(&allowed))}),
        &sandbox,
    )
    .await;
    assert_eq!(error["code"], -32004, "{error}");
    assert_eq!(error["data"]["path"], uri(&allowed.join("secret.txt")));

    let escapes = [
        ("fs/readFile", json!({"path": uri(&root.join("link"))})),
        ("fs/readFile", json!({"path": uri(&root.join("dirlink/f"))})),
        ("fs/writeFile", write(&root.join("link"), b"pwned")),
        (
            "fs/writeFile",
            json!({"path": uri(&root.join("link")), "dataBase64": b64(b"pwned"), "atomic": true}),
        ),
        ("fs/writeFile", write(&root.join("dirlink/new"), b"pwned")),
        (
            "fs/createDirectory",
            json!({"path": uri(&root.join("dirlink/newdir"))}),
        ),
        (
            "fs/readDirectory",
            json!({"path": uri(&root.join("dirlink"))}),
        ),
        (
            "fs/readDirectory",
            json!({"path": uri(&allowed.join("link"))}),
        ),
        (
            "fs/copy",
            json!({"sourcePath": uri(&root.join("dirlink/f")),
                "destinationPath": uri(&root.join("stolen")), "recursive": false}),
        ),
        (
            "fs/copy",
            json!({"sourcePath": uri(&root.join("mine")),
                "destinationPath": uri(&root.join("dirlink/mine")), "recursive": false}),
        ),
        ("fs/remove", json!({"path": uri(&root.join("dirlink/f"))})),
    ];
    for (method, params) in escapes {
        let error = fail(&client, method, params.clone(), &sandbox).await;
        assert_eq!(
            error["data"]["sandboxDenied"], true,
            "{method} {params}: {error}"
        );
    }
    // A link is removed, not its target.
    call(
        &client,
        "fs/remove",
        json!({"path": uri(&root.join("link"))}),
        &sandbox,
    )
    .await;
    assert!(std::fs::symlink_metadata(root.join("link")).is_err());
    d.assert_outside_untouched();
    assert_eq!(std::fs::read(allowed.join("data")).unwrap(), b"data");
    assert_names_settle(
        &root,
        &["alias", "copied", "dirlink", "mine", "new", "real", "sub"],
    )
    .await;
}

#[tokio::test]
async fn explicit_path_profiles_write_hard_links_in_place_and_streams_keep_their_file() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::write(d.out("shared"), "old").unwrap();
    std::fs::hard_link(d.out("shared"), d.ws("hard")).unwrap();
    let inode = std::fs::metadata(d.ws("hard")).unwrap().ino();
    std::fs::write(d.ws("digits"), "0123456789").unwrap();
    let sandbox = explicit(&[(&d.ws, "write")]);
    let write = |data: &[u8], atomic: bool| json!({"path": uri(&d.ws("hard")), "dataBase64": b64(data), "atomic": atomic});

    // A plain write updates the file in place: one inode, both names see the new bytes.
    call(&client, "fs/writeFile", write(b"new", false), &sandbox).await;
    assert_eq!(std::fs::metadata(d.ws("hard")).unwrap().ino(), inode);
    assert_eq!(std::fs::read(d.out("shared")).unwrap(), b"new");
    // Atomic replacement, when asked for, gives the name a file of its own.
    call(&client, "fs/writeFile", write(b"atomic", true), &sandbox).await;
    assert_ne!(std::fs::metadata(d.ws("hard")).unwrap().ino(), inode);
    assert_eq!(std::fs::read(d.ws("hard")).unwrap(), b"atomic");
    assert_eq!(std::fs::read(d.out("shared")).unwrap(), b"new");

    // A stream reads the file it opened, whatever replaces the path.
    call(
        &client,
        "fs/open",
        json!({"handleId": "r", "path": uri(&d.ws("digits")), "mode": "read"}),
        &sandbox,
    )
    .await;
    std::fs::write(d.ws("other"), "XXXX").unwrap();
    std::fs::rename(d.ws("other"), d.ws("digits")).unwrap();
    let read = client
        .call(
            "fs/readBlock",
            json!({"handleId": "r", "offset": 4, "len": 10}),
        )
        .await;
    assert_eq!(read, json!({"chunk": b64(b"456789"), "eof": true}));
    client.call("fs/close", json!({"handleId": "r"})).await;
    call(
        &client,
        "fs/open",
        json!({"handleId": "w", "path": uri(&d.ws("up")), "mode": "write"}),
        &sandbox,
    )
    .await;
    client
        .call(
            "fs/writeBlock",
            json!({"handleId": "w", "chunk": b64(b"abc")}),
        )
        .await;
    client.call("fs/close", json!({"handleId": "w"})).await;
    assert_eq!(std::fs::read(d.ws("up")).unwrap(), b"abc");
    let error = fail(
        &client,
        "fs/open",
        json!({"handleId": "no", "path": uri(&d.out("f")), "mode": "read"}),
        &sandbox,
    )
    .await;
    assert_denied(&error, EACCES);
}

/// The operation runs in a helper that holds nothing but its stdio and gets no environment:
/// the daemon's (hostile) PATH reaches neither it nor the launch of a sandboxed process, and
/// nothing is looked up on a PATH to run either.
#[tokio::test]
async fn a_hostile_path_changes_nothing_for_sandboxed_calls_and_launches() {
    use std::os::unix::fs::PermissionsExt as _;
    let hostile = tempfile::tempdir().unwrap();
    let marker = hostile.path().join("ran");
    for name in ["exec-server", "__fs-op", "__supervise", "sh", "echo", "env"] {
        let fake = hostile.path().join(name);
        let script = format!("#!/bin/sh\necho {name} >> {}\nexit 99\n", marker.display());
        std::fs::write(&fake, script).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!("{}:/usr/bin:/bin", hostile.path().display());
    let daemon = Daemon::start_with(&[], &[("PATH", &path)]);
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::write(d.ws("a"), "a").unwrap();
    let proc_fds = Path::new("/proc/self/fd");
    let sandbox = explicit(&[(&d.ws, "write"), (Path::new("/proc"), "read")]);

    let read = call(
        &client,
        "fs/readFile",
        json!({"path": uri(&d.ws("a"))}),
        &sandbox,
    )
    .await;
    assert_eq!(unb64(&read["dataBase64"]), b"a");
    let environ = call(
        &client,
        "fs/readFile",
        json!({"path": "file:///proc/self/environ"}),
        &sandbox,
    )
    .await;
    assert_eq!(unb64(&environ["dataBase64"]), b"", "{environ}");
    // Stdio and the listed directory itself: the control socket and nothing else is left.
    let fds = call(
        &client,
        "fs/readDirectory",
        json!({"path": uri(proc_fds)}),
        &sandbox,
    )
    .await;
    assert_eq!(names(&fds), ["0", "1", "2", "3"]);

    let launch = explicit(&[(&d.ws, "write"), (Path::new("/usr"), "read")]);
    for tty in [false, true] {
        let mut params = params(
            &format!("p{tty}"),
            &["/usr/bin/echo", "real"],
            &d.ws,
            launch.clone(),
        );
        params["env"]["PATH"] = json!(path);
        params["tty"] = json!(tty);
        let outcome = run(&client, params).await;
        assert_ok(&outcome);
        assert_eq!(outcome.output.trim(), "real", "{outcome:?}");
    }
    assert!(!marker.exists(), "a hostile program ran");
}

/// The daemon's own binary is not part of any sandbox: neither an fs call nor a process may
/// read or run it unless the profile grants it.
#[tokio::test]
async fn the_daemon_binary_is_granted_only_by_the_profile() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let binary = Path::new(env!("CARGO_BIN_EXE_exec-server"))
        .canonicalize()
        .unwrap();
    let sandbox = explicit(&[(&d.ws, "write"), (Path::new("/usr"), "read")]);

    let error = fail(
        &client,
        "fs/readFile",
        json!({"path": uri(&binary)}),
        &sandbox,
    )
    .await;
    assert_denied(&error, EACCES);
    let error = fail(
        &client,
        "fs/open",
        json!({"handleId": "bin", "path": uri(&binary), "mode": "read"}),
        &sandbox,
    )
    .await;
    assert_denied(&error, EACCES);
    let binary_arg = binary.to_str().unwrap();
    let read = run(
        &client,
        params("cat", &["/usr/bin/cat", binary_arg], &d.ws, sandbox.clone()),
    )
    .await;
    sandbox_support::assert_denied(&read, sandbox_support::unreadable());
    let exec = run(
        &client,
        params("exec", &[binary_arg, "--version"], &d.ws, sandbox),
    )
    .await;
    assert_eq!(exec.code, 126, "{exec:?}");
    assert!(exec.denied, "{exec:?}");

    // Granted, it is an ordinary program.
    let granted = explicit(&[
        (&d.ws, "write"),
        (Path::new("/usr"), "read"),
        (binary.parent().unwrap(), "read"),
    ]);
    let exec = run(
        &client,
        params("granted", &[binary_arg, "--version"], &d.ws, granted),
    )
    .await;
    assert_ok(&exec);
    assert!(exec.output.starts_with("exec-server "), "{exec:?}");
}

/// The processes whose working directory is `dir`.
fn processes_in(dir: &Path) -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir))
        .collect();
    pids.sort_unstable();
    pids
}

/// Setting a sandbox up costs far more than a small file operation: calls under one intent are
/// served by one confined helper (whose working directory is the intent's), which goes once
/// no call comes, with its placeholders.
#[tokio::test]
async fn calls_under_one_intent_reuse_one_confined_helper_until_it_is_idle() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::write(d.ws("a.txt"), "inside").unwrap();
    let sandbox = workspace_write(&d.ws, "restricted");
    let read = json!({"path": uri(&d.ws("a.txt"))});
    call(&client, "fs/readFile", read.clone(), &sandbox).await;
    let helper = processes_in(&d.ws);
    assert_eq!(helper.len(), 1, "{helper:?}");
    for _ in 0..20 {
        let result = call(&client, "fs/readFile", read.clone(), &sandbox).await;
        assert_eq!(unb64(&result["dataBase64"]), b"inside");
        assert_eq!(processes_in(&d.ws), helper);
    }
    // Still confined: the reused helper refuses what the intent does not grant.
    let outside = json!({"path": uri(&d.out("f")), "dataBase64": b64(b"x")});
    assert_denied(
        &fail(&client, "fs/writeFile", outside, &sandbox).await,
        EROFS,
    );
    d.assert_outside_untouched();
    eventually("the idle helper retired", || processes_in(&d.ws).is_empty()).await;
    d.assert_ws_names_settle(&["a.txt"]).await;
}
