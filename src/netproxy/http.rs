//! The proxy's HTTP listener: absolute-form requests forwarded (HTTP/1.1 to the origin), and
//! CONNECT tunnels; a refusal is codex's 403 with `x-proxy-error`.

use super::{connect, Block, Proxy, Request};
use bytes::Bytes;
use exec_server_protocol::network::NetworkProtocol;
use http_body_util::{combinators::BoxBody, BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

type Body = BoxBody<Bytes, hyper::Error>;

/// Headers for the proxy alone, never forwarded (RFC 9110 §7.6.1 and the proxy's own).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

pub(super) async fn serve(proxy: Arc<Proxy>, stream: tokio::net::TcpStream, client: SocketAddr) {
    let service = hyper::service::service_fn(move |request| {
        let proxy = proxy.clone();
        async move { Ok::<_, Infallible>(handle(&proxy, request, client).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
}

async fn handle(
    proxy: &Proxy,
    request: hyper::Request<Incoming>,
    client: SocketAddr,
) -> Response<Body> {
    let authority = request.uri().authority().cloned();
    let Some(authority) = authority else {
        return plain(
            StatusCode::BAD_REQUEST,
            "an absolute URI or CONNECT authority is required",
        );
    };
    let connecting = request.method() == Method::CONNECT;
    if !connecting && request.uri().scheme_str() != Some("http") {
        return plain(
            StatusCode::BAD_REQUEST,
            "only http:// URIs are proxied; use CONNECT",
        );
    }
    let port = authority
        .port_u16()
        .unwrap_or(if connecting { 443 } else { 80 });
    let protocol = match connecting {
        true => NetworkProtocol::HttpsConnect,
        false => NetworkProtocol::Http,
    };
    let method = Some(request.method().as_str());
    let asked = Request::new(protocol, authority.host(), port, method, client);
    let addresses = match proxy.decide(&asked).await {
        Ok(addresses) => addresses,
        Err(block) => return blocked(&block, &asked, connecting),
    };
    let upstream = match connect(&addresses).await {
        Ok(upstream) => upstream,
        Err(err) => return plain(StatusCode::BAD_GATEWAY, &format!("connecting: {err}")),
    };
    match connecting {
        true => tunnel(request, upstream),
        false => forward(request, upstream).await,
    }
}

/// Answers 200 and splices the client's upgraded connection to `upstream`.
fn tunnel(
    request: hyper::Request<Incoming>,
    mut upstream: tokio::net::TcpStream,
) -> Response<Body> {
    tokio::spawn(async move {
        if let Ok(upgraded) = hyper::upgrade::on(request).await {
            let mut upgraded = TokioIo::new(upgraded);
            let _ = tokio::io::copy_bidirectional(&mut upgraded, &mut upstream).await;
        }
    });
    Response::new(empty())
}

/// Sends `request` to the origin on `upstream` in origin form and returns its response.
async fn forward(
    mut request: hyper::Request<Incoming>,
    upstream: tokio::net::TcpStream,
) -> Response<Body> {
    let host = request
        .uri()
        .authority()
        .map(|authority| authority.as_str().to_owned());
    let origin_form = request
        .uri()
        .path_and_query()
        .map_or("/", |path| path.as_str())
        .to_owned();
    *request.uri_mut() = match origin_form.parse() {
        Ok(uri) => uri,
        Err(_) => return plain(StatusCode::BAD_REQUEST, "bad request target"),
    };
    let headers = request.headers_mut();
    for name in HOP_BY_HOP {
        headers.remove(*name);
    }
    if let Some(host) = host.and_then(|host| HeaderValue::from_str(&host).ok()) {
        headers.entry(HOST).or_insert(host);
    }
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(handshake) => handshake,
            Err(err) => return plain(StatusCode::BAD_GATEWAY, &format!("origin: {err}")),
        };
    tokio::spawn(connection);
    match sender.send_request(request).await {
        Ok(response) => response.map(|body| body.boxed()),
        Err(err) => plain(StatusCode::BAD_GATEWAY, &format!("origin: {err}")),
    }
}

/// The JSON account of a refused plain request, members in codex's order.
#[derive(serde::Serialize)]
struct Refusal<'a> {
    status: &'static str,
    host: &'a str,
    reason: &'a str,
    decision: &'static str,
    source: &'static str,
    protocol: &'static str,
    port: u16,
    message: &'static str,
}

/// codex's refusal: 403, `x-proxy-error`, and for a plain request its JSON account.
fn blocked(block: &Block, asked: &Request<'_>, connecting: bool) -> Response<Body> {
    let mut response = match connecting {
        true => plain(StatusCode::FORBIDDEN, &format!("{}\n", block.header)),
        false => {
            let body = Refusal {
                status: "blocked",
                host: &asked.host,
                reason: &block.reason,
                decision: block.decision,
                source: block.source,
                protocol: "http",
                port: asked.port,
                message: block.message,
            };
            let body = serde_json::to_string(&body).expect("a refusal serializes");
            let mut response = Response::new(full(body));
            *response.status_mut() = StatusCode::FORBIDDEN;
            let json = HeaderValue::from_static("application/json");
            response.headers_mut().insert(CONTENT_TYPE, json);
            response
        }
    };
    let header = HeaderValue::from_static(block.header);
    response.headers_mut().insert("x-proxy-error", header);
    response
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut response = Response::new(full(text.to_owned()));
    *response.status_mut() = status;
    let text_plain = HeaderValue::from_static("text/plain");
    response.headers_mut().insert(CONTENT_TYPE, text_plain);
    response
}

fn full(text: String) -> Body {
    Full::new(Bytes::from(text))
        .map_err(|never| match never {})
        .boxed()
}

fn empty() -> Body {
    full(String::new())
}
