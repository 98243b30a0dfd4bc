//! Gap 3 of issue 29: `http/request` headers from the executor's environment.

use super::{assert_equal, run_both_with, Scenario};
use serde_json::json;

fn header_from(id: i64, name: &str, var: &str) -> (i64, serde_json::Value) {
    let header = json!({"name": name, "value": "Bearer ", "valueEnvVar": var});
    (
        id,
        json!({"method": "GET", "url": "http://127.0.0.1:1/", "requestId": format!("r{id}"),
            "headers": [header]}),
    )
}

/// Upstream: `codex-rs/exec-server/tests/http_request.rs`, the `valueEnvVar` cases: a denied
/// variable (case-insensitively, not even read), an unset one and an empty one are -32602
/// before anything is sent, with upstream's messages.
#[tokio::test]
async fn http_request_rejects_denied_missing_and_empty_header_env_vars() {
    let mut scenario = Scenario::initialized();
    for (id, params) in [
        header_from(1, "Authorization", "OPENAI_API_KEY"),
        header_from(2, "Authorization", "openai_api_key"),
        header_from(3, "X-A", "Aws_Session_Token"),
        header_from(4, "X-A", "CODEX_GUARDIAN_DECISIONS_API_KEY"),
        header_from(5, "X-A", "EXEC_TEST_UNSET"),
        header_from(6, "X-A", "EXEC_TEST_EMPTY"),
        header_from(7, "bad name", "OPENAI_API_KEY"),
        // `exec_server_http_request_rejects_protected_environment_headers`'s own list.
        header_from(8, "authorization", "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN"),
        header_from(9, "authorization", "codex_exec_server_noise_auth_token"),
        header_from(10, "authorization", "CODEX_ACCESS_TOKEN"),
        header_from(11, "authorization", "CODEX_CONNECTORS_TOKEN"),
        header_from(12, "authorization", "AWS_SECRET_ACCESS_KEY"),
        header_from(13, "authorization", "AZURE_FEDERATED_TOKEN_FILE"),
        header_from(14, "authorization", "OPENAI_IDENTITY_TOKEN_FILE"),
    ] {
        scenario = scenario.request(id, "http/request", params);
    }
    let env = [
        ("OPENAI_API_KEY", "sk-test"),
        ("EXEC_TEST_EMPTY", ""),
        (
            "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN",
            "executor-internal-token",
        ),
    ];
    let (ours, codex) = run_both_with(&scenario, |_| {}, &[], &env).await;
    assert_equal(&ours, &codex);
    assert_eq!(
        ours[0]["error"],
        json!({"code": -32602, "message":
            "http/request header Authorization cannot use executor environment variable OPENAI_API_KEY"})
    );
}
