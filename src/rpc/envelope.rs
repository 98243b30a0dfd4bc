//! Classifies incoming JSON values and builds outgoing ones, in both dialects: Codex (no
//! `"jsonrpc"` member) and strict JSON-RPC 2.0 (a request that carries `"jsonrpc":"2.0"` gets it
//! back in its reply).

use super::RpcError;
use serde_json::{Map, Value};

/// The id the reference uses for errors that belong to no request.
pub const NO_ID: i64 = -1;

#[derive(Debug)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
        strict: bool,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// A reply from the client to one of the daemon's requests: its `result` or `error`.
    Reply {
        id: Value,
        reply: Result<Value, Value>,
    },
    Invalid {
        id: Value,
        error: RpcError,
        strict: bool,
    },
}

pub fn classify(value: Value) -> Incoming {
    let Value::Object(mut object) = value else {
        return Incoming::Invalid {
            id: Value::from(NO_ID),
            error: RpcError::invalid_request("a JSON-RPC message must be an object or an array"),
            strict: false,
        };
    };
    let strict = match object.get("jsonrpc") {
        None => false,
        Some(Value::String(version)) if version == "2.0" => true,
        Some(_) => {
            let id = object
                .remove("id")
                .filter(valid_id)
                .unwrap_or(Value::from(NO_ID));
            return Incoming::Invalid {
                id,
                error: RpcError::invalid_request("`jsonrpc` must be \"2.0\" when present"),
                strict: true,
            };
        }
    };
    let id = object.remove("id");
    let params = object.remove("params");
    match (object.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) if valid_id(&id) => Incoming::Request {
            id,
            method,
            params,
            strict,
        },
        (Some(Value::String(_)), Some(_)) => Incoming::Invalid {
            id: if strict {
                Value::Null
            } else {
                Value::from(NO_ID)
            },
            error: RpcError::invalid_request("a request id must be a string or an integer"),
            strict,
        },
        (Some(Value::String(method)), None) => Incoming::Notification { method, params },
        (None, Some(id)) if object.contains_key("result") || object.contains_key("error") => {
            let reply = match object.remove("error") {
                Some(error) => Err(error),
                None => Ok(object.remove("result").unwrap_or(Value::Null)),
            };
            Incoming::Reply { id, reply }
        }
        (_, id) => Incoming::Invalid {
            id: id.filter(valid_id).unwrap_or(Value::from(NO_ID)),
            error: RpcError::invalid_request("a JSON-RPC request needs a string `method`"),
            strict,
        },
    }
}

fn valid_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

pub fn reply(id: Value, outcome: Result<Value, RpcError>, strict: bool) -> Value {
    let mut object = Map::new();
    if strict {
        object.insert("jsonrpc".into(), Value::from("2.0"));
    }
    object.insert("id".into(), id);
    match outcome {
        Ok(result) => {
            object.insert("result".into(), result);
        }
        Err(error) => {
            let mut body = Map::new();
            body.insert("code".into(), Value::from(error.code));
            body.insert("message".into(), Value::from(error.message));
            if let Some(data) = error.data {
                body.insert("data".into(), data);
            }
            object.insert("error".into(), Value::Object(body));
        }
    }
    Value::Object(object)
}

pub fn error_without_request(error: RpcError) -> Value {
    reply(Value::from(NO_ID), Err(error), false)
}
