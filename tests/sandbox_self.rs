//! `sandbox::run_self`, the entry point for sandboxed fs operations: the daemon's binary run
//! under an intent, with stdin in and stdout/stderr/exit out.

mod common;
mod sandbox_support;

use exec_server::sandbox::{run_self, set_self_binary};
use exec_server_protocol::sandbox::FileSystemSandboxContext;
use sandbox_support::*;
use serde_json::json;

fn context(value: serde_json::Value) -> FileSystemSandboxContext {
    serde_json::from_value(value).unwrap()
}

#[tokio::test]
async fn runs_the_binary_confined_and_fails_closed() {
    set_self_binary(env!("CARGO_BIN_EXE_exec-server").into());
    let d = Dirs::new();
    let platform = context(restricted(
        &d.ws,
        vec![
            entry(special("minimal"), "read"),
            entry(special("project_roots"), "write"),
        ],
        "restricted",
    ));
    let out = run_self(&platform, &d.ws, &["--version"], Vec::new())
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0, "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("exec-server "),
        "{out:?}"
    );

    // Without the platform libraries the binary cannot even be loaded: refused, not run.
    let bare = context(restricted(
        &d.ws,
        vec![entry(special("project_roots"), "write")],
        "enabled",
    ));
    let err = run_self(&bare, &d.ws, &["--version"], Vec::new())
        .await
        .unwrap_err();
    assert_eq!(err.code, -32603, "{err:?}");
    assert_eq!(err.data.unwrap()["sandboxDenied"], json!(true));

    let unknown = context(restricted(
        &d.ws,
        vec![entry(
            json!({"type": "special", "value": {"kind": "later"}}),
            "read",
        )],
        "enabled",
    ));
    let err = run_self(&unknown, &d.ws, &["--version"], Vec::new())
        .await
        .unwrap_err();
    assert_eq!(err.code, -32602, "{err:?}");
}
