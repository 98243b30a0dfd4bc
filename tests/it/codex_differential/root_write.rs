//! A write grant on `/` with a `none` entry (the capabilities `linuxRootWritePreservesDevices`
//! and `linuxApprovedRootWritePreservesRestrictions`, codex 645b683a9e): on both daemons a
//! write outside the workspace lands, the denied path and a link into it stay denied, `/dev`
//! is the same private minimal one (its entries, `/dev/null` written, a new file in it never
//! on the host, a denied device denied). Stdout and exit code compared.

use super::process::{chunks_until_closed, text};
use super::Both;
use crate::common::Client;
use serde_json::{json, Value};

#[tokio::test]
async fn a_root_write_keeps_devices_and_denied_paths_as_upstream() {
    let (ours, _copies) = crate::sandbox_support::root_write_daemon(&[]);
    let both = Both::with_ours(ours);
    if let Some(why) = crate::sandbox_support::root_write_refusal(both.ours_pid()) {
        // Refused here (sandbox_root_write:: checks the refusal): nothing to compare.
        eprintln!("skipped: this daemon refuses a root write on this host ({why})");
        return;
    }
    let mut outcomes = Vec::new();
    for url in both.urls() {
        // Not `scratch_dir` (in `/dev/shm` where there is one): the test reads `/dev` itself.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (ws, secret) = (root.join("workspace"), root.join("workspace/secret"));
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("s"), "secret").unwrap();
        std::os::unix::fs::symlink(&secret, ws.join("link")).unwrap();
        let outside = root.join("outside.txt");
        let dev_file = format!(
            "/dev/root-write-{}",
            root.file_name().unwrap().to_str().unwrap()
        );
        let script = format!(
            "echo hi > {outside} && echo wrote-outside
cat {ws}/secret/s 2>/dev/null && echo read-denied-path || echo denied-path-refused
cat {ws}/link/s 2>/dev/null && echo read-through-link || echo link-refused
echo x 2>/dev/null > {ws}/link/new && echo wrote-through-link || echo link-write-refused
ls -A /dev | tr '\\n' ' '; echo
echo z > /dev/null && echo dev-null-written
touch {dev_file} && echo dev-file-made
head -c1 /dev/zero 2>/dev/null | wc -c",
            outside = outside.display(),
            ws = ws.display(),
        );
        let entry = |path: Value, access: &str| json!({"path": path, "access": access});
        let sandbox = json!({
            "permissions": {"type": "managed", "network": "restricted", "file_system": {
                "type": "restricted", "entries": [
                    entry(json!({"type": "special", "value": {"kind": "root"}}), "write"),
                    entry(json!({"type": "path", "path": format!("file://{}", secret.display())}), "none"),
                    entry(json!({"type": "path", "path": "file:///dev/zero"}), "none"),
                ]}},
            "cwd": format!("file://{}", ws.display()),
            "workspaceRoots": [format!("file://{}", ws.display())],
            "windowsSandboxLevel": "disabled",
        });
        let start = json!({"processId": "p", "argv": ["/bin/sh", "-c", script],
            "cwd": format!("file://{}", ws.display()),
            "env": {"PATH": "/usr/bin:/bin"}, "tty": false, "sandbox": sandbox});
        let client = Client::connect(url).await;
        client.initialize(None).await.unwrap();
        let started = client.call("process/start", start).await;
        assert_eq!(started["sandboxType"], "linuxSeccomp", "{started}");
        let (chunks, last) = chunks_until_closed(&client, "p").await;
        let on_host = std::path::Path::new(&dev_file).exists();
        let _ = std::fs::remove_file(&dev_file);
        outcomes.push(json!({
            "stdout": text(&chunks, Some("stdout")),
            "exitCode": last["exitCode"],
            "outside": std::fs::read_to_string(&outside).ok(),
            "secretDir": crate::sandbox_support::names_in(&secret),
            "devFileOnHost": on_host,
        }));
    }
    assert_eq!(outcomes[0], outcomes[1], "ours, then codex's");
    let stdout = outcomes[0]["stdout"].as_str().unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "wrote-outside",
            "denied-path-refused",
            "link-refused",
            "link-write-refused",
            "core fd full null ptmx pts random shm stderr stdin stdout tty urandom zero ",
            "dev-null-written",
            "dev-file-made",
            "0",
        ],
        "{stdout}"
    );
    assert_eq!(outcomes[0]["outside"], "hi\n");
    assert_eq!(outcomes[0]["secretDir"], json!(["s"]));
    assert_eq!(outcomes[0]["devFileOnHost"], false);
}
