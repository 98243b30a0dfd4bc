//! `environmentConfig/read` attacked: a repository's `.codex` layer may not read past its
//! project (codex's own server follows the link and sends the target's text to the client), and
//! no file there can hold the read.

use crate::common::{Client, Daemon};
use serde_json::{json, Value};
use std::path::Path;

/// A daemon whose codex home trusts `{root}/repo`, a git checkout.
fn trusted_repo(root: &Path) -> Daemon {
    let home = root.join("home");
    std::fs::create_dir_all(root.join("repo/.git")).unwrap();
    std::fs::write(root.join("repo/.git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let trust = format!(
        "[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
        root.join("repo").display()
    );
    std::fs::write(home.join("config.toml"), trust).unwrap();
    let home = home.to_str().unwrap();
    Daemon::start_with(&[], &[("CODEX_HOME", home), ("HOME", home)])
}

async fn read(daemon: &Daemon, cwd: &Path) -> Result<Value, Value> {
    let client = Client::connect(&daemon.url).await;
    client.initialize(None).await.expect("initialize");
    let params = json!({"cwd": format!("file://{}", cwd.display()),
                        "configPaths": [["secret"], ["alpha"]], "requirementsPaths": []});
    client.request("environmentConfig/read", params).await
}

/// A `.codex` directory and a `config.toml` linked to files outside the project (absolute and
/// `..`-relative links) are not read; the project's own layer still is.
#[tokio::test]
async fn a_project_layer_linked_outside_the_project_is_not_read() {
    let root = tempfile::tempdir_in("/var/tmp").unwrap();
    let root = root.path();
    let daemon = trusted_repo(root);
    std::fs::create_dir_all(root.join("secrets")).unwrap();
    std::fs::write(root.join("secrets/config.toml"), "secret = \"s3cr3t\"\n").unwrap();
    let repo = root.join("repo");
    std::fs::create_dir_all(repo.join(".codex")).unwrap();
    std::fs::write(repo.join(".codex/config.toml"), "alpha = 1\n").unwrap();
    std::fs::create_dir_all(repo.join("a/.codex")).unwrap();
    std::os::unix::fs::symlink(
        "../../../secrets/config.toml",
        repo.join("a/.codex/config.toml"),
    )
    .unwrap();
    std::fs::create_dir_all(repo.join("a/b")).unwrap();
    std::os::unix::fs::symlink(root.join("secrets"), repo.join("a/b/.codex")).unwrap();

    let reply = read(&daemon, &repo.join("a/b")).await.expect("read");
    assert!(!reply.to_string().contains("s3cr3t"), "{reply}");
    let layers = reply["config"]["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{reply}");
    assert_eq!(layers[0]["toml"], "alpha = 1\n");
}

/// A FIFO named `config.toml` is refused at once instead of holding the read until a writer
/// comes.
#[tokio::test]
async fn a_fifo_config_is_refused_without_blocking() {
    let root = tempfile::tempdir_in("/var/tmp").unwrap();
    let root = root.path();
    let daemon = trusted_repo(root);
    let fifo_dir = root.join("repo/fifo/.codex");
    std::fs::create_dir_all(&fifo_dir).unwrap();
    nix::unistd::mkfifo(&fifo_dir.join("config.toml"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let error = read(&daemon, &root.join("repo/fifo"))
        .await
        .expect_err("a FIFO");
    assert_eq!(error["code"], -32603, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("not a regular file"), "{message}");
}

/// `..` cannot walk a read out of the directory it names: plain or percent-encoded, a dot
/// segment in `cwd` is resolved before anything is read (as a URL's path is), so the read names
/// the directory it lands in, which no trust entry covers.
#[tokio::test]
async fn dot_segments_in_cwd_do_not_reach_an_untrusted_directory() {
    let root = tempfile::tempdir_in("/var/tmp").unwrap();
    let root = root.path();
    let daemon = trusted_repo(root);
    std::fs::create_dir_all(root.join("secrets/.codex")).unwrap();
    std::fs::write(root.join("secrets/.codex/config.toml"), "secret = 1\n").unwrap();
    for cwd in [
        "repo/%2E%2E/secrets",
        "repo/../secrets",
        "repo/.%2e/secrets",
    ] {
        let reply = read(&daemon, &root.join(cwd)).await.expect(cwd);
        assert_eq!(reply["config"]["layers"], json!([]), "{cwd}: {reply}");
    }
}
