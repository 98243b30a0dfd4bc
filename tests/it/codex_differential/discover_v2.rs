//! `capabilities/discoverV2` against codex's own server: each daemon started with
//! `CODEX_HOME` and `HOME` inside its own copy of the fixture (discovery reads the homes it was
//! started with), the same requests, the same replies once the fixture's path is a placeholder.
//! Upstream's `codex-rs/exec-server/src/discoverV2/` is not in a released source we can read;
//! codex 0.171.0's server is the referee for every rule here.

use super::{assert_equal, lines, Scenario};
use crate::common::codex_peer::CodexPeer;
use crate::common::Daemon;
use serde_json::{json, Value};
use std::path::Path;

/// Both daemons' messages for `scenario`, each started on a fresh fixture built by `fixture`
/// with `CODEX_HOME` at its `codex/` and `HOME` at its `home/`: `(ours, codex)`.
async fn run_both_homes(scenario: &Scenario, fixture: impl Fn(&Path)) -> (Vec<Value>, Vec<Value>) {
    run_both_homes_as(false, scenario, fixture).await
}

/// [`run_both_homes`], both daemons running as `nobody` when `unprivileged` (the fixture then
/// made that user's before `fixture` runs).
async fn run_both_homes_as(
    unprivileged: bool,
    scenario: &Scenario,
    fixture: impl Fn(&Path),
) -> (Vec<Value>, Vec<Value>) {
    let mut lists = Vec::new();
    for ours in [true, false] {
        // Not /dev/shm, the harness's usual place: codex's sandbox mounts a /dev of its own.
        let root = tempfile::tempdir_in("/var/tmp").unwrap();
        // codex refuses to start without its CODEX_HOME; a sandbox's cwd must exist.
        for directory in ["codex", "home", "project"] {
            std::fs::create_dir_all(root.path().join(directory)).unwrap();
        }
        if unprivileged {
            chown_nobody(root.path());
        }
        fixture(root.path());
        let codex_home = root.path().join("codex");
        let home = root.path().join("home");
        let env = [
            ("CODEX_HOME", codex_home.to_str().unwrap()),
            ("HOME", home.to_str().unwrap()),
        ];
        let messages = match (ours, unprivileged) {
            (true, false) => {
                let daemon = Daemon::start_with(&[], &env);
                scenario.run(&daemon.url, root.path()).await
            }
            (true, true) => {
                let (daemon, _binary) = Daemon::start_unprivileged_with(&env);
                scenario.run(&daemon.url, root.path()).await
            }
            (false, false) => {
                let codex = CodexPeer::start_with(&[], &env);
                scenario.run(&codex.url, root.path()).await
            }
            (false, true) => {
                let codex = CodexPeer::start_unprivileged_with(&env);
                scenario.run(&codex.url, root.path()).await
            }
        };
        lists.push(messages);
    }
    let codex = lists.pop().unwrap();
    (lists.pop().unwrap(), codex)
}

/// `path` and everything below it made `nobody`'s.
fn chown_nobody(path: &Path) {
    std::os::unix::fs::chown(path, Some(65534), Some(65534)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_nobody(&entry.unwrap().path());
        }
    }
}

async fn assert_same_homes(scenario: &Scenario, fixture: impl Fn(&Path)) -> Vec<Value> {
    let (ours, codex) = run_both_homes(scenario, fixture).await;
    assert_equal(&ours, &codex);
    ours
}

/// `contents` at `relative` under `root`, its directories made.
fn write(root: &Path, relative: &str, contents: impl AsRef<[u8]>) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
}

fn skill_md(name: &str, description: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n# {name}\n")
}

/// An installed plugin `codex/plugins/cache/<package>/<version>` (see [`plugin_at`]).
fn plugin(root: &Path, package_version: &str, manifest: &str) {
    plugin_at(
        root,
        &format!("codex/plugins/cache/{package_version}"),
        manifest,
    );
}

/// A plugin directory `base` with `manifest` (none when empty) and one skill `s1`.
fn plugin_at(root: &Path, base: &str, manifest: &str) {
    if !manifest.is_empty() {
        write(root, &format!("{base}/.codex-plugin/plugin.json"), manifest);
    }
    write(
        root,
        &format!("{base}/skills/s1/SKILL.md"),
        skill_md("s1", &format!("in {base}")),
    );
}

fn discover(id: i64, sandbox: Option<Value>) -> Scenario {
    let mut params = json!({"cwd": "file://{root}/project"});
    if let Some(sandbox) = sandbox {
        params["sandbox"] = sandbox;
    }
    Scenario::initialized().request(id, "capabilities/discoverV2", params)
}

/// Installed plugins: one version each (`local` first, else semver order, else by name),
/// their remote ids, display names and namespaces, and the packages left out.
fn plugins(root: &Path) {
    plugin(root, "m1/semver/1.9.0", r#"{"name":"semver"}"#);
    let nice = r#"{"name":"semver","interface":{"displayName":"Semver Nice"}}"#;
    plugin(root, "m1/semver/1.10.0", nice);
    plugin(root, "m1/loc/9.0.0", r#"{"name":"loc"}"#);
    plugin(root, "m1/loc/local", r#"{"name":"loc-local"}"#);
    plugin(root, "m1/odd/abc", r#"{"name":"odd"}"#);
    plugin(root, "m1/odd/abd", r#"{"name":"odd"}"#);
    plugin(root, "m1/remote/1.0.0", r#"{"name":"remote"}"#);
    let remote = r#"{"schema_version":1,"remote_plugin_id":"  plugins~abc  "}"#;
    write(
        root,
        "codex/plugins/cache/m1/remote/.codex-remote-plugin-install.json",
        remote,
    );
    plugin(root, "m1/badremote/1.0.0", r#"{"name":"badremote"}"#);
    let unsupported = r#"{"schema_version":2,"remote_plugin_id":"x"}"#;
    write(
        root,
        "codex/plugins/cache/m1/badremote/.codex-remote-plugin-install.json",
        unsupported,
    );
    plugin(root, "m1/nomanifest/1.0.0", "");
    plugin(root, "m2/badjson/1.0.0", "{not json");
    plugin(root, "m2/renamed/1.0.0", r#"{"name":"other-name"}"#);
    plugin(root, "m2/blank/1.0.0", r#"{"name":"  "}"#);
    plugin(root, "m2/ver/1.0.0", r#"{"name":"ver","version":"2.0.0"}"#);
    let files = r#"{"name":"mcp","mcpServers":"./mcp.json","apps":"./apps.json"}"#;
    plugin(root, "m2/mcp/1.0.0", files);
    write(root, "codex/plugins/cache/m2/mcp/1.0.0/mcp.json", "{}");
    write(root, "codex/plugins/cache/m2/mcp/1.0.0/apps.json", "{}");
    plugin(root, "m2/claude/1.0.0", "");
    write(
        root,
        "codex/plugins/cache/m2/claude/1.0.0/.claude-plugin/plugin.json",
        "{}",
    );
    plugin(root, "m.x/dotted-market/1.0.0", r#"{"name":"n"}"#);
    plugin(root, "mx/p.l/1.0.0", r#"{"name":"n"}"#);
    write(root, "codex/plugins/cache/m2/afile", "not a package");
}

/// Standalone skills: `$CODEX_HOME/skills` (`.system/` and nested ones too) and
/// `~/.agents/skills`, not the project's; front matter good and bad.
fn skills(root: &Path) {
    let home = |relative: &str, contents: &str| {
        write(root, &format!("codex/skills/{relative}/SKILL.md"), contents);
    };
    home(".system/sys", &skill_md("sys", "System skill"));
    home(
        "group/nested/deep",
        "---\ndescription: nested, named by its directory\n---\n",
    );
    home(
        "alpha",
        "---\nname: alpha\ndescription: Alpha\nmetadata:\n  short-description: short\n---\n",
    );
    home(
        "colon",
        "---\nname: colon\ndescription: Build for AWS: ECS # a comment\n---\n",
    );
    home("multi", "---\nname:  multi   line \ndescription: |\n  first\n  second   line\nmetadata:\n  short-description: \"  \"\n---\n");
    home(
        "number",
        "---\nname: number\ndescription: d\nmetadata:\n  short-description: 5\n---\n",
    );
    home(
        "crlf",
        "---\r\nname: crlf\r\ndescription: crlf skill\r\n---\r\n",
    );
    home("flow", "---\nname: [unclosed\ndescription: x\n---\n");
    home("nofrontmatter", "# no front matter\n");
    home("nodescription", "---\nname: nodescription\n---\n");
    home("empty", "---\n---\n");
    home("long", &skill_md(&"x".repeat(65), "too long a name"));
    home("a/b/c/d/e/f/g", &skill_md("too-deep", "seven levels down"));
    home("a/b/c/d/e/f2", &skill_md("deep-enough", "six levels down"));
    write(
        root,
        "codex/skills/ns/.codex-plugin/plugin.json",
        r#"{"name":"nsp"}"#,
    );
    home("ns/skills/inner", &skill_md("inner", "named within nsp"));
    write(
        root,
        "home/.agents/skills/agent/SKILL.md",
        skill_md("agent", "from ~/.agents"),
    );
    write(
        root,
        "home/.agents/skills/dup/SKILL.md",
        skill_md("colon", "the same name again"),
    );
    write(
        root,
        "project/.agents/skills/p/SKILL.md",
        skill_md("project", "not discovered"),
    );
    write(
        root,
        "project/.codex/skills/p/SKILL.md",
        skill_md("project2", "not discovered"),
    );
}

/// `agents/openai.yaml`: tool dependencies (seven members, the incomplete left out) and the
/// invocation policy; a file that does not parse, or names an unknown product, is ignored.
fn metadata(root: &Path) {
    let skill = |name: &str, yaml: &str| {
        write(
            root,
            &format!("codex/skills/{name}/SKILL.md"),
            skill_md(name, "d"),
        );
        write(
            root,
            &format!("codex/skills/{name}/agents/openai.yaml"),
            yaml,
        );
    };
    skill(
        "tools",
        "interface:\n  display_name: Tools\ndependencies:\n  tools:\n    - type: mcp\n      value: github\n      description: GitHub\n      transport: streamable_http\n      url: https://example.com/mcp\n      oauth_callback_port: 8080\n    - value: no-type\n    - type: \"  \"\n      value: blank-type\n    - type: cli\n      value: \"  spaced    value \"\n      command: \"  \"\npolicy:\n  allow_implicit_invocation: false\n  products: [codex, CHATGPT, atlas]\n",
    );
    skill("nodeps", "dependencies:\n  tools: []\npolicy: {}\n");
    skill("allowed", "policy:\n  allow_implicit_invocation: true\n");
    skill("unknownproduct", "policy:\n  products: [Codex]\n");
    skill("broken", "policy: [\n");
}

#[tokio::test]
async fn installed_plugins_are_described_alike() {
    let replies = assert_same_homes(&discover(1, None), plugins).await;
    let result = &replies[0]["result"];
    let ids: Vec<&str> = (result["plugins"].as_array().unwrap().iter())
        .map(|plugin| plugin["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"semver@m1") && !ids.contains(&"badjson@m2"),
        "{ids:?}"
    );
    assert_eq!(result["plugins"][0]["remotePluginId"], Value::Null);
}

#[tokio::test]
async fn standalone_skills_are_described_alike() {
    let fixture = |root: &Path| {
        skills(root);
        metadata(root);
    };
    let replies = assert_same_homes(&discover(1, None), fixture).await;
    let names = skill_names(&replies[0]);
    assert!(names.contains(&"nsp:inner".to_owned()), "{names:?}");
    assert!(!names.contains(&"project".to_owned()), "{names:?}");
}

fn skill_names(reply: &Value) -> Vec<String> {
    let skills = reply["result"]["skills"].as_array().unwrap().iter();
    skills
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

/// A sandbox profile of `entries`, each `(path under the fixture or "/", access)`.
fn sandbox(entries: &[(&str, &str)]) -> Value {
    let entries: Vec<Value> = (entries.iter())
        .map(|&(path, access)| match path {
            "/" => {
                json!({"path": {"type": "special", "value": {"kind": "root"}}, "access": access})
            }
            path => json!({"path": {"type": "path", "path": format!("file://{{root}}/{path}")},
                "access": access}),
        })
        .collect();
    json!({
        "permissions": {"type": "managed", "network": "restricted",
            "file_system": {"type": "restricted", "entries": entries}},
        "cwd": "file://{root}/project",
        "windowsSandboxLevel": "disabled",
    })
}

/// Skills and a plugin, each beside a link to a directory outside the homes.
fn with_links_out(root: &Path) {
    write(
        root,
        "codex/skills/alpha/SKILL.md",
        skill_md("alpha", "inside"),
    );
    plugin(root, "m/inside/1.0.0", r#"{"name":"inside"}"#);
    write(
        root,
        "home/.agents/skills/agent/SKILL.md",
        skill_md("agent", "inside"),
    );
    write(
        root,
        "outside/skill/SKILL.md",
        skill_md("outside-skill", "SECRET"),
    );
    plugin_at(root, "outside/plugin/1.0.0", r#"{"name":"outside-plugin"}"#);
    let link = |target: &str, at: &str| {
        std::os::unix::fs::symlink(root.join(target), root.join(at)).unwrap();
    };
    link("outside/skill", "codex/skills/linked");
    std::fs::create_dir_all(root.join("codex/plugins/cache/mk")).unwrap();
    link("outside/plugin", "codex/plugins/cache/mk/linked");
}

#[tokio::test]
async fn a_root_the_sandbox_denies_is_left_out_alike() {
    let denied = sandbox(&[("/", "read"), ("codex/skills", "deny")]);
    let replies = assert_same_homes(&discover(1, Some(denied)), with_links_out).await;
    assert_eq!(skill_names(&replies[0]), ["agent"]);
}

#[tokio::test]
async fn links_to_what_the_sandbox_denies_are_not_read_alike() {
    let denied = sandbox(&[("/", "read"), ("outside", "deny")]);
    let replies = assert_same_homes(&discover(1, Some(denied)), with_links_out).await;
    assert!(
        !replies[0].to_string().contains("outside"),
        "{}",
        lines(&replies)
    );
}

/// Links out of what the sandbox grants at all: neither daemon reads through them. codex's
/// sandbox has no such path (its mount namespace), this daemon's refuses the read (Landlock),
/// and says once that the plugin's location lost something: only the warnings differ.
#[tokio::test]
async fn links_out_of_the_sandbox_grants_are_not_read() {
    let granted = sandbox(&[("codex", "read"), ("home", "read")]);
    let (ours, codex) = run_both_homes(&discover(1, Some(granted)), with_links_out).await;
    let without_warnings = |replies: &[Value]| -> Vec<Value> {
        let mut replies = replies.to_vec();
        replies[0]["result"]["warnings"] = json!("{warnings}");
        replies
    };
    assert_equal(&without_warnings(&ours), &without_warnings(&codex));
    let text = ours[0].to_string();
    assert!(
        !text.contains("SECRET") && !text.contains("outside"),
        "{text}"
    );
    assert_eq!(skill_names(&ours[0]), ["alpha", "agent"]);
}

/// Files over discoverV1's 1 MiB are not read: the skill is left out, its metadata ignored.
#[tokio::test]
async fn oversize_files_are_left_out_alike() {
    let fixture = |root: &Path| {
        let mut big = skill_md("big", "d").into_bytes();
        big.resize(1024 * 1024 + 1, b'a');
        write(root, "codex/skills/big/SKILL.md", big);
        write(root, "codex/skills/meta/SKILL.md", skill_md("meta", "d"));
        let mut yaml = b"policy:\n  allow_implicit_invocation: false\n#".to_vec();
        yaml.resize(1024 * 1024 + 1, b'a');
        write(root, "codex/skills/meta/agents/openai.yaml", yaml);
    };
    let replies = assert_same_homes(&discover(1, None), fixture).await;
    assert_eq!(skill_names(&replies[0]), ["meta"]);
    assert_eq!(replies[0]["result"]["skills"][0]["policy"], Value::Null);
}

#[tokio::test]
async fn bad_params_are_refused_alike() {
    let method = "capabilities/discoverV2";
    let before = Scenario::raw().request(1, method, json!({"cwd": "file:///"}));
    assert_same_homes(&before, |_| {}).await;
    let scenario = Scenario::initialized()
        .request(1, method, json!({}))
        .request(2, method, json!({"cwd": "relative"}));
    let replies = assert_same_homes(&scenario, |_| {}).await;
    assert!(
        replies.iter().all(|reply| reply["error"]["code"] == -32602),
        "{}",
        lines(&replies)
    );
    // Each message is each daemon's own: codex names its types, this daemon the entry it
    // cannot enforce (as for the fs methods).
    let mut unknown_kind = sandbox(&[("/", "read")]);
    unknown_kind["permissions"]["file_system"]["entries"][0]["path"]["value"]["kind"] =
        json!("nosuchkind");
    let scenario = Scenario::initialized()
        .request(
            1,
            method,
            json!({"cwd": "file:///", "sandbox": {"permissions": 5}}),
        )
        .request(
            2,
            method,
            json!({"cwd": "file:///", "sandbox": unknown_kind}),
        );
    let (ours, codex) = run_both_homes(&scenario, |_| {}).await;
    for (ours, codex) in ours.iter().zip(&codex) {
        assert_eq!(ours["error"]["code"], -32602, "{ours}");
        assert_eq!(ours["error"]["code"], codex["error"]["code"]);
    }
}

/// A plugin cache that cannot be listed fails the call, naming the path, as codex's does (root
/// reads anything: both daemons run as `nobody`); an unreadable install record only warns.
#[tokio::test]
async fn an_unreadable_plugin_cache_fails_the_call_alike() {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let fixture = |locked: &'static str| {
        move |root: &Path| {
            plugin(root, "good/p/1.0.0", r#"{"name":"p"}"#);
            let record = "codex/plugins/cache/good/p/.codex-remote-plugin-install.json";
            write(
                root,
                record,
                r#"{"schema_version":1,"remote_plugin_id":"r"}"#,
            );
            std::fs::create_dir_all(root.join("codex/plugins/cache/.locked/q")).unwrap();
            chown_nobody(root);
            mode(&root.join(record), 0o000);
            mode(&root.join(locked), 0o000);
        }
    };
    for locked in ["codex/plugins/cache", "codex/plugins/cache/.locked"] {
        let (ours, codex) = run_both_homes_as(true, &discover(1, None), fixture(locked)).await;
        assert_equal(&ours, &codex);
        let message = ours[0]["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("failed to scan plugin cache path"),
            "{}",
            lines(&ours)
        );
    }
    let readable = |root: &Path| {
        fixture("codex/plugins/cache/.locked")(root);
        mode(&root.join("codex/plugins/cache/.locked"), 0o755);
    };
    let (ours, codex) = run_both_homes_as(true, &discover(1, None), readable).await;
    assert_equal(&ours, &codex);
    let warnings = &ours[0]["result"]["warnings"];
    assert_eq!(
        warnings[0],
        LOCATIONS_INCOMPLETE_WARNING,
        "{}",
        lines(&ours)
    );
}

const LOCATIONS_INCOMPLETE_WARNING: &str =
    "some capability locations could not be resolved; discovery may be incomplete";
