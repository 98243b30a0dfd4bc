//! A method's result and the reply message it becomes.

use super::envelope;
use super::outbound::{Message, Outbound};
use super::payload::Payload;
use super::RpcError;
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::binary::CHUNK_MEMBER;
use serde_json::{Map, Value};

pub(crate) enum Success {
    Json(Value),
    /// A result and the bytes of its `chunk` member, kept apart so that the reply is written
    /// without a `serde_json::Value` ever holding them (see [`Outbound::with_chunk`]).
    WithChunk {
        result: Map<String, Value>,
        chunk: Payload,
    },
}

impl Success {
    /// The whole result as JSON, the chunk in base64 (a batch replies with one array).
    pub(crate) fn into_value(self) -> Value {
        match self {
            Self::Json(value) => value,
            Self::WithChunk { mut result, chunk } => {
                result.insert(
                    CHUNK_MEMBER.into(),
                    Base64Bytes::encode(chunk.bytes()).into(),
                );
                Value::Object(result)
            }
        }
    }
}

/// The reply to request `id`, in the dialect of the request and the framing of the connection.
pub(crate) fn message(
    outbound: &Outbound,
    id: Value,
    outcome: Result<Success, RpcError>,
    strict: bool,
) -> Message {
    match outcome {
        // `result` is the envelope's last member (members serialize in sorted order).
        Ok(Success::WithChunk { result, chunk }) => outbound.with_chunk(
            envelope::reply(id, Ok(Value::Object(result)), strict).to_string(),
            chunk,
        ),
        outcome => {
            Message::Text(envelope::reply(id, outcome.map(Success::into_value), strict).to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_chunked_reply_reads_like_the_generic_one_in_both_dialects() {
        let (outbound, _queue) = Outbound::new(false, 1 << 20);
        for strict in [false, true] {
            let outcome = || {
                Ok(Success::WithChunk {
                    result: Map::from_iter([("eof".to_owned(), json!(false))]),
                    chunk: Payload::from(&b"\xffdata"[..]),
                })
            };
            let Message::Text(text) = message(&outbound, json!("r1"), outcome(), strict) else {
                panic!("binary without the opt-in");
            };
            let generic = envelope::reply(json!("r1"), outcome().map(Success::into_value), strict);
            assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), generic);
        }
    }
}
