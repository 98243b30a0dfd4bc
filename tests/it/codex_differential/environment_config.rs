//! Issue 42, item 3: `environmentConfig/read` (`environmentConfigRead`), the same reads asked
//! of this daemon and of codex's, both given one fixture as their codex home and projects.
//! The system layers (`/etc/codex`) are left out: codex's server offers no way to move them, and
//! a test may not write the host's /etc.

use super::handshaken;
use crate::common::codex_peer::CodexPeer;
use crate::common::Daemon;
use serde_json::{json, Value};
use std::path::Path;

/// A codex home trusting `trusted` (with its `.codex` layers at the root and below) and not
/// `untrusted`; the user layer's keys are out of alphabetical order on purpose.
fn fixture(root: &Path) {
    let home = root.join("home");
    let write = |path: &str, text: &str| {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "home/config.toml",
        &format!(
            "zeta = 1\nmodel = \"m\"\n\n[mcp_servers.b]\nurl = \"http://b\"\n\n\
             [mcp_servers.a]\ncommand = \"a\"\n\n[projects.\"{}\"]\ntrust_level = \"trusted\"\n\n\
             [projects.\"{}\"]\ntrust_level = \"untrusted\"\n",
            root.join("trusted").display(),
            root.join("untrusted").display()
        ),
    );
    assert!(home.is_dir());
    write("trusted/.git/HEAD", "ref: refs/heads/main\n");
    write(
        "trusted/.codex/config.toml",
        "alpha = 2\nmodel_provider = \"repo\"\nnotify = [\"x\"]\n\n[mcp_servers]\n\n\
         [features]\nrespect_system_proxy = true\nshell_tool = false\n",
    );
    write(
        "trusted/sub/.codex/config.toml",
        "beta = 3\n\n[mcp_servers.p]\nurl = \"http://p\"\nenabled = true\n",
    );
    write("untrusted/.git/HEAD", "ref: refs/heads/main\n");
    write("untrusted/.codex/config.toml", "alpha = 9\n");
    // A linked worktree of `trusted`: trusted through its repository root.
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(root.join("trusted"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q", "-b", "main", "."]);
    git(&["commit", "-q", "--allow-empty", "-m", "init"]);
    git(&["worktree", "add", "-q", "../linked"]);
    write("linked/.codex/config.toml", "gamma = 4\n");
}

/// What each daemon answered to `reads` (params, `{root}` standing for the fixture).
async fn replies(url: &str, root: &Path, reads: &[Value]) -> Vec<Value> {
    let client = handshaken(url).await;
    let mut told = Vec::new();
    for params in reads {
        let params = params.to_string().replace("{root}", root.to_str().unwrap());
        let reply = client
            .request(
                "environmentConfig/read",
                serde_json::from_str(&params).unwrap(),
            )
            .await;
        told.push(reply.unwrap_or_else(|error| json!({"error": error})));
    }
    told
}

/// Both daemons' replies to `reads`, asserted equal; returns them.
async fn same_replies(reads: &[Value]) -> Vec<Value> {
    same_replies_in(reads, fixture).await
}

/// [`same_replies`] in the fixture `build` makes.
async fn same_replies_in(reads: &[Value], build: impl Fn(&Path)) -> Vec<Value> {
    let root = tempfile::tempdir_in("/var/tmp").unwrap();
    build(root.path());
    let home = root.path().join("home");
    let env = [
        ("CODEX_HOME", home.to_str().unwrap()),
        ("HOME", home.to_str().unwrap()),
    ];
    let ours = Daemon::start_with(&[], &env);
    let codex = CodexPeer::start_with(&[], &env);
    let ours = replies(&ours.url, root.path(), reads).await;
    let codex = replies(&codex.url, root.path(), reads).await;
    assert_eq!(ours, codex, "ours (left), codex's (right)");
    let text = serde_json::to_string(&ours).unwrap();
    serde_json::from_str(&text.replace(root.path().to_str().unwrap(), "{root}")).unwrap()
}

fn read(cwd: &str, config: Value, requirements: Value) -> Value {
    json!({"cwd": format!("file://{{root}}/{cwd}"), "configPaths": config, "requirementsPaths": requirements})
}

/// The user layer, then each trusted project layer from the root down to cwd, each cut to the
/// selected keys in the file's own order; keys a repository may not set are gone; a selected
/// table left empty stays, a layer with nothing selected goes.
#[tokio::test]
async fn config_layers_are_read_in_precedence_and_file_order() {
    let told = same_replies(&[read(
        "trusted/sub/deep",
        json!([
            ["mcp_servers"],
            ["zeta"],
            ["alpha"],
            ["beta"],
            ["model_provider"],
            ["notify"],
            ["features"],
            ["absent"]
        ]),
        json!([["allowed_sandbox_modes"]]),
    )])
    .await;
    let layers = &told[0]["config"]["layers"];
    assert_eq!(
        layers[0],
        json!({"source": "user ({root}/home/config.toml)", "baseDir": "file://{root}/home",
               "toml": "zeta = 1\n\n[mcp_servers.b]\nurl = \"http://b\"\n\n[mcp_servers.a]\ncommand = \"a\"\n"})
    );
    assert_eq!(
        layers[1]["toml"],
        "alpha = 2\n\n[mcp_servers]\n\n[features]\nshell_tool = false\n"
    );
    assert_eq!(
        layers[2]["source"],
        "project ({root}/trusted/sub/.codex/config.toml)"
    );
    assert_eq!(told[0]["config"]["cloudInsertionIndex"], 0);
    assert_eq!(
        told[0]["requirements"],
        json!({"layers": [], "cloudInsertionIndex": 0})
    );
}

/// A key path deeper than a value is: the value is kept whole (it still overrides lower
/// layers); a deeper path into a table keeps only that branch.
#[tokio::test]
async fn a_path_below_a_value_keeps_the_value_and_a_branch_keeps_only_itself() {
    let told = same_replies(&[read(
        "trusted",
        json!([["zeta", "q"], ["mcp_servers", "b", "url"]]),
        json!([]),
    )])
    .await;
    assert_eq!(
        told[0]["config"]["layers"][0]["toml"],
        "zeta = 1\n\n[mcp_servers.b]\nurl = \"http://b\"\n"
    );
}

/// An untrusted project, and a directory outside any project or missing altogether, give the
/// user layer alone.
#[tokio::test]
async fn untrusted_and_unknown_projects_add_no_layer() {
    let told = same_replies(&[
        read("untrusted", json!([["alpha"], ["zeta"]]), json!([])),
        read("nowhere/at/all", json!([["alpha"], ["zeta"]]), json!([])),
    ])
    .await;
    for reply in &told {
        let layers = reply["config"]["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1, "{reply}");
    }
}

/// A linked worktree (whose own path no `projects` entry names) is trusted through its main
/// checkout.
#[tokio::test]
async fn a_linked_worktree_is_trusted_through_its_main_checkout() {
    let told = same_replies(&[read("linked", json!([["gamma"]]), json!([]))]).await;
    assert_eq!(
        told[0]["config"]["layers"][0]["toml"], "gamma = 4\n",
        "{told:?}"
    );
}

/// The refusals: no path at all, an empty path, a cwd that is not an absolute file URI, a
/// missing member.
#[tokio::test]
async fn bad_reads_are_refused_as_codex_refuses_them() {
    let told = same_replies(&[
        read("trusted", json!([]), json!([])),
        read("trusted", json!([["alpha"], []]), json!([])),
        json!({"cwd": "relative/dir", "configPaths": [["alpha"]], "requirementsPaths": []}),
        json!({"configPaths": [["alpha"]], "requirementsPaths": []}),
    ])
    .await;
    let messages: Vec<_> = told.iter().map(|t| t["error"]["message"].clone()).collect();
    assert_eq!(
        messages,
        [
            "at least one config or requirements path is required",
            "TOML paths must contain at least one key segment",
            "invalid URI: relative URL without a base",
            "missing field `cwd`",
        ]
    );
    assert!(
        told.iter().all(|t| t["error"]["code"] == -32602),
        "{told:?}"
    );
}

/// A user config that is not TOML fails the read, naming the file, line and column (counted in
/// characters, past a multi-byte one).
#[tokio::test]
async fn a_broken_user_config_is_named_where_it_breaks() {
    let told = same_replies_in(&[read("", json!([["a"]]), json!([]))], |root| {
        std::fs::create_dir(root.join("home")).unwrap();
        std::fs::write(root.join("home/config.toml"), "ok = 1\nnamé = \"x\" = 1\n").unwrap();
    })
    .await;
    assert_eq!(
        told[0]["error"],
        json!({"code": -32603, "message": "failed to load executor-local config: \
            {root}/home/config.toml:2:12: unexpected key or value, expected newline, `#`"})
    );
}
