//! `process/start.shellSnapshot` (capability `shellSnapshotV2`) beside codex's server: the
//! login profile's exports and functions reach the command, filtered by `envPolicy`; the
//! snapshot's own variables do not; one capture serves concurrent starts of a scope; a failing
//! or hanging profile falls back to a plain start within upstream's budget (three captures, a
//! second apart, each at most 10 s); a sandboxed capture is confined as its command is; bad
//! requests are refused alike. Each daemon is driven by a client of its own and the outcomes
//! compared.

use super::process::{chunks_until_closed, text};
use super::{assert_same, handshaken, nothing, Both, Scenario};
use crate::common::Client;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// The profile the snapshot captures: exports (one the policy excludes by name, one by the
/// default `*TOKEN*` exclude), a function, an alias; each capture counted in `$HOME/captures`.
const PROFILE: &str = "printf x >> \"$HOME/captures\"
export PROFILE_VAR=from-profile
export PROFILE_SECRET=hidden-by-exclude
export API_TOKEN=hidden-by-default-excludes
greet() { echo \"hello $1\"; }
alias ll='ls -l'
";

/// What a command reports of its environment: the profile's variable and function, the
/// excluded credentials, the snapshot's own carriers, the request's own variable.
const REPORT: &str = "echo var=$PROFILE_VAR; greet x; echo secret=$PROFILE_SECRET \
    token=$API_TOKEN; env | grep -c SNAPSHOT; echo over=$OVER; type ll";

fn home(root: &Path, profile: &str) {
    std::fs::create_dir(root.join("home")).unwrap();
    std::fs::write(root.join("home/.bashrc"), profile).unwrap();
}

fn start(root: &str, id: &str, command: &str) -> Value {
    json!({"processId": id, "argv": ["/bin/bash", "-lc", command], "cwd": format!("file://{root}"),
        "env": {"HOME": format!("{root}/home"), "PATH": "/usr/bin:/bin", "OVER": "request"},
        "tty": false,
        "envPolicy": {"inherit": "none", "ignoreDefaultExcludes": false,
            "exclude": ["PROFILE_SECRET"], "set": {}, "includeOnly": []},
        "shellSnapshot": {"scopeId": "thread-1", "shell": {"name": "bash", "path": "/bin/bash"}}})
}

/// Starts `starts` at once on a fresh connection, then reads each to its close: stdout,
/// stderr and exit code per start, and how many captures the profile counted.
async fn outcomes(client: &Client, root: &Path, starts: &[Value]) -> (Vec<Value>, String) {
    let replies = starts
        .iter()
        .map(|s| client.call("process/start", s.clone()));
    futures::future::join_all(replies).await;
    let mut outcomes = Vec::new();
    for start in starts {
        let (chunks, last) =
            chunks_until_closed(client, start["processId"].as_str().unwrap()).await;
        outcomes.push(json!({"stdout": text(&chunks, Some("stdout")),
            "stderr": text(&chunks, Some("stderr")), "exitCode": last["exitCode"]}));
    }
    let captures = std::fs::read_to_string(root.join("home/captures")).unwrap_or_default();
    (outcomes, captures)
}

/// Runs `scenario` (given each daemon's fixture directory and a client) on both daemons,
/// each with its own fixture built by `fixture`; (ours, codex).
async fn on_both<F, R>(fixture: impl Fn(&Path), scenario: F) -> (R, R)
where
    F: AsyncFn(&Client, &Path) -> R,
{
    let both = Both::start();
    let mut results = Vec::new();
    for url in both.urls() {
        let dir = crate::common::scratch_dir();
        fixture(dir.path());
        let client = handshaken(url).await;
        results.push(scenario(&client, dir.path()).await);
    }
    let codex = results.pop().unwrap();
    (results.pop().unwrap(), codex)
}

/// Three concurrent starts of one scope share one capture; a fourth, after the profile
/// changed, still runs in the first capture. Each command sees the profile's variable and
/// function and the request's own variable; not the credentials the policy excludes, not
/// the snapshot's carriers, not the profile's alias (a non-interactive bash has none).
#[tokio::test]
async fn a_login_profile_reaches_the_command_once_per_scope_alike() {
    let (ours, codex) = on_both(
        |root| home(root, PROFILE),
        async |client: &Client, root: &Path| {
            let dir = root.to_str().unwrap();
            let starts: Vec<Value> = ["a", "b", "c"]
                .iter()
                .map(|id| start(dir, id, REPORT))
                .collect();
            let (mut first, captures) = outcomes(client, root, &starts).await;
            std::fs::write(root.join("home/.bashrc"), "export PROFILE_VAR=changed\n").unwrap();
            let (later, _) = outcomes(client, root, &[start(dir, "d", REPORT)]).await;
            first.extend(later);
            (first, captures)
        },
    )
    .await;
    assert_eq!(ours, codex);
    let (outcomes, captures) = ours;
    assert_eq!(captures, "x", "one capture for the scope");
    for outcome in &outcomes {
        assert_eq!(
            outcome["stdout"], "var=from-profile\nhello x\nsecret= token=\n0\nover=request\n",
            "{outcome}"
        );
        assert_eq!(
            outcome["stderr"],
            "/bin/bash: line 3: type: ll: not found\n"
        );
    }
}

/// Without `shellSnapshot` the same command runs in a plain login shell, which does not read
/// `.bashrc`: the snapshot is what brought the profile in (what today's main did with it).
#[tokio::test]
async fn without_a_snapshot_the_profile_is_not_read() {
    let (ours, codex) = on_both(
        |root| home(root, PROFILE),
        async |client: &Client, root: &Path| {
            let mut plain = start(root.to_str().unwrap(), "plain", "echo var=$PROFILE_VAR");
            plain.as_object_mut().unwrap().remove("shellSnapshot");
            outcomes(client, root, &[plain]).await
        },
    )
    .await;
    assert_eq!(ours, codex);
    assert_eq!(ours.0[0]["stdout"], "var=\n");
    assert_eq!(ours.1, "");
}

/// A profile that exits non-zero: the starts wait for the capture and run without a
/// snapshot; the failure is shared for a second, then tried again, three times in all.
#[tokio::test]
async fn a_failing_profile_falls_back_within_the_budget_alike() {
    let profile = "printf x >> \"$HOME/captures\"\nexport PROFILE_VAR=never\nexit 7\n";
    let (ours, codex) = on_both(
        |root| home(root, profile),
        async |client: &Client, root: &Path| {
            let dir = root.to_str().unwrap();
            let command = "echo var=$PROFILE_VAR";
            let mut all = Vec::new();
            let first = [start(dir, "a", command), start(dir, "b", command)];
            all.extend(outcomes(client, root, &first).await.0);
            for id in ["c", "d", "e", "f"] {
                tokio::time::sleep(Duration::from_millis(1_100)).await;
                all.extend(outcomes(client, root, &[start(dir, id, command)]).await.0);
            }
            let captures = std::fs::read_to_string(root.join("home/captures")).unwrap();
            (all, captures)
        },
    )
    .await;
    assert_eq!(ours, codex);
    assert_eq!(ours.1, "xxx", "three captures, then none");
    assert!(ours
        .0
        .iter()
        .all(|o| o["stdout"] == "var=\n" && o["exitCode"] == 0));
}

/// A profile that never ends: the start waits out the capture's 10 s, then runs without a
/// snapshot; the next start, within the backoff, does not wait. Ours leaves nothing of the
/// capture's tree behind.
#[tokio::test]
async fn a_hanging_profile_falls_back_after_the_capture_timeout_alike() {
    // The capture's `sleep`, told apart by its argument.
    let marker = format!("999.{}", std::process::id());
    let profile = format!("sleep {marker}\n");
    let (ours, codex) = on_both(
        |root| home(root, &profile),
        async |client: &Client, root: &Path| {
            let dir = root.to_str().unwrap();
            let began = Instant::now();
            let (first, _) = outcomes(client, root, &[start(dir, "a", "echo ran")]).await;
            let waited = began.elapsed();
            let began = Instant::now();
            let (second, _) = outcomes(client, root, &[start(dir, "b", "echo ran")]).await;
            assert!(began.elapsed() < Duration::from_secs(2), "no second wait");
            assert!(waited < Duration::from_secs(16), "{waited:?}");
            (first, second, waited >= Duration::from_secs(9))
        },
    )
    .await;
    assert_eq!(ours, codex);
    assert_eq!(ours.0[0]["stdout"], "ran\n");
    assert!(ours.2, "the start waited for the capture's timeout");
    let leftovers = std::process::Command::new("pgrep")
        .args(["-f", &marker])
        .output()
        .unwrap();
    // codex's server kills only the capture's shell: its `sleep` may outlive it, but not ours.
    let pids = String::from_utf8_lossy(&leftovers.stdout).into_owned();
    let clean = ours_left_nothing(&pids);
    for pid in pids.split_whitespace() {
        let _ = std::process::Command::new("kill").arg(pid).status();
    }
    assert!(clean, "capture processes left: {pids}");
}

/// Whether none of `pids` is a child of ours: each daemon's trees are its own, so a leftover
/// of ours would be a process whose ancestry leads to our binary.
fn ours_left_nothing(pids: &str) -> bool {
    pids.split_whitespace().all(|pid| {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        let parent = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = parent.split_whitespace().nth(3).unwrap_or("0");
        let parent_exe = std::fs::read_link(format!("/proc/{ppid}/exe")).unwrap_or_default();
        !exe.ends_with("exec-server") && !parent_exe.ends_with("exec-server")
    })
}

/// A sandboxed start's capture runs in the same sandbox: a profile that reads a file the
/// sandbox denies exports nothing of it, and one that writes outside writes nothing, while
/// its function still reaches the command.
#[tokio::test]
async fn a_sandboxed_capture_is_confined_as_its_command_alike() {
    let fixture = |root: &Path| {
        let profile = format!(
            "export LEAK=\"$(cat {0}/denied.txt 2>/dev/null)\"\necho escaped > {0}/outside.txt\n\
             greet() {{ echo \"hello $1\"; }}\n",
            root.display()
        );
        std::fs::create_dir(root.join("workspace")).unwrap();
        std::fs::create_dir(root.join("workspace/home")).unwrap();
        std::fs::write(root.join("workspace/home/.bashrc"), profile).unwrap();
        std::fs::write(root.join("denied.txt"), "the-secret").unwrap();
    };
    let (ours, codex) = on_both(fixture, async |client: &Client, root: &Path| {
        let dir = root.to_str().unwrap();
        let entry = |kind: &str, access: &str| {
            json!({"path": {"type": "special", "value": {"kind": kind}}, "access": access})
        };
        let workspace = format!("file://{dir}/workspace");
        let sandbox = json!({"permissions": {"type": "managed", "network": "restricted",
            "file_system": {"type": "restricted",
                "entries": [entry("minimal", "read"), entry("project_roots", "write")]}},
            "cwd": workspace, "workspaceRoots": [workspace], "windowsSandboxLevel": "disabled"});
        let mut start = start(dir, "s", "echo leak=$LEAK; greet x");
        start["cwd"] = json!(workspace);
        start["env"]["HOME"] = json!(format!("{dir}/workspace/home"));
        start["sandbox"] = sandbox;
        let (outcomes, _) = outcomes(client, root, &[start]).await;
        (outcomes, root.join("outside.txt").exists())
    })
    .await;
    assert_eq!(ours, codex);
    assert_eq!(ours.0[0]["stdout"], "leak=\nhello x\n", "{:?}", ours.0);
    assert!(!ours.1, "the capture wrote outside its sandbox");
}

/// `sh` (dash here): the capture reads `$ENV`, not `.bashrc`; its exports and options reach
/// the command (dash cannot list functions, so none do, on either server), and the
/// command's errors name its line as codex's restore script does.
#[tokio::test]
async fn an_sh_snapshot_reads_env_alike() {
    let fixture = |root: &Path| {
        let rc = "export SH_VAR=from-env-file\nhi() { echo \"hi $1\"; }\nset -o noglob\n";
        std::fs::write(root.join("envrc"), rc).unwrap();
    };
    let (ours, codex) = on_both(fixture, async |client: &Client, root: &Path| {
        let dir = root.to_str().unwrap();
        let start = json!({"processId": "sh", "cwd": format!("file://{dir}"), "tty": false,
            "argv": ["/bin/sh", "-lc", "echo var=$SH_VAR; hi there; set -o | grep -c 'noglob.*on'; echo *"],
            "env": {"HOME": dir, "PATH": "/usr/bin:/bin", "ENV": format!("{dir}/envrc")},
            "shellSnapshot": {"scopeId": "s", "shell": {"name": "sh", "path": "/bin/sh"}}});
        outcomes(client, root, &[start]).await.0
    })
    .await;
    assert_eq!(ours, codex);
    assert_eq!(ours[0]["stdout"], "var=from-env-file\n1\n*\n", "{ours:?}");
}

/// Upstream's checks, in its order: the scope (empty, over 256 bytes), then whether the
/// command is the shell's `-lc` (a `-c` command runs as it is, whatever the shell's name),
/// then the shell's name; a missing `path` is the decoder's.
#[tokio::test]
async fn bad_snapshot_requests_are_refused_alike() {
    let request = |id: &str, flag: &str, scope: &str, shell: Value| {
        json!({"processId": id, "argv": ["/bin/bash", flag, "true"], "cwd": "file:///",
            "env": {}, "tty": false, "shellSnapshot": {"scopeId": scope, "shell": shell}})
    };
    let bash = json!({"name": "bash", "path": "/bin/bash"});
    let fish = json!({"name": "fish", "path": "/bin/bash"});
    let long = "s".repeat(257);
    let scenario = Scenario::initialized()
        .replies_only()
        .request(1, "process/start", request("a", "-lc", "", bash.clone()))
        .request(2, "process/start", request("b", "-lc", &long, bash))
        .request(3, "process/start", request("c", "-lc", "s", fish.clone()))
        .request(4, "process/start", request("d", "-c", "s", fish))
        .request(
            5,
            "process/start",
            request("e", "-lc", "s", json!({"name": "bash"})),
        )
        .then();
    let replies = assert_same(&scenario, nothing).await;
    assert_eq!(
        replies[0]["error"]["message"],
        "shell snapshot scope must be non-empty and at most 256 bytes"
    );
    assert_eq!(
        replies[2]["error"]["message"],
        "shell snapshots are unsupported for shell `fish`"
    );
    assert_eq!(replies[3]["result"]["processId"], "d");
}
