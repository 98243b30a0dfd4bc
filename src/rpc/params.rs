//! Request params: the checks every method shares, and decoding into a method's own type.

use super::RpcError;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Longest id a client may choose.
const MAX_ID_BYTES: usize = 256;

/// Params members that name something the client chose. A long one would be repeated in every
/// notification and error about it (a 1 MiB `processId` in every `process/output`).
const ID_MEMBERS: &[&str] = &["processId", "handleId", "watchId", "requestId", "writeId"];

pub(crate) fn check_ids(params: Option<&Value>) -> Result<(), RpcError> {
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
