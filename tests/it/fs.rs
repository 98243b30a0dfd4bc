//! One-shot `fs/*` methods end to end: the real binary, a real WebSocket, real files.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

struct Fs {
    client: Client,
    dir: tempfile::TempDir,
    _daemon: Daemon,
}

async fn setup() -> Fs {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    Fs {
        client,
        dir: scratch_dir(),
        _daemon: daemon,
    }
}

impl Fs {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn uri(&self, name: &str) -> String {
        file_uri(&self.path(name))
    }

    async fn call(&self, method: &str, params: Value) -> Value {
        self.client.call(method, params).await
    }

    async fn fail(&self, method: &str, params: Value) -> Value {
        match self.client.request(method, params).await {
            Ok(result) => panic!("{method} unexpectedly succeeded: {result}"),
            Err(error) => error,
        }
    }

    async fn read(&self, name: &str) -> Vec<u8> {
        let result = self
            .call("fs/readFile", json!({"path": self.uri(name)}))
            .await;
        unb64(&result["dataBase64"])
    }
}

fn assert_error(error: &Value, code: i64, message: &str) {
    assert_eq!(error["code"], code, "{error}");
    assert_eq!(error["message"], message, "{error}");
}

fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt as _;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0);
}

#[tokio::test]
async fn write_then_read_round_trips_bytes_and_writes_through_hard_links() {
    let fs = setup().await;
    let bytes: Vec<u8> = (0..=255).collect();
    let written = fs
        .call(
            "fs/writeFile",
            json!({"path": fs.uri("a.bin"), "dataBase64": b64(&bytes), "sandbox": null}),
        )
        .await;
    assert_eq!(written, json!({}));
    assert_eq!(fs.read("a.bin").await, bytes);
    assert_eq!(std::fs::read(fs.path("a.bin")).unwrap(), bytes);

    std::fs::hard_link(fs.path("a.bin"), fs.path("link.bin")).unwrap();
    fs.call(
        "fs/writeFile",
        json!({"path": fs.uri("link.bin"), "dataBase64": b64(b"through")}),
    )
    .await;
    assert_eq!(std::fs::read(fs.path("a.bin")).unwrap(), b"through");
}

#[tokio::test]
async fn write_file_with_a_missing_parent_is_not_found_and_creates_nothing() {
    let fs = setup().await;
    for atomic in [false, true] {
        let error = fs
            .fail(
                "fs/writeFile",
                json!({"path": fs.uri("missing/a.txt"), "dataBase64": b64(b"x"), "atomic": atomic}),
            )
            .await;
        assert_error(&error, -32004, "No such file or directory (os error 2)");
        assert_eq!(error["data"]["kind"], "NotFound");
        assert_eq!(error["data"]["errno"], 2);
        assert!(!fs.path("missing").exists());
    }
    assert_eq!(std::fs::read_dir(fs.dir.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn write_file_rejects_bad_base64_with_invalid_request() {
    let fs = setup().await;
    let error = fs
        .fail(
            "fs/writeFile",
            json!({"path": fs.uri("a"), "dataBase64": "!!!"}),
        )
        .await;
    assert_eq!(error["code"], -32600);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("fs/writeFile requires valid base64 dataBase64: "),
        "{message}"
    );
    assert!(!fs.path("a").exists());
}

#[tokio::test]
async fn path_fields_must_be_file_uris_that_fit_this_host() {
    let fs = setup().await;
    let native = fs
        .fail(
            "fs/readFile",
            json!({"path": fs.path("a").display().to_string()}),
        )
        .await;
    assert_eq!(native["code"], -32602);
    let http = fs
        .fail("fs/getMetadata", json!({"path": "http://host/x"}))
        .await;
    assert_eq!(http["code"], -32602);
    let windows = fs
        .fail("fs/readFile", json!({"path": "file:///C:/x"}))
        .await;
    assert_error(&windows, -32600, "'file:///C:/x' is invalid on 'linux'");
    let copy = fs
        .fail(
            "fs/copy",
            json!({"sourcePath": fs.uri("a"), "destinationPath": "file://server/share/x", "recursive": false}),
        )
        .await;
    assert_error(
        &copy,
        -32600,
        "'file://server/share/x' is invalid on 'linux'",
    );
}

#[tokio::test]
async fn io_errors_map_to_the_reference_codes() {
    let fs = setup().await;
    let missing = fs
        .fail("fs/readFile", json!({"path": fs.uri("nope")}))
        .await;
    assert_error(&missing, -32004, "No such file or directory (os error 2)");
    assert_eq!(missing["data"]["path"], fs.uri("nope"));
    // Even root may not write a read-only sysctl: PermissionDenied is -32600.
    let denied = fs
        .fail(
            "fs/writeFile",
            json!({"path": "file:///proc/sys/kernel/version", "dataBase64": b64(b"x")}),
        )
        .await;
    assert_error(&denied, -32600, "Permission denied (os error 13)");
    assert_eq!(denied["data"]["kind"], "PermissionDenied");
    // Anything else is -32603 with the OS text.
    std::fs::write(fs.path("file"), b"x").unwrap();
    let not_dir = fs
        .fail("fs/readDirectory", json!({"path": fs.uri("file")}))
        .await;
    assert_error(&not_dir, -32603, "Not a directory (os error 20)");
    let is_dir = fs
        .fail("fs/readFile", json!({"path": file_uri(fs.dir.path())}))
        .await;
    assert_error(&is_dir, -32603, "Is a directory (os error 21)");
}

#[tokio::test]
async fn read_file_enforces_the_size_limits() {
    let fs = setup().await;
    std::fs::write(fs.path("four"), b"1234").unwrap();
    let error = fs
        .fail(
            "fs/readFile",
            json!({"path": fs.uri("four"), "maxBytes": 3}),
        )
        .await;
    assert_error(
        &error,
        -32600,
        "file is too large to read: limit is 3 bytes; read it in blocks with fs/open and fs/readBlock",
    );
    let exact = fs
        .call(
            "fs/readFile",
            json!({"path": fs.uri("four"), "maxBytes": 4}),
        )
        .await;
    assert_eq!(unb64(&exact["dataBase64"]), b"1234");

    // A sparse file one byte over the daemon's default cap (32 MiB) fails from its metadata,
    // without being read, whatever `maxBytes` asks for.
    let big = std::fs::File::create(fs.path("big")).unwrap();
    big.set_len(32 * 1024 * 1024 + 1).unwrap();
    let started = Instant::now();
    let error = fs
        .fail(
            "fs/readFile",
            json!({"path": fs.uri("big"), "maxBytes": 1u64 << 40}),
        )
        .await;
    assert_error(
        &error,
        -32600,
        "file is too large to read: limit is 33554432 bytes; read it in blocks with fs/open and fs/readBlock",
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn read_file_is_capped_by_the_daemon_flag_and_names_fs_open() {
    let daemon = Daemon::start_with(&["--max-read-file-bytes", "1024"], &[]);
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let (fits, over) = (dir.path().join("fits"), dir.path().join("over"));
    std::fs::write(&fits, vec![1u8; 1024]).unwrap();
    std::fs::write(&over, vec![1u8; 1025]).unwrap();
    let read = client
        .call("fs/readFile", json!({"path": file_uri(&fits)}))
        .await;
    assert_eq!(unb64(&read["dataBase64"]).len(), 1024);
    for params in [
        json!({"path": file_uri(&over)}),
        json!({"path": file_uri(&over), "maxBytes": 1u64 << 30}),
    ] {
        let error = client.request("fs/readFile", params).await.unwrap_err();
        assert_error(
            &error,
            -32600,
            "file is too large to read: limit is 1024 bytes; read it in blocks with fs/open and fs/readBlock",
        );
    }
    // The stream the error names reads it.
    let handle = client
        .call("fs/open", json!({"path": file_uri(&over)}))
        .await;
    let block = client
        .call(
            "fs/readBlock",
            json!({"handleId": handle["handleId"], "offset": 0, "len": 2048}),
        )
        .await;
    assert_eq!(unb64(&block["chunk"]).len(), 1025);
}

#[tokio::test]
async fn read_file_reads_past_a_zero_reported_size() {
    let fs = setup().await;
    // /proc files report size 0 but have content.
    let result = fs
        .call("fs/readFile", json!({"path": "file:///proc/self/status"}))
        .await;
    let text = String::from_utf8(unb64(&result["dataBase64"])).unwrap();
    assert!(text.contains("exec-server"), "{text}");
}

#[tokio::test]
async fn follow_symlinks_false_never_traverses_a_final_symlink() {
    let fs = setup().await;
    std::fs::write(fs.path("target"), b"secret").unwrap();
    std::os::unix::fs::symlink("target", fs.path("link")).unwrap();
    std::fs::create_dir(fs.path("dir")).unwrap();
    std::os::unix::fs::symlink("dir", fs.path("dirlink")).unwrap();
    let refused = |name: &str| {
        format!(
            "path `{}` is a symbolic link and followSymlinks is false",
            fs.path(name).display()
        )
    };

    let error = fs
        .fail(
            "fs/readFile",
            json!({"path": fs.uri("link"), "followSymlinks": false}),
        )
        .await;
    assert_error(&error, -32600, &refused("link"));
    assert_eq!(fs.read("link").await, b"secret", "following is the default");

    for atomic in [false, true] {
        let error = fs
            .fail(
                "fs/writeFile",
                json!({"path": fs.uri("link"), "dataBase64": b64(b"evil"), "followSymlinks": false, "atomic": atomic}),
            )
            .await;
        assert_error(&error, -32600, &refused("link"));
        assert_eq!(std::fs::read(fs.path("target")).unwrap(), b"secret");
        assert!(std::fs::symlink_metadata(fs.path("link"))
            .unwrap()
            .file_type()
            .is_symlink());
    }
    // Following writes the target and keeps the link, atomically or not.
    for (atomic, text) in [(false, "plain"), (true, "atomic")] {
        fs.call(
            "fs/writeFile",
            json!({"path": fs.uri("link"), "dataBase64": b64(text.as_bytes()), "atomic": atomic}),
        )
        .await;
        assert_eq!(std::fs::read(fs.path("target")).unwrap(), text.as_bytes());
        assert!(std::fs::symlink_metadata(fs.path("link"))
            .unwrap()
            .file_type()
            .is_symlink());
    }

    let followed = fs
        .call("fs/getMetadata", json!({"path": fs.uri("link")}))
        .await;
    assert_eq!(
        (
            &followed["isFile"],
            &followed["isSymlink"],
            &followed["size"]
        ),
        (&json!(true), &json!(true), &json!(6))
    );
    // Nothing about the link itself would be its target's: upstream refuses it.
    let error = fs
        .fail(
            "fs/getMetadata",
            json!({"path": fs.uri("link"), "followSymlinks": false}),
        )
        .await;
    assert_error(&error, -32600, &refused("link"));

    let error = fs
        .fail(
            "fs/createDirectory",
            json!({"path": fs.uri("dirlink"), "followSymlinks": false}),
        )
        .await;
    assert_error(&error, -32600, &refused("dirlink"));
    fs.call("fs/createDirectory", json!({"path": fs.uri("dirlink")}))
        .await;

    // Removing never follows the link: it is unlinked, or, not following, refused as upstream.
    std::os::unix::fs::symlink("target", fs.path("victim")).unwrap();
    let error = fs
        .fail(
            "fs/remove",
            json!({"path": fs.uri("victim"), "followSymlinks": false}),
        )
        .await;
    assert_error(&error, -32600, &refused("victim"));
    fs.call("fs/remove", json!({"path": fs.uri("victim")}))
        .await;
    assert!(std::fs::symlink_metadata(fs.path("victim")).is_err());
    assert!(fs.path("target").exists(), "the target survives");
    fs.call("fs/remove", json!({"path": fs.uri("dirlink")}))
        .await;
    assert!(fs.path("dir").is_dir());
}

#[tokio::test]
async fn fifos_never_block() {
    let fs = setup().await;
    mkfifo(&fs.path("fifo"));
    let started = Instant::now();
    let not_a_file = format!("path `{}` is not a file", fs.path("fifo").display());
    let error = fs
        .fail("fs/readFile", json!({"path": fs.uri("fifo")}))
        .await;
    assert_error(&error, -32600, &not_a_file);
    let error = fs
        .fail(
            "fs/writeFile",
            json!({"path": fs.uri("fifo"), "dataBase64": b64(b"x")}),
        )
        .await;
    // No reader: the non-blocking open fails at once (ENXIO).
    assert_eq!(error["data"]["errno"], libc::ENXIO);
    let error = fs
        .fail(
            "fs/copy",
            json!({"sourcePath": fs.uri("fifo"), "destinationPath": fs.uri("copy"), "recursive": false}),
        )
        .await;
    assert_error(
        &error,
        -32600,
        "fs/copy only supports regular files, directories, and symlinks",
    );
    assert!(!fs.path("copy").exists());
    // With a reader present the write open succeeds, and the type check refuses it.
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fs.path("fifo"))
        .unwrap();
    let error = fs
        .fail(
            "fs/writeFile",
            json!({"path": fs.uri("fifo"), "dataBase64": b64(b"x")}),
        )
        .await;
    assert_error(&error, -32600, &not_a_file);
    drop(reader);
    let metadata = fs
        .call("fs/getMetadata", json!({"path": fs.uri("fifo")}))
        .await;
    assert_eq!(
        (&metadata["isFile"], &metadata["isDirectory"]),
        (&json!(false), &json!(false))
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn create_directory_is_recursive_by_default() {
    let fs = setup().await;
    fs.call("fs/createDirectory", json!({"path": fs.uri("a/b/c")}))
        .await;
    assert!(fs.path("a/b/c").is_dir());
    fs.call("fs/createDirectory", json!({"path": fs.uri("a/b/c")}))
        .await;
    let error = fs
        .fail(
            "fs/createDirectory",
            json!({"path": fs.uri("x/y"), "recursive": false}),
        )
        .await;
    assert_error(&error, -32004, "No such file or directory (os error 2)");
    let error = fs
        .fail(
            "fs/createDirectory",
            json!({"path": fs.uri("a"), "recursive": false}),
        )
        .await;
    assert_error(&error, -32603, "File exists (os error 17)");
}

#[tokio::test]
async fn get_metadata_reports_kinds_sizes_and_times() {
    let fs = setup().await;
    std::fs::write(fs.path("f"), b"12345").unwrap();
    std::fs::create_dir(fs.path("d")).unwrap();
    let file = fs
        .call("fs/getMetadata", json!({"path": fs.uri("f")}))
        .await;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert_eq!(file["isFile"], true);
    assert_eq!(file["isDirectory"], false);
    assert_eq!(file["isSymlink"], false);
    assert_eq!(file["size"], 5);
    let modified = file["modifiedAtMs"].as_i64().unwrap();
    assert!((now_ms - modified).abs() < 60_000, "{file}");
    assert!(file["createdAtMs"].as_i64().unwrap() >= 0);
    let dir = fs
        .call("fs/getMetadata", json!({"path": fs.uri("d")}))
        .await;
    assert_eq!(
        (&dir["isDirectory"], &dir["isFile"]),
        (&json!(true), &json!(false))
    );
    std::os::unix::fs::symlink("gone", fs.path("dangling")).unwrap();
    let error = fs
        .fail("fs/getMetadata", json!({"path": fs.uri("dangling")}))
        .await;
    assert_eq!(error["code"], -32004);
    let error = fs
        .fail(
            "fs/getMetadata",
            json!({"path": fs.uri("dangling"), "followSymlinks": false}),
        )
        .await;
    assert_eq!(error["code"], -32600, "a link is refused, dangling or not");
}

#[tokio::test]
async fn read_directory_lists_entries_and_reports_unstatable_ones() {
    let fs = setup().await;
    std::fs::write(fs.path("file"), b"").unwrap();
    std::fs::create_dir(fs.path("dir")).unwrap();
    std::os::unix::fs::symlink("dir", fs.path("dirlink")).unwrap();
    std::os::unix::fs::symlink("nowhere", fs.path("dangling")).unwrap();
    let result = fs
        .call("fs/readDirectory", json!({"path": file_uri(fs.dir.path())}))
        .await;
    let mut entries = result["entries"].as_array().unwrap().clone();
    entries.sort_by_key(|e| e["fileName"].as_str().unwrap().to_owned());
    assert_eq!(
        entries,
        [
            json!({"fileName": "dir", "isDirectory": true, "isFile": false}),
            json!({"fileName": "dirlink", "isDirectory": true, "isFile": false}),
            json!({"fileName": "file", "isDirectory": false, "isFile": true}),
        ]
    );
    assert_eq!(
        result["errors"],
        json!([{"fileName": "dangling", "message": "No such file or directory (os error 2)"}])
    );
    let clean = fs
        .call("fs/readDirectory", json!({"path": fs.uri("dir")}))
        .await;
    assert_eq!(
        clean,
        json!({"entries": []}),
        "errors is omitted when empty"
    );
}

#[tokio::test]
async fn read_directory_refuses_more_than_50000_entries() {
    let fs = setup().await;
    std::fs::create_dir(fs.path("many")).unwrap();
    for index in 0..50_001 {
        std::fs::File::create(fs.path(&format!("many/{index}"))).unwrap();
    }
    let error = fs
        .fail("fs/readDirectory", json!({"path": fs.uri("many")}))
        .await;
    assert_error(
        &error,
        -32603,
        "fs/readDirectory returned 50001 entries; limit is 50000",
    );
    std::fs::remove_file(fs.path("many/0")).unwrap();
    let result = fs
        .call("fs/readDirectory", json!({"path": fs.uri("many")}))
        .await;
    assert_eq!(result["entries"].as_array().unwrap().len(), 50_000);
}

#[tokio::test]
async fn remove_defaults_to_recursive_and_forced() {
    let fs = setup().await;
    std::fs::create_dir_all(fs.path("tree/sub")).unwrap();
    std::fs::write(fs.path("tree/sub/f"), b"x").unwrap();
    let error = fs
        .fail(
            "fs/remove",
            json!({"path": fs.uri("tree"), "recursive": false}),
        )
        .await;
    assert_error(&error, -32603, "Directory not empty (os error 39)");
    fs.call("fs/remove", json!({"path": fs.uri("tree")})).await;
    assert!(!fs.path("tree").exists());
    fs.call("fs/remove", json!({"path": fs.uri("tree")})).await;
    let error = fs
        .fail("fs/remove", json!({"path": fs.uri("tree"), "force": false}))
        .await;
    assert_error(&error, -32004, "No such file or directory (os error 2)");
    std::fs::create_dir(fs.path("empty")).unwrap();
    fs.call(
        "fs/remove",
        json!({"path": fs.uri("empty"), "recursive": false}),
    )
    .await;
    assert!(!fs.path("empty").exists());
}

#[tokio::test]
async fn copy_copies_files_and_keeps_symlinks_as_symlinks() {
    let fs = setup().await;
    std::fs::write(fs.path("a"), b"content").unwrap();
    std::fs::set_permissions(
        fs.path("a"),
        std::os::unix::fs::PermissionsExt::from_mode(0o751),
    )
    .unwrap();
    fs.call(
        "fs/copy",
        json!({"sourcePath": fs.uri("a"), "destinationPath": fs.uri("b"), "recursive": false}),
    )
    .await;
    assert_eq!(std::fs::read(fs.path("b")).unwrap(), b"content");
    assert_eq!(
        std::fs::metadata(fs.path("b")).unwrap().mode() & 0o777,
        0o751
    );

    std::os::unix::fs::symlink("a", fs.path("link")).unwrap();
    fs.call(
        "fs/copy",
        json!({"sourcePath": fs.uri("link"), "destinationPath": fs.uri("link2"), "recursive": false}),
    )
    .await;
    assert_eq!(
        std::fs::read_link(fs.path("link2")).unwrap(),
        Path::new("a")
    );

    let error = fs
        .fail(
            "fs/copy",
            json!({"sourcePath": fs.uri("a"), "destinationPath": fs.uri("a"), "recursive": false}),
        )
        .await;
    assert_error(&error, -32600, "fs/copy cannot copy a file onto itself");
    assert_eq!(std::fs::read(fs.path("a")).unwrap(), b"content");
    let error = fs
        .fail(
            "fs/copy",
            json!({"sourcePath": fs.uri("nope"), "destinationPath": fs.uri("c"), "recursive": false}),
        )
        .await;
    assert_eq!(error["code"], -32004);
}

#[tokio::test]
async fn copy_stops_at_the_reported_size_and_refuses_devices() {
    use std::os::unix::process::CommandExt as _;
    let mut command = Daemon::command(env!("CARGO_BIN_EXE_exec-server"), &[], &[]);
    // A daemon that copies without end writes at most 64 MiB here (then dies of SIGXFSZ).
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 64 << 20,
                rlim_max: 64 << 20,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let daemon = Daemon::launch(command);
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    // /proc/self/pagemap reports size 0 and reads on for terabytes.
    let copied = dir.path().join("pagemap");
    let params = json!({
        "sourcePath": "file:///proc/self/pagemap",
        "destinationPath": file_uri(&copied),
        "recursive": false,
    });
    let result = tokio::time::timeout(Duration::from_secs(10), client.request("fs/copy", params))
        .await
        .expect("fs/copy of /proc/self/pagemap ends");
    assert_eq!(result.unwrap(), json!({}));
    assert_eq!(std::fs::metadata(&copied).unwrap().len(), 0);
    for device in ["/dev/zero", "/dev/null"] {
        let params = json!({
            "sourcePath": format!("file://{device}"),
            "destinationPath": file_uri(&dir.path().join("device")),
            "recursive": false,
        });
        let error = client.request("fs/copy", params).await.unwrap_err();
        assert_error(
            &error,
            -32600,
            "fs/copy only supports regular files, directories, and symlinks",
        );
    }
    assert!(!dir.path().join("device").exists());
}

#[tokio::test]
async fn copy_of_a_directory_needs_recursive_and_refuses_itself() {
    let fs = setup().await;
    std::fs::create_dir_all(fs.path("src/inner")).unwrap();
    let error = fs
        .fail(
            "fs/copy",
            json!({"sourcePath": fs.uri("src"), "destinationPath": fs.uri("dst"), "recursive": false}),
        )
        .await;
    assert_error(
        &error,
        -32600,
        "fs/copy requires recursive: true when sourcePath is a directory",
    );
    std::os::unix::fs::symlink("src", fs.path("alias")).unwrap();
    for destination in ["src", "src/inner/deeper/copy", "alias/new"] {
        let error = fs
            .fail(
                "fs/copy",
                json!({"sourcePath": fs.uri("src"), "destinationPath": fs.uri(destination), "recursive": true}),
            )
            .await;
        assert_error(
            &error,
            -32600,
            "fs/copy cannot copy a directory to itself or one of its descendants",
        );
    }
    assert!(!fs.path("src/inner/deeper").exists());
    assert!(!fs.path("src/new").exists());
}

#[tokio::test]
async fn recursive_copy_keeps_symlinks_and_skips_fifos() {
    let fs = setup().await;
    std::fs::create_dir_all(fs.path("src/sub/deep")).unwrap();
    std::fs::write(fs.path("src/top.txt"), b"top").unwrap();
    std::fs::write(fs.path("src/sub/deep/leaf.txt"), b"leaf").unwrap();
    std::os::unix::fs::symlink("../top.txt", fs.path("src/sub/rel")).unwrap();
    std::os::unix::fs::symlink("deep", fs.path("src/sub/dirlink")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/abs", fs.path("src/dangling")).unwrap();
    mkfifo(&fs.path("src/sub/fifo"));
    let started = Instant::now();
    fs.call(
        "fs/copy",
        json!({"sourcePath": fs.uri("src"), "destinationPath": fs.uri("out/copy"), "recursive": true}),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let out = fs.path("out/copy");
    assert_eq!(std::fs::read(out.join("top.txt")).unwrap(), b"top");
    assert_eq!(
        std::fs::read(out.join("sub/deep/leaf.txt")).unwrap(),
        b"leaf"
    );
    assert_eq!(
        std::fs::read_link(out.join("sub/rel")).unwrap(),
        Path::new("../top.txt")
    );
    assert_eq!(std::fs::read(out.join("sub/rel")).unwrap(), b"top");
    assert_eq!(
        std::fs::read_link(out.join("sub/dirlink")).unwrap(),
        Path::new("deep")
    );
    assert_eq!(
        std::fs::read_link(out.join("dangling")).unwrap(),
        Path::new("/nonexistent/abs")
    );
    assert!(std::fs::symlink_metadata(out.join("sub/fifo")).is_err());
}

#[tokio::test]
async fn canonicalize_resolves_symlinked_directories() {
    let fs = setup().await;
    std::fs::create_dir(fs.path("real")).unwrap();
    std::os::unix::fs::symlink("real", fs.path("alias")).unwrap();
    let result = fs
        .call("fs/canonicalize", json!({"path": fs.uri("alias")}))
        .await;
    let real = std::fs::canonicalize(fs.path("real")).unwrap();
    assert_eq!(result, json!({"path": file_uri(&real)}));
    let error = fs
        .fail("fs/canonicalize", json!({"path": fs.uri("nope")}))
        .await;
    assert_eq!(error["code"], -32004);
}

#[tokio::test]
async fn rename_moves_and_refuses_to_clobber_by_default() {
    let fs = setup().await;
    std::fs::write(fs.path("a"), b"a").unwrap();
    std::fs::write(fs.path("b"), b"b").unwrap();
    let error = fs
        .fail(
            "fs/rename",
            json!({"sourcePath": fs.uri("a"), "destinationPath": fs.uri("b")}),
        )
        .await;
    assert_error(
        &error,
        -32600,
        &format!(
            "destination `{}` already exists and overwrite is false",
            fs.path("b").display()
        ),
    );
    assert_eq!(error["data"]["kind"], "AlreadyExists");
    assert_eq!(std::fs::read(fs.path("b")).unwrap(), b"b");
    fs.call(
        "fs/rename",
        json!({"sourcePath": fs.uri("a"), "destinationPath": fs.uri("b"), "overwrite": true}),
    )
    .await;
    assert_eq!(std::fs::read(fs.path("b")).unwrap(), b"a");
    assert!(!fs.path("a").exists());
    fs.call(
        "fs/rename",
        json!({"sourcePath": fs.uri("b"), "destinationPath": fs.uri("c")}),
    )
    .await;
    assert_eq!(std::fs::read(fs.path("c")).unwrap(), b"a");

    // The link itself moves; its target stays.
    std::os::unix::fs::symlink("c", fs.path("link")).unwrap();
    fs.call(
        "fs/rename",
        json!({"sourcePath": fs.uri("link"), "destinationPath": fs.uri("link2")}),
    )
    .await;
    assert_eq!(
        std::fs::read_link(fs.path("link2")).unwrap(),
        Path::new("c")
    );
    assert!(fs.path("c").is_file());

    let error = fs
        .fail(
            "fs/rename",
            json!({"sourcePath": fs.uri("gone"), "destinationPath": fs.uri("x")}),
        )
        .await;
    assert_error(&error, -32004, "No such file or directory (os error 2)");
    // A directory into itself is EINVAL, i.e. InvalidInput: -32600.
    std::fs::create_dir(fs.path("d")).unwrap();
    let error = fs
        .fail(
            "fs/rename",
            json!({"sourcePath": fs.uri("d"), "destinationPath": fs.uri("d/inside")}),
        )
        .await;
    assert_error(&error, -32600, "Invalid argument (os error 22)");
}

fn walk_params(path: &str, options: Value) -> Value {
    let mut all = json!({"maxDepth": 64, "maxDirectories": 10000, "maxEntries": 50000, "followDirectorySymlinks": false});
    all.as_object_mut()
        .unwrap()
        .extend(options.as_object().unwrap().clone());
    json!({"path": path, "options": all})
}

fn walked(result: &Value, root: &Path) -> Vec<String> {
    let root = file_uri(root);
    result["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let path = e["path"].as_str().unwrap();
            let kind = if e["kind"] == "directory" { "/" } else { "" };
            format!("{}{kind}", &path[root.len() + 1..])
        })
        .collect()
}

#[tokio::test]
async fn walk_is_breadth_first_sorted_and_bounded() {
    let fs = setup().await;
    let root = fs.path("root");
    for dir in ["b/deep", "a", ".hidden"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    for file in ["z.txt", "b/deep/leaf", "a/one", ".hidden/h"] {
        std::fs::write(root.join(file), b"").unwrap();
    }
    std::os::unix::fs::symlink("b", root.join("link")).unwrap();
    std::os::unix::fs::symlink("z.txt", root.join("filelink")).unwrap();
    mkfifo(&root.join("fifo"));

    let all = fs
        .call("fs/walk", walk_params(&fs.uri("root"), json!({})))
        .await;
    assert_eq!(
        walked(&all, &root),
        [
            ".hidden/",
            "a/",
            "b/",
            "z.txt",
            ".hidden/h",
            "a/one",
            "b/deep/",
            "b/deep/leaf"
        ]
    );
    assert_eq!(
        (&all["errors"], &all["truncated"]),
        (&json!([]), &json!(false))
    );

    let followed = fs
        .call(
            "fs/walk",
            walk_params(
                &fs.uri("root"),
                json!({"followDirectorySymlinks": true, "pruneHiddenDirectories": true}),
            ),
        )
        .await;
    // `link` is the same directory as `b`: listed, as upstream lists an alias, but not entered
    // again; `.hidden` is not entered.
    assert_eq!(
        walked(&followed, &root),
        [
            ".hidden/",
            "a/",
            "b/",
            "link/",
            "z.txt",
            "a/one",
            "b/deep/",
            "b/deep/leaf"
        ]
    );

    let shallow = fs
        .call(
            "fs/walk",
            walk_params(&fs.uri("root"), json!({"maxDepth": 0})),
        )
        .await;
    // Depth counts from 0, as upstream's: 0 lists the root's own entries.
    assert_eq!(walked(&shallow, &root), [".hidden/", "a/", "b/", "z.txt"]);
    let few = fs
        .call(
            "fs/walk",
            walk_params(&fs.uri("root"), json!({"maxEntries": 2})),
        )
        .await;
    assert_eq!(walked(&few, &root), [".hidden/", "a/"]);
    assert_eq!(few["truncated"], true);
    let one_dir = fs
        .call(
            "fs/walk",
            walk_params(&fs.uri("root"), json!({"maxDirectories": 1})),
        )
        .await;
    assert_eq!(walked(&one_dir, &root), [".hidden/", "a/", "b/", "z.txt"]);
    assert_eq!(one_dir["truncated"], true);

    let file_root = fs
        .call("fs/walk", walk_params(&fs.uri("root/z.txt"), json!({})))
        .await;
    assert_eq!(
        file_root,
        json!({"entries": [], "errors": [], "truncated": false})
    );
    let link_root = fs
        .call("fs/walk", walk_params(&fs.uri("root/link"), json!({})))
        .await;
    assert_eq!(link_root["entries"], json!([]));

    let error = fs
        .fail(
            "fs/walk",
            walk_params(&fs.uri("root"), json!({"maxEntries": 0})),
        )
        .await;
    assert_error(
        &error,
        -32600,
        "filesystem walk limits must be greater than zero",
    );
    let error = fs
        .fail(
            "fs/walk",
            walk_params(&fs.uri("root"), json!({"maxDirectories": 10001})),
        )
        .await;
    assert_error(
        &error,
        -32600,
        "filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000",
    );
}

/// Sandboxed calls are exercised in tests/it/sandbox_fs_ops.rs; intent that restricts no file
/// access runs in the daemon itself (a watch, which a confined call refuses, works).
#[tokio::test]
async fn sandbox_intent_that_restricts_no_file_access_runs_directly() {
    let fs = setup().await;
    for permissions in [
        json!({"type": "disabled"}),
        json!({"type": "external", "network": "enabled"}),
        json!({"type": "managed", "file_system": {"type": "unrestricted"}, "network": "enabled"}),
        // File operations open no sockets: a network restriction alone does not apply.
        json!({"type": "managed", "file_system": {"type": "unrestricted"}, "network": "restricted"}),
        json!({"type": "managed", "file_system": {"type": "restricted", "entries": [
            {"path": {"type": "special", "value": {"kind": "root"}}, "access": "write"}
        ]}, "network": "restricted"}),
    ] {
        let sandbox = json!({"permissions": permissions, "windowsSandboxLevel": "disabled"});
        fs.call(
            "fs/writeFile",
            json!({"path": fs.uri("a"), "dataBase64": b64(b"ok"), "sandbox": sandbox}),
        )
        .await;
        let read = fs
            .call(
                "fs/readFile",
                json!({"path": fs.uri("a"), "sandbox": sandbox}),
            )
            .await;
        assert_eq!(unb64(&read["dataBase64"]), b"ok");
        let watch = json!({"watchId": "w", "path": fs.uri("a"), "sandbox": sandbox});
        fs.call("fs/watch", watch).await;
        fs.call("fs/unwatch", json!({"watchId": "w"})).await;
        std::fs::remove_file(fs.path("a")).unwrap();
    }
}

#[tokio::test]
async fn atomic_writes_are_never_seen_half_written() {
    let fs = setup().await;
    let small = vec![b'a'; 256 * 1024];
    let large = vec![b'b'; 1024 * 1024];
    std::fs::write(fs.path("doc"), &small).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (path, stop) = (fs.path("doc"), stop.clone());
        let (small, large) = (small.clone(), large.clone());
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let seen = std::fs::read(&path).unwrap();
                assert!(
                    seen == small || seen == large,
                    "a reader saw a partial file of {} bytes",
                    seen.len()
                );
                reads += 1;
            }
            reads
        })
    };
    for round in 0..20 {
        let data = if round % 2 == 0 { &large } else { &small };
        fs.call(
            "fs/writeFile",
            json!({"path": fs.uri("doc"), "dataBase64": b64(data), "atomic": true}),
        )
        .await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().expect("the reader only saw whole files");
    assert!(reads > 20, "the reader ran concurrently ({reads} reads)");
    assert_eq!(std::fs::read(fs.path("doc")).unwrap(), small);
    // Only the document is left: no temporary files.
    assert_eq!(std::fs::read_dir(fs.dir.path()).unwrap().count(), 1);
    // The mode of the replaced file is kept.
    std::fs::set_permissions(
        fs.path("doc"),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .unwrap();
    fs.call(
        "fs/writeFile",
        json!({"path": fs.uri("doc"), "dataBase64": b64(b"x"), "atomic": true}),
    )
    .await;
    assert_eq!(
        std::fs::metadata(fs.path("doc")).unwrap().mode() & 0o777,
        0o640
    );
}
