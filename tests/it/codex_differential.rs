//! The same wire scenario against this daemon and against codex's own exec-server
//! (`common::codex_peer`), replies compared: where upstream changes, a test here shows the diff.

use crate::common::codex_peer::CodexPeer;
use crate::common::{Client, Daemon, TIMEOUT};
use serde_json::{json, Value};

/// Both daemons' replies to one request, after the initialize handshake.
async fn both_answer(method: &str, params: Value) -> (Result<Value, Value>, Result<Value, Value>) {
    let codex = CodexPeer::start(&[]);
    let ours = Daemon::start();
    let mut replies = Vec::new();
    for url in [&ours.url, &codex.url] {
        let client = Client::connect(url).await;
        client.initialize(None).await.expect("initialize");
        let reply = tokio::time::timeout(TIMEOUT, client.request(method, params.clone()))
            .await
            .expect("reply in time");
        replies.push(reply);
    }
    let codex_reply = replies.pop().unwrap();
    (replies.pop().unwrap(), codex_reply)
}

#[tokio::test]
async fn an_unknown_method_is_refused_alike() {
    let (ours, codex) = both_answer("nosuch/method", json!({})).await;
    let (ours, codex) = (ours.unwrap_err(), codex.unwrap_err());
    assert_eq!(ours["code"], codex["code"], "ours {ours}, codex {codex}");
    assert_eq!(
        ours["message"], codex["message"],
        "ours {ours}, codex {codex}"
    );
}
