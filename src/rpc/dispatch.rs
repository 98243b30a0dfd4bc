//! Routes a request to the module that owns its method family.

use super::outbound::{Budget, Outbound};
use super::reply::Success;
use super::RpcError;
use crate::session::{Registry, Session};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// What every request handler may use: its connection and its session.
pub struct RequestCtx {
    pub connection: Arc<ConnectionShared>,
    pub session: Arc<Session>,
    after_reply: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
    /// Outbound budget held for the reply being built (see [`RequestCtx::reserve_reply`]).
    reserved: Mutex<Budget>,
}

/// The parts of a connection that outlive a single request.
pub struct ConnectionShared {
    pub id: u64,
    pub outbound: Outbound,
    pub registry: Arc<Registry>,
    /// Open `fs/open` handles and `fs/watch` watches of this connection.
    pub fs: crate::fs::ConnectionFs,
    /// Streamed `http/request` bodies; dropping it (the connection ended) stops them.
    pub http: crate::http::HttpStreams,
}

impl RequestCtx {
    pub fn new(connection: Arc<ConnectionShared>, session: Arc<Session>) -> Self {
        Self {
            connection,
            session,
            after_reply: Mutex::default(),
            reserved: Mutex::default(),
        }
    }

    /// Waits for `bytes` of the connection's outbound budget before a handler builds a large
    /// reply, so that the memory is held within the budget from the start: concurrent large
    /// replies take turns instead of all being built at once and then waiting to be queued.
    pub async fn reserve_reply(&self, bytes: usize) {
        let budget = self.connection.outbound.reserve(bytes).await;
        *self.reserved.lock().unwrap() = budget;
    }

    /// The budget reserved for the reply, for the connection to queue the reply within.
    pub(super) fn take_reserved(&self) -> Budget {
        std::mem::take(&mut *self.reserved.lock().unwrap())
    }

    /// Runs `hook` once this request's reply is queued on the connection, whatever the
    /// outcome, so anything the hook sends follows the reply.
    pub fn after_reply(&self, hook: impl FnOnce() + Send + 'static) {
        self.after_reply.lock().unwrap().push(Box::new(hook));
    }

    /// Called by the connection right after it queued the reply.
    pub(super) fn replied(self) {
        for hook in self.after_reply.into_inner().unwrap() {
            hook();
        }
    }

    /// Fails once another connection has resumed this session.
    pub fn ensure_attached(&self) -> Result<(), RpcError> {
        if self.session.attached_connection() == Some(self.connection.id) {
            Ok(())
        } else {
            Err(RpcError::invalid_request(
                "session has been resumed by another connection",
            ))
        }
    }
}

/// The family of a method is what precedes its first `/` (`process/start` → `process`).
pub fn family(method: &str) -> &str {
    method.split_once('/').map_or(method, |(family, _)| family)
}

/// Longest id a client may choose.
pub const MAX_ID_BYTES: usize = 256;

/// Params members that name something the client chose. A long one would be repeated in every
/// notification and error about it (a 1 MiB `processId` in every `process/output`).
const ID_MEMBERS: &[&str] = &["processId", "handleId", "watchId", "requestId", "writeId"];

fn check_ids(params: Option<&Value>) -> Result<(), RpcError> {
    let Some(Value::Object(params)) = params else {
        return Ok(());
    };
    for member in ID_MEMBERS {
        if let Some(Value::String(id)) = params.get(*member) {
            if id.len() > MAX_ID_BYTES {
                return Err(RpcError::invalid_params(format!(
                    "{member} is {} bytes long; the limit is {MAX_ID_BYTES} bytes",
                    id.len()
                )));
            }
        }
    }
    Ok(())
}

pub async fn dispatch(
    ctx: &RequestCtx,
    method: &str,
    params: Option<Value>,
) -> Result<Success, RpcError> {
    check_ids(params.as_ref())?;
    match family(method) {
        "process" => crate::process::methods::handle(ctx, method, params)
            .await
            .map(Success::Json),
        "fs" => crate::fs::methods::handle(ctx, method, params).await,
        "environment" => crate::environment::handle(ctx, method, params)
            .await
            .map(Success::Json),
        "http" => crate::http::methods::handle(ctx, method, params)
            .await
            .map(Success::Json),
        _ => Err(RpcError::method_not_found(method)),
    }
}

/// Decodes params; absent means null, and `{}` also serves methods that take none.
pub fn decode<T: DeserializeOwned>(params: Option<Value>) -> Result<T, RpcError> {
    let params = params.unwrap_or(Value::Null);
    let is_empty_object = params.as_object().is_some_and(|o| o.is_empty());
    match serde_json::from_value(params) {
        Ok(value) => Ok(value),
        Err(err) if is_empty_object => serde_json::from_value(Value::Null)
            .map_err(|_| RpcError::invalid_params(err.to_string())),
        Err(err) => Err(RpcError::invalid_params(err.to_string())),
    }
}

pub fn encode<T: Serialize>(result: Result<T, RpcError>) -> Result<Value, RpcError> {
    result.map(|value| serde_json::to_value(value).expect("wire types always serialize"))
}
