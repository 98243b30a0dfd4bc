//! A forward HTTP proxy on the host's loopback, as a client's network proxy is: it takes
//! absolute-form requests (`GET http://host:port/path HTTP/1.1`), forwards them in origin form
//! to their host, and relays the rest both ways. It records every request line it served and
//! counts the connections it has open.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};

pub struct HttpProxy {
    pub port: u16,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<String>>,
    open: AtomicUsize,
}

impl HttpProxy {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let accept = {
            let shared = shared.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let shared = shared.clone();
                    shared.open.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(async move {
                        serve(client, &shared).await;
                        shared.open.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            })
        };
        Self {
            port,
            shared,
            accept,
        }
    }

    /// The request lines served, as the client sent them.
    pub fn requests(&self) -> Vec<String> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Client connections open now.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }
}

impl Drop for HttpProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn serve(client: TcpStream, shared: &Shared) {
    let mut client = BufReader::new(client);
    let mut line = String::new();
    if client.read_line(&mut line).await.unwrap_or(0) == 0 {
        return;
    }
    let request = line.trim_end().to_owned();
    let mut parts = request.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return;
    };
    let Some(rest) = target.strip_prefix("http://") else {
        let _ = client
            .get_mut()
            .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let Ok(mut upstream) = TcpStream::connect(authority).await else {
        let _ = client
            .get_mut()
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    shared.requests.lock().unwrap().push(request.clone());
    let head = format!("{method} {path} {version}\r\n");
    if upstream.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    // The headers and any body follow unchanged (what BufReader holds first).
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}
