//! The bounded decoder every inbound frame goes through, as upstream's: a duplicate object key
//! at any depth fails the whole message (two parsers must never disagree on what a request
//! means, and last-key-wins is one reading of many), and a budget of JSON values bounds what a
//! small frame of compact arrays (`[[],[],...]`) may cost in heap. One pass straight into a
//! `serde_json::Value`, as `serde_json::from_slice` would build it.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};
use std::fmt;

/// Most JSON values one message may hold, counting every scalar, array and object once (keys
/// are not values). Upstream's figure: its largest `fs/walk` reply needs about 150 000.
pub const MAX_VALUES: usize = 256 * 1024;

/// Decodes one message: an object, or a JSON-RPC 2.0 batch (an array whose members all carry
/// `"jsonrpc":"2.0"`; the Codex dialect has no batches). Its errors read as upstream's
/// (serde_json's, then ` at line L column C`): `duplicate JSON object key `k``, `JSON-RPC
/// message exceeds the limit of 262144 JSON values`, and `expected a JSON-RPC object`.
pub fn parse_message(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut budget = MAX_VALUES;
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = Bounded {
        budget: &mut budget,
    }
    .deserialize(&mut deserializer)?;
    deserializer.end()?;
    match &value {
        Value::Object(_) => Ok(value),
        Value::Array(batch) if batch.iter().all(speaks_jsonrpc2) => Ok(value),
        _ => Err(de::Error::custom("expected a JSON-RPC object")),
    }
}

fn speaks_jsonrpc2(member: &Value) -> bool {
    member.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
}

/// One value, paid for from `budget` before it is read (so the error points where it starts).
struct Bounded<'a> {
    budget: &'a mut usize,
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        if *self.budget == 0 {
            return Err(de::Error::custom(format_args!(
                "JSON-RPC message exceeds the limit of {MAX_VALUES} JSON values"
            )));
        }
        *self.budget -= 1;
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element_seed(Bounded {
            budget: &mut *self.budget,
        })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match object.entry(key) {
                Entry::Vacant(slot) => {
                    slot.insert(map.next_value_seed(Bounded {
                        budget: &mut *self.budget,
                    })?);
                }
                Entry::Occupied(slot) => {
                    return Err(de::Error::custom(format_args!(
                        "duplicate JSON object key `{}`",
                        slot.key()
                    )));
                }
            }
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        parse_message(text.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn a_duplicate_key_at_any_depth_fails_the_message() {
        assert_eq!(
            error(r#"{"id":13,"a":1,"a":2}"#),
            "duplicate JSON object key `a` at line 1 column 18"
        );
        assert_eq!(
            error(r#"{"id":14,"method":"x","params":{"a":{"b":1,"b":2}}}"#),
            "duplicate JSON object key `b` at line 1 column 46"
        );
        // Escapes are resolved first: `a\u0062` is `ab`.
        assert!(
            error(r#"{"p":{"a\u0062":1,"ab":1}}"#).starts_with("duplicate JSON object key `ab`")
        );
        assert!(parse_message(br#"{"A":1,"a":1}"#).is_ok());
    }

    #[test]
    fn the_budget_counts_every_value_but_not_keys_or_string_length() {
        // The object, `id`, `method`, `params` and the array are five values.
        let zeros = |n: usize| {
            let body = vec!["0"; n].join(",");
            format!(r#"{{"id":1,"method":"m","params":{{"a":[{body}]}}}}"#)
        };
        assert!(parse_message(zeros(MAX_VALUES - 5).as_bytes()).is_ok());
        assert!(error(&zeros(MAX_VALUES - 4))
            .starts_with("JSON-RPC message exceeds the limit of 262144 JSON values at line 1"));
        let long = format!(r#"{{"a":"{}"}}"#, "x".repeat(MAX_VALUES + 1));
        assert!(parse_message(long.as_bytes()).is_ok());
    }

    #[test]
    fn the_top_level_is_an_object_or_a_jsonrpc2_batch() {
        assert_eq!(error("3"), "expected a JSON-RPC object");
        assert_eq!(error("\"x\""), "expected a JSON-RPC object");
        assert_eq!(error("not json"), "expected ident at line 1 column 2");
        assert_eq!(
            error(r#"[{"id":1,"method":"m"}]"#),
            "expected a JSON-RPC object"
        );
        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#;
        assert!(parse_message(batch.as_bytes()).is_ok());
        assert_eq!(error("{} x"), "trailing characters at line 1 column 4");
    }

    /// The fuzz target's invariant (fuzz/fuzz_targets/jsonrpc_decoder.rs) over its corpus and
    /// byte-level mutations of it: whatever the decoder accepts, serde_json reads alike, and
    /// what it refuses that serde_json accepts is a duplicate key, the budget or the top level.
    #[test]
    fn the_fuzz_corpus_and_its_mutations_decode_as_serde_json_reads_them() {
        let corpus =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/jsonrpc_decoder");
        let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(corpus)
            .unwrap()
            .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
            .collect();
        seeds.sort();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..20 {
            for seed in &seeds {
                let mut input = seed.clone();
                for _ in 0..round % 4 {
                    let at = next() as usize % (input.len() + 1);
                    match next() % 3 {
                        0 if at < input.len() => input[at] = next() as u8,
                        1 => input.insert(at, b"{}[]\",:0a\\"[next() as usize % 10]),
                        _ if at < input.len() => drop(input.remove(at)),
                        _ => {}
                    }
                }
                let plain = serde_json::from_slice::<Value>(&input);
                match parse_message(&input) {
                    Ok(value) => assert_eq!(plain.ok(), Some(value)),
                    Err(err) if plain.is_ok() => {
                        let why = err.to_string();
                        assert!(
                            why.starts_with("duplicate JSON object key")
                                || why == "expected a JSON-RPC object",
                            "{why} for {}",
                            String::from_utf8_lossy(&input)
                        );
                    }
                    Err(_) => {}
                }
            }
        }
    }

    #[test]
    fn it_builds_what_serde_json_builds() {
        let text = r#"{"a":[1,-2,3.5,1e300,"s\n",true,null,{"b":{}}],"c":18446744073709551615}"#;
        assert_eq!(
            parse_message(text.as_bytes()).ok(),
            serde_json::from_str::<Value>(text).ok()
        );
    }
}
