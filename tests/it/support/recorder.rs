//! A loopback WebSocket relay that counts the JSON-RPC methods a client sends through it (those
//! with a given prefix): what codex asks of an executor, so a test can compare what it asks of
//! two.

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
    pub async fn start(target_ws_url: &str, prefix: &'static str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let methods = Arc::<Mutex<BTreeMap<String, usize>>>::default();
        let (target, seen) = (target_ws_url.to_owned(), methods.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, target.clone(), prefix, seen.clone()));
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
                let method = serde_json::from_str::<serde_json::Value>(text)
                    .ok()
                    .and_then(|value| value["method"].as_str().map(str::to_owned))
                    .filter(|method| method.starts_with(prefix));
                if let Some(method) = method {
                    *methods.lock().unwrap().entry(method).or_default() += 1;
                }
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
