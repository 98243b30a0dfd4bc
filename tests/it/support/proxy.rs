//! A loopback TCP proxy that tests use to lose a connection on purpose: it can hold back what
//! the daemon sends (so a test knows the client did not get it), then cut the connection.

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub url: String,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Shared {
    /// Daemon→client bytes held back while paused (they are dropped on cut).
    held: Mutex<Vec<u8>>,
    paused: watch::Sender<bool>,
    /// Bumped to cut every connection open at that moment.
    cut: watch::Sender<u64>,
    /// While true, new connections are closed at once.
    refusing: watch::Sender<bool>,
    /// When set, a cut closes only the client's side; the daemon's stays open until this
    /// is cleared (the daemon still believes the client is attached).
    keep_daemon_side: watch::Sender<bool>,
}

impl Proxy {
    pub async fn start(target_ws_url: &str) -> Self {
        let target = target_ws_url.trim_start_matches("ws://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let shared = Arc::new(Shared::default());
        let accept = {
            let shared = shared.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    if *shared.refusing.borrow() {
                        continue;
                    }
                    let Ok(daemon) = TcpStream::connect(&target).await else {
                        continue;
                    };
                    tokio::spawn(pipe(client, daemon, shared.clone()));
                }
            })
        };
        Self {
            url,
            shared,
            accept,
        }
    }

    /// Stops forwarding daemon→client bytes; they pile up in [`Self::held`].
    pub fn pause(&self) {
        self.shared.paused.send_replace(true);
    }

    /// Whether what the daemon sent while paused contains `needle` (WebSocket frames from a
    /// server are not masked, so JSON text and binary payloads are readable in it).
    pub fn held_contains(&self, needle: &[u8]) -> bool {
        let held = self.shared.held.lock().unwrap();
        held.windows(needle.len()).any(|window| window == needle)
    }

    /// Cuts every open connection, dropping held bytes, and forwards normally again.
    pub fn cut(&self) {
        self.shared.paused.send_replace(false);
        self.shared.cut.send_modify(|n| *n += 1);
    }

    pub fn refuse(&self, refusing: bool) {
        self.shared.refusing.send_replace(refusing);
    }

    pub fn keep_daemon_side(&self, keep: bool) {
        self.shared.keep_daemon_side.send_replace(keep);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

async fn pipe(client: TcpStream, daemon: TcpStream, shared: Arc<Shared>) {
    let mut cut = shared.cut.subscribe();
    cut.borrow_and_update();
    let (mut client_read, mut client_write) = client.into_split();
    let (mut daemon_read, mut daemon_write) = daemon.into_split();
    let upstream = async {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = client_read.read(&mut buffer).await.unwrap_or(0);
            if n == 0 || daemon_write.write_all(&buffer[..n]).await.is_err() {
                return;
            }
        }
    };
    let downstream = async {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = daemon_read.read(&mut buffer).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            if *shared.paused.borrow() {
                shared.held.lock().unwrap().extend_from_slice(&buffer[..n]);
            } else if client_write.write_all(&buffer[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        _ = cut.changed() => {}
    }
    shared.held.lock().unwrap().clear();
    drop(client_write);
    drop(client_read);
    let mut keep = shared.keep_daemon_side.subscribe();
    let _ = keep.wait_for(|keep| !*keep).await;
}
