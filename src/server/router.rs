//! Method name → handler. Each handler is registered under a method of the protocol's table
//! ([`exec_server_protocol::methods`]), so its params and result types are the method's own;
//! decoding the params, encoding the result and converting the handler's error into a JSON-RPC
//! error happen here, once for all methods.

use super::context::RequestCtx;
use crate::rpc::reply::Success;
use crate::rpc::{check_ids, decode, RpcError};
use exec_server_protocol::methods::{HttpRequest, Method};
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

/// What every handler receives first: the request's connection, session and reply.
pub(super) type Ctx = Arc<RequestCtx>;

type Reply = BoxFuture<'static, Result<Success, RpcError>>;

/// A handler of params `P` with result `R`: an async function of the context and the params
/// that fails with any error that converts into a JSON-RPC error.
pub(super) trait Handler<P, R>: Send + Sync + 'static {
    fn call(&self, ctx: Ctx, params: P, success: fn(R) -> Success) -> Reply;
}

impl<F, P, R, E, Fut> Handler<P, R> for F
where
    F: Fn(Ctx, P) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    R: 'static,
    RpcError: From<E>,
{
    fn call(&self, ctx: Ctx, params: P, success: fn(R) -> Success) -> Reply {
        let reply = self(ctx, params);
        Box::pin(async move { reply.await.map(success).map_err(RpcError::from) })
    }
}

type Erased = Box<dyn Fn(Ctx, Option<Value>) -> Reply + Send + Sync>;

#[derive(Default)]
pub(super) struct Router {
    handlers: HashMap<&'static str, Erased>,
}

impl Router {
    /// Registers the handler of method `M`.
    pub(super) fn request<M: Method>(&mut self, handler: impl Handler<M::Params, M::Result>)
    where
        M::Params: 'static,
        M::Result: 'static,
    {
        self.insert::<M::Params, _>(M::NAME, handler, |result| {
            Success::Json(serde_json::to_value(result).expect("wire types always serialize"))
        });
    }

    /// Registers the handler of method `M` that builds its reply itself: a result too large to
    /// pass through a typed value and `serde_json` again, or one with a binary chunk.
    pub(super) fn request_raw<M: Method>(&mut self, handler: impl Handler<M::Params, Success>)
    where
        M::Params: 'static,
    {
        self.insert::<M::Params, _>(M::NAME, handler, |success| success);
    }

    fn insert<P: DeserializeOwned + 'static, R: 'static>(
        &mut self,
        name: &'static str,
        handler: impl Handler<P, R>,
        success: fn(R) -> Success,
    ) {
        let erased: Erased = Box::new(move |ctx, params| match decode(params) {
            Ok(params) => handler.call(ctx, params, success),
            Err(error) => Box::pin(std::future::ready(Err(error))),
        });
        let previous = self.handlers.insert(name, erased);
        assert!(previous.is_none(), "`{name}` has two handlers");
    }

    #[cfg(test)]
    pub(super) fn serves(&self, method: &str) -> bool {
        self.handlers.contains_key(method)
    }

    pub(super) async fn dispatch(
        &self,
        ctx: Ctx,
        method: &str,
        params: Option<Value>,
    ) -> Result<Success, RpcError> {
        tracing::debug!(method, connection = ctx.connection.id, "request");
        let daemon = ctx.connection.daemon.clone();
        let session = ctx.session.clone();
        let outcome = self.route(ctx, method, params).await;
        if let Err(error) = &outcome {
            daemon.metrics.error(error.code);
            daemon
                .refusals
                .record(method, error, &crate::audit::log_digest(&session.id));
        }
        outcome
    }

    async fn route(
        &self,
        ctx: Ctx,
        method: &str,
        params: Option<Value>,
    ) -> Result<Success, RpcError> {
        check_ids(params.as_ref())?;
        let (&name, handler) = self
            .handlers
            .get_key_value(method)
            .ok_or_else(|| RpcError::method_not_found(method))?;
        let metrics = ctx.connection.daemon.metrics;
        if name.starts_with("fs/") {
            metrics.fs_call(name);
        } else if name == HttpRequest::NAME {
            metrics.http_calls.inc();
        }
        handler(ctx, params).await
    }
}
