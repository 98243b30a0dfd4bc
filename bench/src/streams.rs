//! A neighbour whose client never reads: one session streaming `cat /dev/zero` on a WebSocket
//! that is never read, so the daemon holds its output back (outbound budget, retention) while
//! another session's stream is measured beside it (`stream_slow_neighbour_vs_alone`).

use futures::SinkExt as _;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub(crate) struct Stalled(Ws);

impl Stalled {
    /// Connects to `url`, starts the flood and reads nothing from then on (not even the
    /// replies: the requests are pipelined).
    pub(crate) async fn start(url: &str) -> anyhow::Result<Self> {
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await?;
        let messages = [
            json!({"id": 1, "method": "initialize", "params": {"clientName": "stalled"}}),
            json!({"method": "initialized"}),
            json!({"id": 2, "method": "process/start", "params": {
                "processId": "flood", "argv": ["cat", "/dev/zero"], "cwd": "file:///",
                "env": {}, "tty": false}}),
        ];
        for message in messages {
            ws.send(Message::text(message.to_string())).await?;
        }
        // Until its queue and retention are full and the flood is held back.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        Ok(Self(ws))
    }

    /// Kills the flood (requests are still read from a connection that reads nothing) and
    /// drops the connection.
    pub(crate) async fn stop(mut self) -> anyhow::Result<()> {
        let kill = json!({"id": 3, "method": "process/terminate",
            "params": {"processId": "flood"}});
        self.0.send(Message::text(kill.to_string())).await?;
        // Time for the daemon to read it before the connection goes.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        Ok(())
    }
}
