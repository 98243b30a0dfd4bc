//! `fs/open`, `fs/readBlock`, `fs/writeBlock`, `fs/close` end to end.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MIB: usize = 1024 * 1024;

async fn open(client: &Client, id: &str, path: &Path) -> Result<Value, Value> {
    client
        .request("fs/open", json!({"handleId": id, "path": file_uri(path)}))
        .await
}

async fn read_block(client: &Client, id: &str, offset: u64, len: usize) -> (Vec<u8>, bool) {
    let result = client
        .call(
            "fs/readBlock",
            json!({"handleId": id, "offset": offset, "len": len}),
        )
        .await;
    (unb64(&result["chunk"]), result["eof"].as_bool().unwrap())
}

fn assert_error(error: &Value, code: i64, message: &str) {
    assert_eq!(error["code"], code, "{error}");
    assert_eq!(error["message"], message, "{error}");
}

/// Deterministic pseudo-random bytes (xorshift, eight bytes per step to stay quick unoptimized).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[tokio::test]
async fn read_block_supports_non_sequential_offsets_and_lengths() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let path = dir.path().join("digits");
    std::fs::write(&path, b"0123456789").unwrap();
    assert_eq!(
        open(&client, "h", &path).await.unwrap(),
        json!({"handleId": "h"})
    );
    for (offset, len, bytes, eof) in [
        (6, 3, &b"678"[..], false),
        (1, 2, b"12", false),
        (8, 4, b"89", true),
        (0, 2, b"01", false),
        (10, 1, b"", true),
        (99, 5, b"", true),
    ] {
        assert_eq!(
            read_block(&client, "h", offset, len).await,
            (bytes.to_vec(), eof),
            "at ({offset},{len})"
        );
    }
    // EOF does not close the handle.
    assert_eq!(read_block(&client, "h", 0, 1).await.0, b"0");
    assert_eq!(
        client.call("fs/close", json!({"handleId": "h"})).await,
        json!({})
    );
    assert_eq!(
        client.call("fs/close", json!({"handleId": "h"})).await,
        json!({})
    );
    let error = client
        .request(
            "fs/readBlock",
            json!({"handleId": "h", "offset": 0, "len": 1}),
        )
        .await
        .unwrap_err();
    assert_error(&error, -32004, "unknown file handle `h`");
}

#[tokio::test]
async fn open_and_read_block_validate_their_params() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let path = dir.path().join("f");
    std::fs::write(&path, b"data").unwrap();
    let long = "x".repeat(33);
    let error = open(&client, &long, &path).await.unwrap_err();
    assert_error(&error, -32600, "file handle ID must not exceed 32 bytes");
    open(&client, &"y".repeat(32), &path).await.unwrap();
    open(&client, "dup", &path).await.unwrap();
    let error = open(&client, "dup", &path).await.unwrap_err();
    assert_error(&error, -32600, "file handle `dup` already exists");
    for len in [0, MIB + 1] {
        let error = client
            .request(
                "fs/readBlock",
                json!({"handleId": "dup", "offset": 0, "len": len}),
            )
            .await
            .unwrap_err();
        assert_error(
            &error,
            -32600,
            "file read block length must be between 1 and 1048576",
        );
    }
    let error = client
        .request(
            "fs/readBlock",
            json!({"handleId": "dup", "offset": u64::MAX, "len": 2}),
        )
        .await
        .unwrap_err();
    assert_error(&error, -32600, "file read offset overflowed");
    let missing = open(&client, "m", &dir.path().join("missing"))
        .await
        .unwrap_err();
    assert_error(&missing, -32004, "No such file or directory (os error 2)");
    let directory = open(&client, "d", dir.path()).await.unwrap_err();
    assert_error(&directory, -32603, "Is a directory (os error 21)");
    // Without an id the server picks one.
    let picked = client
        .call("fs/open", json!({"path": file_uri(&path)}))
        .await;
    let id = picked["handleId"].as_str().unwrap();
    assert!(!id.is_empty() && id.len() <= 32, "{picked}");
    assert_eq!(read_block(&client, id, 0, 4).await.0, b"data");
}

#[tokio::test]
async fn a_two_mib_file_is_exactly_two_blocks() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let path = dir.path().join("two");
    let data = pattern(2 * MIB, 7);
    std::fs::write(&path, &data).unwrap();
    open(&client, "h", &path).await.unwrap();
    let (first, eof) = read_block(&client, "h", 0, MIB).await;
    assert!(!eof);
    let (second, eof) = read_block(&client, "h", MIB as u64, MIB).await;
    assert!(!eof, "a full block is not EOF, even at the end");
    let (rest, eof) = read_block(&client, "h", 2 * MIB as u64, MIB).await;
    assert!(eof && rest.is_empty());
    assert!(first == data[..MIB] && second == data[MIB..]);
}

#[tokio::test]
async fn open_fails_fast_on_a_fifo() {
    use std::os::unix::ffi::OsStrExt as _;
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let fifo = dir.path().join("fifo");
    let name = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0);
    let started = Instant::now();
    let error = open(&client, "f", &fifo).await.unwrap_err();
    assert_error(
        &error,
        -32600,
        &format!("path `{}` is not a file", fifo.display()),
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn open_refuses_a_symlink_when_not_following() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    std::fs::write(dir.path().join("target"), b"t").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink("target", &link).unwrap();
    for mode in ["read", "write", "append", "replace", "replaceOnClose"] {
        let error = client
            .request(
                "fs/open",
                json!({"path": file_uri(&link), "mode": mode, "followSymlinks": false}),
            )
            .await
            .unwrap_err();
        assert_error(
            &error,
            -32600,
            &format!(
                "path `{}` is a symbolic link and followSymlinks is false",
                link.display()
            ),
        );
    }
    assert_eq!(std::fs::read(dir.path().join("target")).unwrap(), b"t");
    let followed = client
        .call("fs/open", json!({"handleId": "f", "path": file_uri(&link)}))
        .await;
    assert_eq!(followed["handleId"], "f");
    assert_eq!(read_block(&client, "f", 0, 4).await.0, b"t");
}

#[tokio::test]
async fn the_128_handle_limit_is_per_connection_and_close_releases_it() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let path = dir.path().join("f");
    std::fs::write(&path, b"x").unwrap();
    let baseline = open_fds(daemon.pid());
    for index in 0..128 {
        open(&client, &format!("h{index}"), &path).await.unwrap();
    }
    let error = open(&client, "h128", &path).await.unwrap_err();
    assert_error(
        &error,
        -32600,
        "at most 128 file handles may be open per connection",
    );
    assert_eq!(open_fds(daemon.pid()), baseline + 128);

    // Another connection has its own 128.
    let (other, _) = daemon.session().await;
    for index in 0..128 {
        open(&other, &format!("h{index}"), &path).await.unwrap();
    }
    assert!(open(&other, "h128", &path).await.is_err());

    client.call("fs/close", json!({"handleId": "h5"})).await;
    open(&client, "h128", &path).await.unwrap();

    // A dropped connection closes all its files.
    let before = open_fds(daemon.pid());
    other.abort();
    eventually("the dropped connection's files to close", || {
        open_fds(daemon.pid()) <= before - 128
    })
    .await;
    let (third, _) = daemon.session().await;
    for index in 0..128 {
        open(&third, &format!("h{index}"), &path).await.unwrap();
    }
}

/// Opens still in flight hold their slot: a burst of 200 concurrent opens on one connection
/// gets exactly 128 handles, and the rest are refused before anything is opened.
#[tokio::test]
async fn a_burst_of_concurrent_opens_gets_at_most_128_handles() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let path = dir.path().join("f");
    std::fs::write(&path, b"x").unwrap();
    let baseline = open_fds(daemon.pid());
    let ids: Vec<String> = (0..200).map(|index| format!("b{index}")).collect();
    let outcomes = futures::future::join_all(ids.iter().map(|id| open(&client, id, &path))).await;
    let (opened, refused): (Vec<_>, Vec<_>) = outcomes.into_iter().partition(Result::is_ok);
    assert_eq!(opened.len(), 128);
    for error in refused {
        assert_error(
            &error.unwrap_err(),
            -32600,
            "at most 128 file handles may be open per connection",
        );
    }
    assert_eq!(open_fds(daemon.pid()), baseline + 128);
}

#[tokio::test]
async fn completed_streams_release_handle_capacity() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let path = dir.path().join("f");
    std::fs::write(&path, b"stream").unwrap();
    for index in 0..129 {
        let id = format!("s{index}");
        open(&client, &id, &path).await.unwrap();
        assert_eq!(
            read_block(&client, &id, 0, 16).await,
            (b"stream".to_vec(), true)
        );
        client.call("fs/close", json!({"handleId": id})).await;
    }
}

#[tokio::test]
async fn a_stream_keeps_reading_the_open_file_after_the_path_is_replaced() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let path = dir.path().join("f");
    std::fs::write(&path, b"original content").unwrap();
    open(&client, "h", &path).await.unwrap();
    assert_eq!(read_block(&client, "h", 0, 8).await.0, b"original");
    std::fs::rename(&path, dir.path().join("moved")).unwrap();
    std::fs::write(&path, b"REPLACEMENT").unwrap();
    assert_eq!(read_block(&client, "h", 8, 100).await.0, b" content");
    std::fs::remove_file(dir.path().join("moved")).unwrap();
    assert_eq!(
        read_block(&client, "h", 0, 100).await.0,
        b"original content"
    );
}

#[tokio::test]
async fn a_100_mb_stream_arrives_byte_for_byte() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let path = dir.path().join("big");
    let len = 100 * 1000 * 1000;
    // A period that is no multiple of the block size, so every block differs from the others.
    let period = pattern(MIB + 7, 42);
    let mut data = Vec::with_capacity(len);
    while data.len() < len {
        let take = period.len().min(len - data.len());
        data.extend_from_slice(&period[..take]);
    }
    std::fs::write(&path, &data).unwrap();
    open(&client, "big", &path).await.unwrap();
    // Several blocks in flight at once, as a client streaming for throughput would do.
    let blocks = len.div_ceil(MIB);
    let mut received = Vec::with_capacity(len);
    for batch in (0..blocks).collect::<Vec<_>>().chunks(4) {
        let replies = futures::future::join_all(
            batch
                .iter()
                .map(|index| read_block(&client, "big", (index * MIB) as u64, MIB)),
        )
        .await;
        for (chunk, eof) in replies {
            assert_eq!(eof, chunk.len() < MIB);
            received.extend_from_slice(&chunk);
        }
    }
    assert_eq!(received.len(), len);
    assert!(received == data, "the streamed bytes differ from the file");
}

async fn open_write(client: &Client, id: &str, path: &Path, mode: &str) -> Result<Value, Value> {
    client
        .request(
            "fs/open",
            json!({"handleId": id, "path": file_uri(path), "mode": mode}),
        )
        .await
}

async fn write_block(
    client: &Client,
    id: &str,
    offset: Option<u64>,
    data: &[u8],
) -> Result<Value, Value> {
    let mut params = json!({"handleId": id, "chunk": b64(data)});
    if let Some(offset) = offset {
        params["offset"] = json!(offset);
    }
    client.request("fs/writeBlock", params).await
}

fn temp_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().ends_with(".tmp"))
        .collect()
}

#[tokio::test]
async fn a_streamed_replace_on_close_lands_byte_for_byte_and_atomically_on_close() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let path = dir.path().join("upload.bin");
    std::fs::write(&path, b"old").unwrap();
    let data = pattern(6 * MIB + 12345, 9);
    open_write(&client, "up", &path, "replaceOnClose")
        .await
        .unwrap();
    let mut next = 0u64;
    for chunk in data.chunks(MIB) {
        let result = write_block(&client, "up", None, chunk).await.unwrap();
        next += chunk.len() as u64;
        assert_eq!(result, json!({"nextOffset": next}));
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"old",
            "untouched until close"
        );
    }
    assert_eq!(temp_files(dir.path()).len(), 1);
    client.call("fs/close", json!({"handleId": "up"})).await;
    assert!(
        std::fs::read(&path).unwrap() == data,
        "the committed file differs"
    );
    assert!(temp_files(dir.path()).is_empty());

    // Discarding leaves the target as it was.
    open_write(&client, "gone", &path, "replaceOnClose")
        .await
        .unwrap();
    write_block(&client, "gone", None, b"never").await.unwrap();
    client
        .call("fs/close", json!({"handleId": "gone", "discard": true}))
        .await;
    assert!(std::fs::read(&path).unwrap() == data);
    assert!(temp_files(dir.path()).is_empty());

    // So does a dropped connection.
    let (other, _) = daemon.session().await;
    open_write(&other, "lost", &path, "replaceOnClose")
        .await
        .unwrap();
    write_block(&other, "lost", None, b"lost").await.unwrap();
    other.abort();
    eventually("the staged file to be discarded", || {
        temp_files(dir.path()).is_empty()
    })
    .await;
    assert!(std::fs::read(&path).unwrap() == data);
}

#[tokio::test]
async fn write_and_append_modes_write_in_place() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let path = dir.path().join("f");
    std::fs::write(&path, b"previous content").unwrap();
    open_write(&client, "w", &path, "write").await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"", "write mode truncates");
    write_block(&client, "w", None, b"hello").await.unwrap();
    let result = write_block(&client, "w", Some(10), b"world").await.unwrap();
    assert_eq!(result, json!({"nextOffset": 15}));
    write_block(&client, "w", None, b"!").await.unwrap();
    write_block(&client, "w", Some(5), b"_____").await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"hello_____world!");
    let error = client
        .request(
            "fs/readBlock",
            json!({"handleId": "w", "offset": 0, "len": 1}),
        )
        .await
        .unwrap_err();
    assert_error(&error, -32600, "file handle `w` is not open for reading");
    // The refused read closed the handle, as upstream's failed reads do.
    let error = write_block(&client, "w", None, b"x").await.unwrap_err();
    assert_error(&error, -32004, "unknown file handle `w`");
    assert_eq!(std::fs::read(&path).unwrap(), b"hello_____world!");

    open_write(&client, "a", &path, "append").await.unwrap();
    let result = write_block(&client, "a", None, b"+tail").await.unwrap();
    assert_eq!(result, json!({"nextOffset": 21}));
    let error = write_block(&client, "a", Some(0), b"x").await.unwrap_err();
    assert_error(
        &error,
        -32600,
        "offset is not allowed on a handle opened in append mode",
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"hello_____world!+tail");
    client.call("fs/close", json!({"handleId": "a"})).await;

    let created = dir.path().join("new");
    open_write(&client, "n", &created, "append").await.unwrap();
    write_block(&client, "n", None, b"fresh").await.unwrap();
    assert_eq!(std::fs::read(&created).unwrap(), b"fresh");

    open(&client, "r", &path).await.unwrap();
    let error = write_block(&client, "r", None, b"x").await.unwrap_err();
    assert_error(&error, -32600, "file handle `r` is not open for writing");
    let error = write_block(&client, "nope", None, b"x").await.unwrap_err();
    assert_error(&error, -32004, "unknown file handle `nope`");
    let error = write_block(&client, "n", None, &vec![0; MIB + 1])
        .await
        .unwrap_err();
    assert_error(
        &error,
        -32600,
        "file write block length must be between 1 and 1048576",
    );
    let error = client
        .request("fs/writeBlock", json!({"handleId": "n", "chunk": "!!"}))
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32602);

    let error = open_write(&client, "m", &dir.path().join("no/parent"), "replace")
        .await
        .unwrap_err();
    assert_error(&error, -32004, "No such file or directory (os error 2)");
    assert!(!dir.path().join("no").exists());
}
