//! The proxy's SOCKS5 listener (`enableSocks5`): CONNECT only, no authentication, names
//! resolved here (`socks5h`), so the host policy sees the name the command asked for.

use super::{connect, Proxy, Request};
use exec_server_protocol::network::NetworkProtocol;
use fast_socks5::server::Socks5ServerProtocol;
use fast_socks5::util::target_addr::TargetAddr;
use fast_socks5::{ReplyError, Socks5Command};
use std::net::SocketAddr;
use std::sync::Arc;

pub(super) async fn serve(proxy: Arc<Proxy>, stream: tokio::net::TcpStream, client: SocketAddr) {
    let Ok(protocol) = Socks5ServerProtocol::accept_no_auth(stream).await else {
        return;
    };
    let Ok((protocol, command, target)) = protocol.read_command().await else {
        return;
    };
    if command != Socks5Command::TCPConnect {
        // UDP ASSOCIATE and BIND: the sandbox has no UDP, and nothing may listen for it.
        let _ = protocol.reply_error(&ReplyError::CommandNotSupported).await;
        return;
    }
    let (host, port) = match &target {
        TargetAddr::Ip(address) => (address.ip().to_string(), address.port()),
        TargetAddr::Domain(name, port) => (name.clone(), *port),
    };
    let asked = Request::new(NetworkProtocol::Socks5Tcp, &host, port, None, client);
    let addresses = match proxy.decide(&asked).await {
        Ok(addresses) => addresses,
        Err(_) => {
            let _ = protocol
                .reply_error(&ReplyError::ConnectionNotAllowed)
                .await;
            return;
        }
    };
    let mut upstream = match connect(&addresses).await {
        Ok(upstream) => upstream,
        Err(_) => {
            let _ = protocol.reply_error(&ReplyError::HostUnreachable).await;
            return;
        }
    };
    let Ok(bound) = upstream.local_addr() else {
        return;
    };
    if let Ok(mut stream) = protocol.reply_success(bound).await {
        let _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream).await;
    }
}
