//! Attacks on shell snapshots (`process/start.shellSnapshot`) that codex's server has no
//! counterpart for (tests/it/codex_differential/shell_snapshot.rs compares the rest): a login
//! profile that spells out a credential the `envPolicy` withholds, and one that floods the
//! capture.

use crate::common::{Client, Daemon};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

fn start(home: &Path, id: &str, scope: &str, command: &str, keep_credentials: bool) -> Value {
    json!({"processId": id, "argv": ["/bin/bash", "-lc", command], "cwd": "file:///",
        "env": {"HOME": home, "PATH": "/usr/bin:/bin"}, "tty": false,
        "envPolicy": {"inherit": "core", "ignoreDefaultExcludes": keep_credentials,
            "exclude": [], "set": {}, "includeOnly": []},
        "shellSnapshot": {"scopeId": scope, "shell": {"name": "bash", "path": "/bin/bash"}}})
}

/// What `id` wrote on stdout until it closed.
async fn stdout(client: &Client, id: &str) -> String {
    let mut out = Vec::new();
    let mut after = Value::Null;
    loop {
        let read = json!({"processId": id, "afterSeq": after, "waitMs": 2_000});
        let read = client.call("process/read", read).await;
        for chunk in read["chunks"].as_array().unwrap() {
            if chunk["stream"] == "stdout" {
                out.extend(crate::common::unb64(&chunk["chunk"]));
            }
        }
        if read["closed"] == true {
            return String::from_utf8(out).unwrap();
        }
        after = json!(read["nextSeq"].as_u64().unwrap() - 1);
    }
}

async fn client(daemon: &Daemon) -> Client {
    let client = Client::connect(&daemon.url).await;
    client.initialize(None).await.unwrap();
    client
}

/// The profile exports a token the default excludes withhold and defines a function that
/// spells it out: replaying the function would hand the command the token, so the snapshot
/// is not used at all (the command runs in a plain login shell, which does not read
/// `.bashrc`). Where the policy keeps the token, the same snapshot is used.
#[tokio::test]
async fn a_function_spelling_out_a_withheld_credential_is_not_replayed() {
    let home = crate::common::scratch_dir();
    std::fs::write(
        home.path().join(".bashrc"),
        "export GH_TOKEN=ghp_0123456789abcdef\nlogin() { echo \"auth ghp_0123456789abcdef\"; }\n\
         greet() { echo hello; }\n",
    )
    .unwrap();
    let daemon = Daemon::start();
    let client = client(&daemon).await;
    let command = "echo token=[$GH_TOKEN]; type login >/dev/null 2>&1 && login; \
        type greet >/dev/null 2>&1 && greet; echo done";
    let withheld = start(home.path(), "withheld", "a", command, false);
    client.call("process/start", withheld).await;
    assert_eq!(stdout(&client, "withheld").await, "token=[]\ndone\n");
    let kept = start(home.path(), "kept", "b", command, true);
    client.call("process/start", kept).await;
    assert_eq!(
        stdout(&client, "kept").await,
        "token=[ghp_0123456789abcdef]\nauth ghp_0123456789abcdef\nhello\ndone\n"
    );
}

/// A profile that prints more than a capture may (4 MiB): the capture is cut and its tree
/// killed, and the start runs without a snapshot at once rather than after the timeout.
#[tokio::test]
async fn a_flooding_profile_is_cut_and_falls_back() {
    let home = crate::common::scratch_dir();
    let profile = "head -c 6000000 /dev/zero; export PROFILE_VAR=never\n";
    std::fs::write(home.path().join(".bashrc"), profile).unwrap();
    let daemon = Daemon::start();
    let client = client(&daemon).await;
    let began = Instant::now();
    let flood = start(home.path(), "flood", "a", "echo var=[$PROFILE_VAR]", false);
    client.call("process/start", flood).await;
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(stdout(&client, "flood").await, "var=[]\n");
}
