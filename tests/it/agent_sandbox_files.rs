//! agent-sandbox's legacy file routes (`/upload`, `/download`, `/list`, `/exists`): confined to
//! the base directory, and under `--runtime-sandbox` to what the profile grants, spoken over
//! real sockets to the real binary, with the real sandbox.

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

#[test]
fn the_runtime_sandbox_profile_confines_the_file_routes() {
    use crate::sandbox_support::{entry, path};
    let dir = scratch_dir();
    let base = dir.path().join("app");
    let (writable, private) = (base.join("writable"), base.join("private"));
    let outside = dir.path().join("outside");
    for made in [&writable, &private, &outside] {
        std::fs::create_dir_all(made).unwrap();
    }
    std::fs::write(base.join("readme"), "read me").unwrap();
    std::fs::write(private.join("secret"), "s3cret data").unwrap();
    // Leads out of the base to where the profile lets write: the base still refuses it.
    std::os::unix::fs::symlink("../../outside", writable.join("out")).unwrap();
    let profile = serde_json::json!({"type": "managed", "network": "restricted", "file_system": {
    "type": "restricted", "entries": [
        entry(path(&base), "read"),
        entry(path(&writable), "write"),
        entry(path(&private), "none"),
        entry(path(&outside), "write"),
    ]}});
    let profile_path = dir.path().join("profile.json");
    std::fs::write(&profile_path, profile.to_string()).unwrap();
    let daemon = runtime_daemon(
        &base,
        &["--runtime-sandbox", profile_path.to_str().unwrap()],
    );
    assert_eq!(upload(&daemon, "writable/new/in.txt", b"in").0, 200);
    assert_eq!(std::fs::read(writable.join("new/in.txt")).unwrap(), b"in");
    for name in ["out.txt", "fresh/out.txt", "readme", "private/planted"] {
        let (status, body) = upload(&daemon, name, b"x");
        assert_eq!(status, 403, "{name}: {body}");
        assert!(body.contains("does not allow writing"), "{name}: {body}");
    }
    assert_eq!(upload(&daemon, "writable/out/planted", b"x").0, 403);
    let left: Vec<_> = (std::fs::read_dir(&base).unwrap())
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 3, "a refused upload left {left:?}");
    assert!(!private.join("planted").exists());
    assert_eq!(
        std::fs::read_to_string(base.join("readme")).unwrap(),
        "read me"
    );
    // (The sandbox's placeholders for protected names sit in a write root meanwhile.)
    assert!(!outside.join("planted").exists());
    let (status, body) = send(&daemon, "GET", "/download/readme", &[], b"");
    assert_eq!((status, body.as_str()), (200, "read me"));
    let (status, body) = send(&daemon, "GET", "/list/writable", &[], b"");
    assert_eq!(status, 200, "{body}");
    let names: Vec<_> = (json_of(&body).as_array().unwrap().iter())
        .map(|entry| entry["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&"new".to_owned()), "{body}");
    for (path, exists) in [("readme", true), ("writable/new", true), ("missing", false)] {
        let (status, body) = send(&daemon, "GET", &format!("/exists/{path}"), &[], b"");
        assert_eq!(
            (status, json_of(&body)["exists"].as_bool()),
            (200, Some(exists))
        );
    }
    for path in [
        "/download/private/secret",
        "/list/private",
        "/exists/private",
        "/exists/private/secret",
    ] {
        let (status, body) = send(&daemon, "GET", path, &[], b"");
        assert_eq!(status, 403, "{path}: {body}");
        assert!(body.contains("does not allow reading"), "{path}: {body}");
        assert!(!body.contains("s3cret data"), "{path}: {body}");
    }
}
