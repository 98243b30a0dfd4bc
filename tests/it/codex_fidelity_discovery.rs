//! `capabilityRoots/discoverV1` (issue 29, gap 7), after codex's
//! `codex-rs/exec-server/tests/capability_discovery.rs`: the same roots asked of this daemon
//! and of codex's own exec-server (`common::codex_peer`), the whole results compared.

use crate::common::codex_peer::CodexPeer;
use crate::common::{Client, Daemon, TIMEOUT};
use crate::sandbox_support::{entry, restricted, special, uri, Dirs};
use serde_json::{json, Value};
use std::path::Path;

const METHOD: &str = "capabilityRoots/discoverV1";

/// Both daemons' replies to `params`: (ours, codex's).
async fn both_discover(params: &Value) -> (Result<Value, Value>, Result<Value, Value>) {
    let codex = CodexPeer::start(&[]);
    let ours = Daemon::start();
    let mut replies = Vec::new();
    for url in [&ours.url, &codex.url] {
        let client = Client::connect(url).await;
        client.initialize(None).await.expect("initialize");
        let reply = tokio::time::timeout(TIMEOUT, client.request(METHOD, params.clone()))
            .await
            .expect("reply in time");
        replies.push(reply);
    }
    let codex_reply = replies.pop().unwrap();
    (replies.pop().unwrap(), codex_reply)
}

fn write(root: &Path, relative: &str, contents: impl AsRef<[u8]>) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
}

fn root(id: &str, path: &Path) -> Value {
    json!({"id": id, "path": uri(path)})
}

/// The roots of the fixture below `dir`, each showing one rule.
fn fixture(dir: &Path) -> Vec<Value> {
    // A codex plugin naming its MCP and apps files, with skills (one with metadata).
    let plugin = dir.join("plugin");
    write(
        &plugin,
        ".codex-plugin/plugin.json",
        r#"{"name":"p","mcpServers":"./mcp.json","apps":"./apps.json"}"#,
    );
    write(
        &plugin,
        ".claude-plugin/plugin.json",
        r#"{"name":"second choice"}"#,
    );
    write(&plugin, "mcp.json", r#"{"mcpServers":{}}"#);
    write(&plugin, ".mcp.json", r#"{"not":"read"}"#);
    write(&plugin, "apps.json", "{}");
    write(&plugin, "skills/a/SKILL.md", "# A\n");
    write(&plugin, "skills/a/agents/openai.yaml", "interface: {}\n");
    write(&plugin, "skills/b/SKILL.md", "# B\n");
    // The Cursor layout, with inline MCP servers: no MCP file, not even `.mcp.json`.
    let cursor = dir.join("cursor");
    write(
        &cursor,
        ".cursor-plugin/plugin.json",
        r#"{"name":"c","mcpServers":{"s":{"command":"x"}}}"#,
    );
    write(&cursor, ".mcp.json", r#"{"mcpServers":{"d":{}}}"#);
    write(&cursor, "skills/c/SKILL.md", "# C\n");
    // Declared paths that are refused fall back to the default `.mcp.json`.
    let refused = dir.join("refused");
    write(
        &refused,
        ".claude-plugin/plugin.json",
        r#"{"mcpServers":"mcp.json","apps":"./../x.json"}"#,
    );
    write(&refused, ".mcp.json", "{}");
    // A root inside a plugin takes its namespace from the plugin's manifest.
    let inherits = dir.join("plugin/skills");
    // Hidden directories are entered; the depth limit; non-UTF-8 and oversized files.
    let odd = dir.join("odd");
    write(&odd, ".hidden/s/SKILL.md", "# hidden\n");
    let mut deep = String::new();
    for level in 1..=9 {
        deep.push_str(&format!("{level}/"));
        write(
            &odd,
            &format!("deep/{deep}SKILL.md"),
            format!("# {level}\n"),
        );
    }
    write(&odd, "bad/SKILL.md", [0xff, 0xfe]);
    write(&odd, "big/SKILL.md", vec![b'a'; 1024 * 1024 + 1]);
    // Several plugins below one root: one namespace each, by directory.
    let many = dir.to_path_buf();
    let file = dir.join("plugin/mcp.json");
    let missing = dir.join("missing");
    vec![
        root("plugin", &plugin),
        root("cursor", &cursor),
        root("refused", &refused),
        root("inherits", &inherits),
        root("odd", &odd),
        root("many", &many),
        root("file", &file),
        root("missing", &missing),
    ]
}

#[tokio::test]
async fn capability_roots_discover_skills_plugins_and_mcp_config_as_codex_does() {
    let dir = tempfile::tempdir().unwrap();
    let params = json!({"roots": fixture(dir.path())});
    let (ours, codex) = both_discover(&params).await;
    let (ours, codex) = (ours.expect("ours"), codex.expect("codex"));
    assert_eq!(ours, codex, "ours\n{ours:#}\ncodex\n{codex:#}");
    // And what that is, so a change on both sides is seen too.
    let roots = ours["roots"].as_array().unwrap();
    let by_id = |id: &str| roots.iter().find(|r| r["id"] == id).unwrap();
    let plugin = &by_id("plugin")["plugin"];
    assert!(plugin["mcpConfig"]["path"]
        .as_str()
        .unwrap()
        .ends_with("/plugin/mcp.json"));
    assert_eq!(plugin["appsConfig"]["contents"], "{}");
    assert_eq!(
        by_id("plugin")["skills"][0]["metadata"]["contents"],
        "interface: {}\n"
    );
    let cursor = by_id("cursor");
    assert!(cursor["plugin"]["manifest"]["path"]
        .as_str()
        .unwrap()
        .ends_with("/.cursor-plugin/plugin.json"));
    assert_eq!(cursor["plugin"]["mcpConfig"], Value::Null);
    assert_eq!(by_id("refused")["warnings"].as_array().unwrap().len(), 2);
    assert_eq!(by_id("inherits")["plugin"], Value::Null);
    assert_eq!(
        by_id("inherits")["namespaceManifests"][0],
        plugin["manifest"]
    );
    let odd_skills = by_id("odd")["skills"].as_array().unwrap().len();
    assert_eq!(
        odd_skills,
        1 + 5,
        "the hidden skill and 5 of the deep ones: odd/deep/1/SKILL.md is 3 levels down, and \
         codex scans 6 levels counted from 0"
    );
    assert_eq!(
        by_id("many")["namespaceManifests"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert!(by_id("file")["error"]
        .as_str()
        .unwrap()
        .ends_with("is not a directory"));
    assert!(by_id("missing")["error"]
        .as_str()
        .unwrap()
        .starts_with("failed to inspect capability root"));
}

#[tokio::test]
async fn capability_roots_discover_refuses_more_than_128_roots() {
    let dir = tempfile::tempdir().unwrap();
    let roots: Vec<Value> = (0..129).map(|i| root(&i.to_string(), dir.path())).collect();
    let (ours, codex) = both_discover(&json!({"roots": roots})).await;
    let (ours, codex) = (ours.unwrap_err(), codex.unwrap_err());
    assert_eq!(ours, codex);
    assert_eq!(ours["code"], -32600);
    assert_eq!(
        ours["message"],
        "capability root discovery accepts at most 128 roots"
    );
}

#[tokio::test]
async fn capability_roots_discover_reads_through_the_roots_sandbox() {
    let d = Dirs::new();
    write(&d.ws, "skills/in/SKILL.md", "# inside\n");
    // The sandbox reads only the workspace (and the platform's files): a skill whose file is a
    // link to elsewhere is left out, as a missing file is, saying nothing of where it points.
    std::fs::write(d.out("secret.md"), "# outside\n").unwrap();
    std::fs::create_dir_all(d.ws("skills/out")).unwrap();
    std::os::unix::fs::symlink(d.out("secret.md"), d.ws("skills/out/SKILL.md")).unwrap();
    let sandbox = restricted(
        &d.ws,
        vec![
            entry(special("minimal"), "read"),
            entry(special("project_roots"), "write"),
        ],
        "restricted",
    );
    let mut sandboxed = root("ws", &d.ws);
    sandboxed["sandbox"] = sandbox.clone();
    // A root the sandbox does not let it read at all.
    std::fs::create_dir_all(d.out("skills/x")).unwrap();
    std::fs::write(d.out("skills/x/SKILL.md"), "# x\n").unwrap();
    let mut denied = root("out", &d.out(""));
    denied["sandbox"] = sandbox;
    let (ours, codex) = both_discover(&json!({"roots": [sandboxed, denied]})).await;
    let (ours, codex) = (ours.expect("ours"), codex.expect("codex"));
    let found = &ours["roots"][0];
    assert_eq!(
        found, &codex["roots"][0],
        "ours\n{ours:#}\ncodex\n{codex:#}"
    );
    let skills = found["skills"].as_array().unwrap();
    assert_eq!(skills.len(), 1, "{found:#}");
    assert_eq!(skills[0]["instructions"]["contents"], "# inside\n");
    assert_eq!(found["warnings"], json!([]));
    // Nothing read from the denied root by either. How it is said differs with the sandbox's
    // mechanism (docs/protocol.md): codex's mount namespace shows it as missing; under our
    // Landlock it exists and its scan is refused.
    let (ours, codex) = (&ours["roots"][1], &codex["roots"][1]);
    assert_eq!(ours["skills"], json!([]), "{ours:#}");
    assert_eq!(codex["skills"], json!([]), "{codex:#}");
    let missing = codex["error"].as_str().unwrap();
    assert!(
        missing.ends_with("No such file or directory (os error 2)"),
        "{codex:#}"
    );
    let refused = ours["warnings"][0].as_str().unwrap();
    assert!(
        refused.ends_with("Permission denied (os error 13)"),
        "{ours:#}"
    );
}

/// Upstream: `sandboxed_discovery_follows_only_permitted_external_symlinks`: a skill and an
/// MCP file reached through links out of the root are found only where the profile grants
/// their targets: both with the external directory readable, neither without it, only the MCP
/// file when the linked skill's directory is denied.
#[tokio::test]
async fn capability_roots_discover_follows_only_permitted_external_symlinks() {
    let (root, external) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (root, external) = (root.path(), external.path());
    write(
        root,
        ".codex-plugin/plugin.json",
        r#"{"name":"linked-plugin","mcpServers":"./external-mcp.json"}"#,
    );
    write(
        external,
        "mcp.json",
        r#"{"mcpServers":{"linked":{"command":"linked-server"}}}"#,
    );
    write(
        external,
        "skill/SKILL.md",
        "---\nname: linked\ndescription: Linked.\n---\n",
    );
    std::fs::create_dir_all(root.join("skills")).unwrap();
    std::os::unix::fs::symlink(external.join("skill"), root.join("skills/linked")).unwrap();
    std::os::unix::fs::symlink(external.join("mcp.json"), root.join("external-mcp.json")).unwrap();
    let path =
        |path: &Path, access: &str| entry(json!({"type": "path", "path": uri(path)}), access);
    let cases = [
        (vec![path(root, "read"), path(external, "read")], 1, true),
        (vec![path(root, "read")], 0, false),
        (
            vec![
                path(root, "read"),
                path(external, "read"),
                path(&external.join("skill"), "deny"),
            ],
            0,
            true,
        ),
    ];
    for (entries, skills, has_mcp) in cases {
        let mut linked = json!({"id": "linked", "path": uri(root)});
        linked["sandbox"] = restricted(root, entries, "restricted");
        let (ours, codex) = both_discover(&json!({"roots": [linked]})).await;
        for reply in [ours.expect("ours"), codex.expect("codex")] {
            let found = &reply["roots"][0];
            assert_eq!(found["error"], Value::Null, "{found:#}");
            assert_eq!(
                found["skills"].as_array().unwrap().len(),
                skills,
                "{found:#}"
            );
            let mcp = found["plugin"]["mcpConfig"]["contents"]
                .as_str()
                .unwrap_or("");
            assert_eq!(mcp.contains("linked-server"), has_mcp, "{found:#}");
        }
    }
}

/// 15 MiB of skills in `dir`: 16 `SKILL.md` of 960 KiB (each below the 1 MiB file limit).
fn fifteen_mib_of_skills(dir: &Path) {
    let text = "x".repeat(960 * 1024);
    for skill in 0..16 {
        write(dir, &format!("s{skill:02}/SKILL.md"), &text);
    }
}

/// Our daemon's answer to `roots`, the reply's size in bytes, and the daemon's peak RSS (MiB).
async fn discover_with_ours(roots: Vec<Value>) -> (Vec<Value>, usize, u64) {
    let daemon = Daemon::start();
    let client = Client::connect(&daemon.url).await;
    client.initialize(None).await.expect("initialize");
    let reply = tokio::time::timeout(TIMEOUT, client.request(METHOD, json!({"roots": roots})))
        .await
        .expect("reply in time")
        .expect("discovered");
    let size = reply.to_string().len();
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).unwrap();
    let peak = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        / 1024;
    eprintln!("reply {size} bytes, peak RSS {peak} MiB");
    (reply["roots"].as_array().unwrap().clone(), size, peak)
}

/// Issue 41, item 8: one directory of 15 MiB of skills named as 20 roots made a 300 MiB reply
/// and 960 MiB of RSS. The roots naming the same directory (by the same path or a link) are now
/// one: discovered once, the others pointing to it; and the call's 12 MiB budget keeps the
/// reply below a default client's 16 MiB frame.
#[tokio::test]
async fn a_directory_named_as_twenty_roots_is_discovered_once() {
    let dir = tempfile::tempdir().unwrap();
    let skills = dir.path().join("skills");
    fifteen_mib_of_skills(&skills);
    let roots = (0..20)
        .map(|index| match index % 2 {
            0 => root(&format!("r{index}"), &skills),
            _ => {
                let link = dir.path().join(format!("link{index}"));
                std::os::unix::fs::symlink(&skills, &link).unwrap();
                root(&format!("r{index}"), &link)
            }
        })
        .collect();
    let (roots, size, peak) = discover_with_ours(roots).await;
    assert_eq!(roots[0]["skills"].as_array().unwrap().len(), 12);
    assert_eq!(roots[0]["warnings"], json!([REPLY_FULL]));
    for duplicate in &roots[1..] {
        assert_eq!(duplicate["skills"], json!([]), "{}", duplicate["id"]);
        let warning = duplicate["warnings"][0].as_str().unwrap();
        assert!(
            warning.ends_with("is the directory of root `r0`; its files are listed there"),
            "{warning}"
        );
    }
    assert!(size < 13 * 1024 * 1024, "a reply of {size} bytes");
    assert!(peak < 200, "the daemon's peak RSS reached {peak} MiB");
}

const REPLY_FULL: &str = "capability discovery reply exceeds the 12582912-byte limit";

/// Issue 41, item 8: 20 directories holding the same 15 MiB of skills (hard links, distinct
/// directories) share one reply budget of 12 MiB; each root left short says so.
#[tokio::test]
async fn twenty_directories_of_skills_share_one_reply_budget() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("d0");
    fifteen_mib_of_skills(&first);
    let mut roots = vec![root("d0", &first)];
    for index in 1..20 {
        let directory = dir.path().join(format!("d{index}"));
        for skill in 0..16 {
            let relative = format!("s{skill:02}/SKILL.md");
            std::fs::create_dir_all(directory.join(format!("s{skill:02}"))).unwrap();
            std::fs::hard_link(first.join(&relative), directory.join(&relative)).unwrap();
        }
        roots.push(root(&format!("d{index}"), &directory));
    }
    let (roots, size, peak) = discover_with_ours(roots).await;
    let skills: usize = roots
        .iter()
        .map(|root| root["skills"].as_array().unwrap().len())
        .sum();
    assert_eq!(skills, 12, "skills of 960 KiB");
    for root in &roots {
        assert_eq!(root["warnings"], json!([REPLY_FULL]), "{}", root["id"]);
    }
    assert!(size < 13 * 1024 * 1024, "a reply of {size} bytes");
    assert!(peak < 250, "the daemon's peak RSS reached {peak} MiB");
}
