//! Issue 42, item 2: `fs/watchMissing` and `fs/missingChanged` (`fsWatchMissing`), the same
//! story told to this daemon and to codex's, each in a fixture directory of its own.

use super::{handshaken, Both};
use crate::common::scratch_dir;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// How long a notification that should not come is waited for.
const QUIET: Duration = Duration::from_millis(300);

enum Step {
    /// `fs/watchMissing` with this id, these missing paths and maybe `present` (relative to the
    /// fixture); its result is recorded.
    Watch(u64, &'static [&'static str], Option<&'static str>),
    /// Done to the fixture directory, in a shell.
    Shell(&'static str),
    /// The next notification, awaited as long as any reply, is recorded.
    Notified,
    /// Whatever notification comes within [`QUIET`] (none, when all is well) is recorded.
    Quiet,
}

use Step::*;

/// What the daemon at `url` answered and notified along `steps`, in order.
async fn story(url: &str, steps: &[Step]) -> Vec<Value> {
    let root = scratch_dir();
    let at = |path: &str| format!("file://{}/{path}", root.path().display());
    let client = handshaken(url).await;
    let mut told = Vec::new();
    for step in steps {
        match step {
            Watch(id, missing, present) => {
                let mut params = json!({"watchId": id, "missing": missing.iter().map(|p| at(p)).collect::<Vec<_>>()});
                if let Some(present) = present {
                    params["present"] = json!(at(present));
                }
                told.push(client.call("fs/watchMissing", params).await);
            }
            Shell(command) => shell(root.path(), command),
            Notified => told.push(client.next_notification().await),
            Quiet => told.push(json!(client.try_next_notification(QUIET).await)),
        }
    }
    told
}

fn shell(dir: &Path, command: &str) {
    let status = std::process::Command::new("sh")
        .args(["-ec", command])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(status.success(), "{command}");
}

/// Runs `steps` on both daemons; asserts they told the same and returns what.
async fn same_story(steps: &[Step]) -> Vec<Value> {
    let both = Both::start();
    let [ours, codex] = both.urls();
    let (ours, codex) = (story(ours, steps).await, story(codex, steps).await);
    assert_eq!(ours, codex, "ours (left), codex's (right)");
    ours
}

fn fired(id: u64) -> Value {
    json!({"method": "fs/missingChanged", "params": {"watchId": id}})
}

/// A directory on the way to a missing path appearing fires, once; a sibling does not.
#[tokio::test]
async fn a_missing_path_or_a_directory_on_its_way_appearing_fires_once() {
    let told = same_story(&[
        Watch(1, &["a/b"], None),
        Shell("touch ab other"),
        Quiet,
        Shell("mkdir a"),
        Notified,
        Shell("touch a/b"),
        Quiet,
    ])
    .await;
    assert_eq!(told[0], json!({"watching": true}));
    assert_eq!(told[1], Value::Null, "an unrelated name");
    assert_eq!(told[2], fired(1));
    assert_eq!(told[3], Value::Null, "the watch is over");
}

/// `present` going fires; a change beside it does not.
#[tokio::test]
async fn present_going_away_fires() {
    let told = same_story(&[
        Shell("mkdir -p kept/p"),
        Watch(7, &["a"], Some("kept/p")),
        Shell("touch kept/q"),
        Quiet,
        Shell("rmdir kept/p"),
        Notified,
    ])
    .await;
    assert_eq!(told[0], json!({"watching": true}));
    assert_eq!(told[1], Value::Null);
    assert_eq!(told[2], fired(7));
}

/// A newer id replaces the watch; an older or equal one changes nothing and is not watched.
#[tokio::test]
async fn a_newer_id_replaces_the_watch_and_a_stale_one_is_refused() {
    let told = same_story(&[
        Watch(5, &["old"], None),
        Watch(6, &["new"], None),
        Watch(6, &["again"], None),
        Watch(2, &["stale"], None),
        Shell("touch old stale again"),
        Quiet,
        Shell("touch new"),
        Notified,
    ])
    .await;
    let watching = |w: bool| json!({"watching": w});
    assert_eq!(
        told[..4],
        [
            watching(true),
            watching(true),
            watching(false),
            watching(false)
        ]
    );
    assert_eq!(told[4], Value::Null, "only the newest watch is live");
    assert_eq!(told[5], fired(6));
}

/// Nothing is watched for paths not as described, or too many: `watching: false`, and the
/// watch it replaced is gone.
#[tokio::test]
async fn paths_not_as_described_or_too_many_are_not_watched() {
    let told = same_story(&[
        Shell("mkdir here"),
        Watch(1, &["here"], None),
        Watch(2, &[], None),
        Watch(3, &["a"], Some("gone")),
        Watch(4, &NAMES, None),
        Watch(5, &NAMES[..64], None),
        Watch(6, &["b"], None),
        Watch(7, &["c", "d"], None),
        Watch(8, &NAMES, None),
        Shell("touch c"),
        Quiet,
    ])
    .await;
    let watching: Vec<bool> = told[..8]
        .iter()
        .map(|told| told["watching"].as_bool().unwrap())
        .collect();
    assert_eq!(
        watching,
        [false, false, false, false, true, true, true, false]
    );
    assert_eq!(told[8], Value::Null, "the refused 8 replaced 7");
}

/// 65 names: one more than a watch may cover.
static NAMES: [&str; 65] = [
    "n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11", "n12", "n13", "n14",
    "n15", "n16", "n17", "n18", "n19", "n20", "n21", "n22", "n23", "n24", "n25", "n26", "n27",
    "n28", "n29", "n30", "n31", "n32", "n33", "n34", "n35", "n36", "n37", "n38", "n39", "n40",
    "n41", "n42", "n43", "n44", "n45", "n46", "n47", "n48", "n49", "n50", "n51", "n52", "n53",
    "n54", "n55", "n56", "n57", "n58", "n59", "n60", "n61", "n62", "n63", "n64",
];
