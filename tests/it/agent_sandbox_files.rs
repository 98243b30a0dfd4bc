//! agent-sandbox's legacy file routes (`/upload`, `/download`, `/list`, `/exists`): confined to
//! the base directory, spoken over real sockets to the real binary.

use crate::agent_sandbox::{json_of, runtime_daemon, send, upload};
use crate::common::*;

#[test]
fn files_round_trip_under_the_base_dir() {
    let base = scratch_dir();
    let daemon = runtime_daemon(base.path(), &[]);
    assert_eq!(upload(&daemon, "data/in put.csv", b"a,b\n").0, 200);
    assert_eq!(
        std::fs::read(base.path().join("data/in put.csv")).unwrap(),
        b"a,b\n"
    );
    let (status, body) = send(&daemon, "GET", "/download/data/in%20put.csv", &[], b"");
    assert_eq!((status, body.as_str()), (200, "a,b\n"));
    // A leading slash is the base's, as the reference strips it.
    assert_eq!(
        send(&daemon, "GET", "/download//data/in%20put.csv", &[], b"").0,
        200
    );
    assert_eq!(send(&daemon, "GET", "/download/missing", &[], b"").0, 404);
    let (status, body) = send(&daemon, "GET", "/list/data", &[], b"");
    assert_eq!(status, 200);
    let listing = json_of(&body);
    assert_eq!(listing[0]["name"], "in put.csv");
    assert_eq!(listing[0]["size"], 4);
    assert_eq!(listing[0]["type"], "file");
    assert_eq!(
        send(&daemon, "GET", "/list/data/in%20put.csv", &[], b"").0,
        404
    );
    let (_, body) = send(&daemon, "GET", "/exists/data", &[], b"");
    assert_eq!(json_of(&body)["exists"], true);
    let (_, body) = send(&daemon, "GET", "/exists/nothing", &[], b"");
    assert_eq!(json_of(&body)["exists"], false);
}

#[test]
fn file_routes_refuse_every_way_out_of_the_base_dir() {
    let outside = scratch_dir();
    std::fs::write(outside.path().join("secret"), "s3cret data").unwrap();
    let base = scratch_dir();
    std::os::unix::fs::symlink(outside.path(), base.path().join("link")).unwrap();
    std::os::unix::fs::symlink("../..", base.path().join("up")).unwrap();
    let daemon = runtime_daemon(base.path(), &[]);
    let secret = format!("{}/secret", outside.path().display());
    for path in [
        "/download/..%2F..%2F..%2Fetc%2Fpasswd".to_owned(),
        "/download/%252e%252e%252f%252e%252e%252fetc%252fpasswd".to_owned(),
        "/download/link/secret".to_owned(),
        "/download/up/etc/passwd".to_owned(),
        "/list/link".to_owned(),
        "/list/..%2F".to_owned(),
        "/exists/link/secret".to_owned(),
    ] {
        let (status, body) = send(&daemon, "GET", &path, &[], b"");
        assert_eq!(status, 403, "{path}: {body}");
        assert!(!body.contains("s3cret data") && !body.contains("root:"));
    }
    // An absolute path is the base's own.
    assert_eq!(
        send(&daemon, "GET", &format!("/download/{secret}"), &[], b"").0,
        404
    );
    for name in [
        "../escaped",
        "link/planted",
        "link/new/planted",
        "up/tmp/planted",
    ] {
        assert_eq!(upload(&daemon, name, b"x").0, 403, "{name}");
    }
    assert!(!outside.path().join("planted").exists());
    assert!(!outside.path().join("new").exists());
}
