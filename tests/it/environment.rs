//! `environment/info`, `environment/status` and the `environmentInfo` of `initialize`, end to end.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::path::Path;

fn file_uri(path: &Path) -> String {
    url::Url::from_file_path(path).unwrap().to_string()
}

#[tokio::test]
async fn info_describes_the_host_the_daemon_runs_on() {
    let daemon = Daemon::start_with(
        &[],
        &[
            ("SHELL", "/nonexistent/zsh"),
            ("TMPDIR", "scratch/../tmp-dir/."),
            ("HOME", "/home/doc user"),
        ],
    );
    let (client, _) = daemon.session().await;
    let info = client.call("environment/info", json!({})).await;
    let cwd = std::env::current_dir().unwrap();

    // A $SHELL that does not exist falls back to bash, else sh.
    let fallback = if Path::new("/bin/bash").is_file() {
        json!({"name": "bash", "path": "/bin/bash"})
    } else {
        json!({"name": "sh", "path": "/bin/sh"})
    };
    assert_eq!(info["shell"], fallback);
    // The codex release whose protocol it speaks, which codex compares with its own.
    assert_eq!(
        info["executorVersion"],
        crate::common::codex_peer::CODEX_VERSION
    );
    assert_eq!(info["cwd"], file_uri(&cwd), "the daemon inherits our cwd");
    assert_eq!(info["userHomeDir"], "file:///home/doc%20user");
    assert_eq!(info["platformOs"], "linux");
    let tmp = file_uri(&cwd.join("tmp-dir"));
    assert_eq!(info["temporaryDirectories"], json!([tmp]));
    assert_eq!(info["tempDir"], tmp);
    // Refused where the kernel runs a helper a root write could replace, or a file the daemon
    // loads has other hard links.
    let root_write = crate::sandbox_support::root_write_refusal(daemon.pid()).is_none();
    // Where the helper can make its TUN device.
    let tun = Path::new("/dev/net/tun").exists();
    assert_eq!(
        info["capabilities"],
        json!({
            "networkProxyLaunch": true,
            "networkProxyReviewDomains": true,
            "networkProxyTransparentTcp": tun,
            "credentialMasking": false,
            "credentialMaskingCustomProviders": false,
            "capabilityDiscoverySandbox": true,
            "fsWatchMissing": true,
            "capabilityDiscoveryV2": true,
            "environmentConfigRead": true,
            "httpHeaderEnvVars": true,
            "sandboxedFileStreaming": true,
            "shellSnapshotV2": true,
            "windowsMxc": false,
            "linuxRootWritePreservesDevices": root_write,
            "linuxApprovedRootWritePreservesRestrictions": root_write,
            "processResize": true,
            "processCloseStdin": true,
            "processSignals": true,
            "outputRetentionIndicator": true,
            "retentionPause": true,
            "fileWriteStreaming": true,
            "fsAtomicWrite": true,
            "fsRename": true,
            "fsReadDirectoryErrors": true,
            "fsWatch": true,
            "linuxSandbox": true,
            "processLimits": true,
            "processTreeLimits": true,
            "processStartIdempotent": true,
            "processList": true,
            "sessionDisconnectPolicy": true,
            "processInputWait": true
        })
    );
}

#[tokio::test]
async fn an_existing_shell_var_names_the_shell() {
    let daemon = Daemon::start_with(&[], &[("SHELL", "/bin/sh")]);
    let (client, _) = daemon.session().await;
    let info = client.call("environment/info", Value::Null).await;
    assert_eq!(info["shell"], json!({"name": "sh", "path": "/bin/sh"}));
    let shell_path = Path::new(info["shell"]["path"].as_str().unwrap());
    assert!(shell_path.is_file());
    for key in ["cwd", "tempDir", "userHomeDir"] {
        let uri = info[key].as_str().unwrap();
        assert!(uri.starts_with("file:///"), "{key}: {uri}");
    }
}

#[tokio::test]
async fn initialize_carries_the_same_environment_info() {
    let daemon = Daemon::start();
    let client = daemon.client().await;
    let result = client
        .call("initialize", json!({"clientName": "env"}))
        .await;
    client.notify("initialized", json!({})).await;
    let info = client.call("environment/info", json!({})).await;
    assert!(info["shell"]["name"].is_string());
    assert_eq!(result["environmentInfo"], info);
}

#[tokio::test]
async fn status_is_ready_and_unit_params_may_be_absent_null_or_empty() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    for method in ["environment/status", "environment/info"] {
        let absent = client
            .raw_request(json!({"id": "absent", "method": method}))
            .await;
        assert!(absent.get("result").is_some(), "{absent}");
        for params in [Value::Null, json!({})] {
            let result = client.call(method, params).await;
            assert_eq!(result, absent["result"]);
        }
        let error = client.request(method, json!({"x": 1})).await.unwrap_err();
        assert_eq!(error["code"], -32602);
    }
    let status = client.call("environment/status", json!({})).await;
    assert_eq!(status, json!({"status": "ready"}));
    let error = client
        .request("environment/explode", json!({}))
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32601);
}

#[tokio::test]
async fn environment_methods_need_the_handshake() {
    let daemon = Daemon::start();
    let client = daemon.client().await;
    let error = client
        .request("environment/status", json!({}))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        json!({"code": -32600, "message": "client must call initialize before using environment status methods"})
    );
}

#[tokio::test]
async fn info_shows_the_envd_listeners_and_their_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profile.json");
    let permissions = json!({"type": "managed", "file_system": {"type": "unrestricted"}, "network": "restricted"});
    std::fs::write(&profile, permissions.to_string()).unwrap();
    let daemon = Daemon::start_with(
        &[
            "--envd-listen",
            "127.0.0.1:0",
            "--envd-sandbox",
            profile.to_str().unwrap(),
        ],
        &[],
    );
    let (client, _) = daemon.session().await;
    let info = client.call("environment/info", json!({})).await;
    assert_eq!(
        info["envd"],
        json!({"listeners": ["127.0.0.1:0"], "accessToken": false, "sandbox": permissions})
    );
    let plain = Daemon::start();
    let (client, _) = plain.session().await;
    let info = client.call("environment/info", json!({})).await;
    assert!(info.get("envd").is_none(), "{info}");
}
