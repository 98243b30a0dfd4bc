//! A listener whose connections are served as plain HTTP/1.1 (keep-alive) and h2c (the envd
//! listeners, the sandboxd gRPC port): each holds a place of the listener's HTTP phase until
//! its first request's head has arrived, under the place's deadline, as a WebSocket
//! listener's does before its upgrade (`admission`).

use super::admission::{Admission, Peer};
use crate::config::Config;
use axum::Router;
use hyper::service::Service as _;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;

/// One listener's routes, and the places of its connections before their first request.
pub(crate) struct PendingHttp {
    app: TowerToHyperService<Router>,
    admission: Arc<Admission>,
    /// The deadline of an HTTP/1.1 request's head after the first (`--upgrade-timeout`).
    header_timeout: std::time::Duration,
    /// HTTP/2 pings, so that a vanished h2c peer's connection ends (`--ping-interval`).
    ping_interval: std::time::Duration,
}

impl PendingHttp {
    /// `app` behind the places of `config`'s HTTP phase, with its deadlines and pings.
    pub(crate) fn new(app: Router, config: &Config) -> Self {
        Self {
            app: TowerToHyperService::new(app),
            admission: Arc::new(Admission::new(config)),
            header_timeout: config.upgrade_timeout,
            ping_interval: config.ping_interval,
        }
    }

    /// Serves one connection, HTTP/1.1 or h2c (told apart by the HTTP/2 preface), for as long
    /// as the client keeps it: envd streams last as long as their commands. It holds a place
    /// until its first request's head arrived, and is closed if that takes longer than the
    /// place's deadline; on HTTP/1.1, each later request's head has `header_timeout`.
    pub(crate) fn serve<S>(&self, stream: S, from: Peer)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let mut place = match self.admission.admit(from) {
            Ok(place) => place,
            Err(full) => {
                tracing::debug!(?from, "{full}; closing");
                return;
            }
        };
        let deadline = place.timeout;
        let (arrived, first_request) = tokio::sync::oneshot::channel::<()>();
        let arrived = std::sync::Mutex::new(Some(arrived));
        let app = self.app.clone();
        let service = hyper::service::service_fn(move |request| {
            // A request's head is in: the place and the deadline go (dropping the sender).
            drop(arrived.lock().unwrap().take());
            app.call(request)
        });
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        (builder.http1())
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_timeout);
        (builder.http2())
            .timer(TokioTimer::new())
            .keep_alive_interval(self.ping_interval);
        tokio::spawn(async move {
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            // Held until the first request's head is in; closed at the deadline, or when a
            // newer connection took the place back (at a cap the oldest pending one yields).
            let first_request = async move {
                tokio::select! {
                    waited = tokio::time::timeout(deadline, first_request) => {
                        if waited.is_err() {
                            tracing::debug!(?from, "no request in {deadline:?}; closing");
                            return;
                        }
                    }
                    () = place.evicted() => {
                        tracing::debug!(?from, "cut short by a newer connection; closing");
                        return;
                    }
                }
                drop(place);
                std::future::pending::<()>().await
            };
            tokio::select! {
                _ = connection => {}
                () = first_request => {}
            }
        });
    }
}
