//! A standard JSON-RPC 2.0 client (jsonrpsee) drives the daemon: requests, errors and plain
//! server notifications all arrive in the strict dialect.

use crate::common;

use common::*;
use jsonrpsee::core::client::{ClientT, SubscriptionClientT};
use jsonrpsee::rpc_params;
use jsonrpsee::ws_client::WsClientBuilder;
use serde_json::Value;

#[tokio::test]
async fn jsonrpsee_speaks_to_the_daemon() {
    let daemon = Daemon::start();
    let client = WsClientBuilder::default().build(&daemon.url).await.unwrap();
    let init: Value = client
        .request(
            "initialize",
            serde_json::json!({"clientName": "jsonrpsee"}).into_object(),
        )
        .await
        .unwrap();
    assert!(init["sessionId"].is_string());
    client
        .notification("initialized", rpc_params![])
        .await
        .unwrap();
    let mut outputs = client
        .subscribe_to_method::<Value>("process/output")
        .await
        .unwrap();
    let started: Value = client
        .request(
            "process/start",
            start_params("p", &["sh", "-c", "printf hi"]).into_object(),
        )
        .await
        .unwrap();
    assert_eq!(started["processId"], "p");
    let output = outputs.next().await.unwrap().unwrap();
    assert_eq!(unb64(&output["chunk"]), b"hi");
    let error = client
        .request::<Value, _>(
            "process/read",
            serde_json::json!({"processId": "nope"}).into_object(),
        )
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("unknown process id nope"),
        "{error}"
    );
}

trait IntoObject {
    fn into_object(self) -> jsonrpsee::core::params::ObjectParams;
}

impl IntoObject for Value {
    fn into_object(self) -> jsonrpsee::core::params::ObjectParams {
        let mut params = jsonrpsee::core::params::ObjectParams::new();
        for (key, value) in self.as_object().unwrap() {
            params.insert(key, value).unwrap();
        }
        params
    }
}
