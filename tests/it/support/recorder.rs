//! A loopback WebSocket relay that counts the JSON-RPC methods a client sends through it (those
//! with a given prefix): what codex asks of an executor, so a test can compare what it asks of
//! two. Named params can be counted too (`"process/start networkProxy"`): whether codex asks for
//! something often shows only in a field of a method it always sends.

use futures::{SinkExt as _, StreamExt as _};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

pub struct Recorder {
    pub url: String,
    methods: Arc<Mutex<BTreeMap<String, usize>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Recorder {
    /// Counts each method starting with `prefix`, and, as `"<method> <field>"`, each of `fields`
    /// it carries in its params set to anything but `null` or `false`.
    pub async fn start(
        target_ws_url: &str,
        prefix: &'static str,
        fields: &'static [&'static str],
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let methods = Arc::<Mutex<BTreeMap<String, usize>>>::default();
        let (target, seen) = (target_ws_url.to_owned(), methods.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, target.clone(), prefix, fields, seen.clone()));
            }
        });
        Self {
            url,
            methods,
            accept,
        }
    }

    /// How often each method was sent so far, requests and notifications alike.
    pub fn methods(&self) -> BTreeMap<String, usize> {
        self.methods.lock().unwrap().clone()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(
    client: tokio::net::TcpStream,
    target: String,
    prefix: &'static str,
    fields: &'static [&'static str],
    methods: Arc<Mutex<BTreeMap<String, usize>>>,
) {
    let Ok(client) = tokio_tungstenite::accept_async(client).await else {
        return;
    };
    let Ok((server, _)) = tokio_tungstenite::connect_async(&target).await else {
        return;
    };
    let (mut to_client, mut from_client) = client.split();
    let (mut to_server, mut from_server) = server.split();
    let upstream = async {
        while let Some(Ok(message)) = from_client.next().await {
            if let Ok(text) = message.to_text() {
                count(text, prefix, fields, &mut methods.lock().unwrap());
            }
            if to_server.send(message).await.is_err() {
                break;
            }
        }
    };
    let downstream = async {
        while let Some(Ok(message)) = from_server.next().await {
            if to_client.send(message).await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
}

/// Counts the method of one message, and the fields it sets, when the method starts with `prefix`.
fn count(text: &str, prefix: &str, fields: &[&str], methods: &mut BTreeMap<String, usize>) {
    let Ok(message) = serde_json::from_str::<serde_json::Value>(text) else {
        return;
    };
    let Some(method) = message["method"].as_str().filter(|m| m.starts_with(prefix)) else {
        return;
    };
    *methods.entry(method.to_owned()).or_default() += 1;
    for field in fields {
        let value = &message["params"][*field];
        if !value.is_null() && *value != serde_json::Value::Bool(false) {
            *methods.entry(format!("{method} {field}")).or_default() += 1;
        }
    }
}
