//! Holds the Rust messages to our .proto files (`proto/envd/`), the definitions a Connect client
//! is given. For every message of the .proto files, a JSON document setting every field (each
//! variant of its oneofs in turn) is made from the .proto alone; the Rust type serving that
//! message must read it and write it back unchanged (the JSON names agree), and its binary
//! encoding, read back by the .proto's field numbers and types alone, must say the same (the
//! numbers, wire types and zigzag agree). Below them, the mapping's cases spelled out.

use super::*;
use base64::Engine as _;
use prost::Message as _;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

const PROCESS: &str = include_str!("../../../proto/envd/process/process.proto");
const FILESYSTEM: &str = include_str!("../../../proto/envd/filesystem/filesystem.proto");
const TIMESTAMP: &str = "google.protobuf.Timestamp";
const SAMPLE_TIME: &str = "2026-01-02T03:04:05.000000006Z";

#[derive(Debug)]
struct Field {
    name: String,
    number: u64,
    /// The type's full name for messages and enums, else the scalar's name.
    ty: String,
    repeated: bool,
    /// A `map<string, string>`.
    map: bool,
    oneof: Option<String>,
}

/// Messages and enums by full name (`process.ProcessEvent.EndEvent`).
#[derive(Default)]
struct Schema {
    messages: HashMap<String, Vec<Field>>,
    enums: HashMap<String, Vec<(String, i64)>>,
}

fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split("//").next().unwrap_or("");
        let spaced: String = (line.chars())
            .flat_map(|c| match c {
                '{' | '}' | ';' | '=' | '<' | '>' | ',' => vec![' ', c, ' '],
                c => vec![c],
            })
            .collect();
        out.extend(spaced.split_whitespace().map(str::to_owned));
    }
    out
}

impl Schema {
    fn parse(texts: &[&str]) -> Self {
        let mut schema = Schema::default();
        for text in texts {
            let tokens = tokens(text);
            let package = (tokens.iter().position(|t| t == "package"))
                .map(|at| tokens[at + 1].clone())
                .expect("a package");
            let mut at = 0;
            while at < tokens.len() {
                at = match tokens[at].as_str() {
                    "message" => schema.message(&tokens, at, &package),
                    "enum" => schema.enumeration(&tokens, at, &package),
                    "service" => skip_block(&tokens, at + 2),
                    _ => at + 1,
                };
            }
        }
        schema.resolve();
        schema
    }

    /// Reads the message at `tokens[at]` (and those nested in it); returns where it ends.
    fn message(&mut self, tokens: &[String], at: usize, scope: &str) -> usize {
        let name = format!("{scope}.{}", tokens[at + 1]);
        let (mut at, mut fields, mut oneof) = (at + 3, Vec::new(), None);
        loop {
            match tokens[at].as_str() {
                "}" if oneof.is_some() => (oneof, at) = (None, at + 1),
                "}" => break,
                "message" => at = self.message(tokens, at, &name),
                "enum" => at = self.enumeration(tokens, at, &name),
                "oneof" => (oneof, at) = (Some(tokens[at + 1].clone()), at + 3),
                "map" => {
                    // map < string , string > NAME = N ;
                    let field = field(&tokens[at + 6], &tokens[at + 8], "string", &name);
                    fields.push(Field { map: true, ..field });
                    at += 10;
                }
                label => {
                    let labelled = matches!(label, "optional" | "repeated");
                    let at_type = at + usize::from(labelled);
                    let mut field = field(
                        &tokens[at_type + 1],
                        &tokens[at_type + 3],
                        &tokens[at_type],
                        &name,
                    );
                    field.repeated = label == "repeated";
                    field.oneof = oneof.clone();
                    fields.push(field);
                    at = at_type + 5;
                }
            }
        }
        self.messages.insert(name, fields);
        at + 1
    }

    fn enumeration(&mut self, tokens: &[String], at: usize, scope: &str) -> usize {
        let name = format!("{scope}.{}", tokens[at + 1]);
        let mut values = Vec::new();
        let mut at = at + 3;
        while tokens[at] != "}" {
            values.push((
                tokens[at].clone(),
                tokens[at + 2].parse().expect("a number"),
            ));
            at += 4;
        }
        self.enums.insert(name, values);
        at + 1
    }

    /// Each field's type named in full, looked up from the innermost scope out.
    fn resolve(&mut self) {
        let known: Vec<String> = (self.messages.keys().chain(self.enums.keys()))
            .cloned()
            .collect();
        for (message, fields) in &mut self.messages {
            for field in fields {
                if field.ty.contains('.') || is_scalar(&field.ty) {
                    continue;
                }
                let mut scope = message.as_str();
                field.ty = loop {
                    let candidate = format!("{scope}.{}", field.ty);
                    if known.contains(&candidate) {
                        break candidate;
                    }
                    scope = scope.rsplit_once('.').expect("the type is defined").0;
                };
            }
        }
    }
}

fn field(name: &str, number: &str, ty: &str, message: &str) -> Field {
    let number = number
        .parse()
        .unwrap_or_else(|_| panic!("{message}.{name}'s number"));
    Field {
        name: name.to_owned(),
        number,
        ty: ty.to_owned(),
        repeated: false,
        map: false,
        oneof: None,
    }
}

fn skip_block(tokens: &[String], mut at: usize) -> usize {
    let mut depth = 0;
    loop {
        match tokens[at].as_str() {
            "{" => depth += 1,
            "}" if depth == 1 => return at + 1,
            "}" => depth -= 1,
            _ => {}
        }
        at += 1;
    }
}

fn is_scalar(ty: &str) -> bool {
    matches!(
        ty,
        "string" | "bytes" | "bool" | "uint32" | "int32" | "sint32" | "int64"
    )
}

/// proto3 JSON's name of a field: lowerCamelCase.
fn json_name(name: &str) -> String {
    let mut parts = name.split('_');
    let first = parts.next().unwrap_or_default().to_owned();
    parts.fold(first, |mut out, part| {
        let mut chars = part.chars();
        out.extend(chars.next().map(|c| c.to_ascii_uppercase()));
        out.extend(chars);
        out
    })
}

impl Schema {
    /// How many documents cover `message`: one per variant of its longest oneof.
    fn variants(&self, message: &str) -> usize {
        let mut sizes: HashMap<&str, usize> = HashMap::new();
        for field in &self.messages[message] {
            if let Some(oneof) = &field.oneof {
                *sizes.entry(oneof).or_default() += 1;
            }
        }
        sizes.into_values().max().unwrap_or(1)
    }

    /// A document of `message` setting every field to a value other than its default, and
    /// variant `variant` of each oneof.
    fn sample(&self, message: &str, variant: usize) -> Value {
        let mut out = Map::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for field in &self.messages[message] {
            if let Some(oneof) = &field.oneof {
                let index = seen.entry(oneof).or_default();
                *index += 1;
                let count = (self.messages[message].iter())
                    .filter(|f| f.oneof == field.oneof)
                    .count();
                if *index - 1 != variant % count {
                    continue;
                }
            }
            let value = match () {
                _ if field.map => json!({ "k": "v" }),
                _ if field.repeated => json!([self.value(&field.ty, &field.name)]),
                _ => self.value(&field.ty, &field.name),
            };
            out.insert(json_name(&field.name), value);
        }
        Value::Object(out)
    }

    fn value(&self, ty: &str, name: &str) -> Value {
        match ty {
            "string" => json!(format!("{name}-x")),
            "bytes" => json!("aGkh"),
            "bool" => json!(true),
            "uint32" => json!(7),
            "int32" | "sint32" => json!(-3),
            "int64" => json!("-5"),
            TIMESTAMP => json!(SAMPLE_TIME),
            _ if self.enums.contains_key(ty) => json!(self.enums[ty][1].0),
            _ => self.sample(ty, 0),
        }
    }
}

fn varint(bytes: &mut &[u8]) -> u64 {
    prost::encoding::decode_varint(bytes).expect("a varint")
}

fn length_delimited<'a>(bytes: &mut &'a [u8]) -> &'a [u8] {
    let len = varint(bytes) as usize;
    let (value, rest) = bytes.split_at(len);
    *bytes = rest;
    value
}

impl Schema {
    /// `bytes` read as a `message` by the .proto's numbers and types alone, as a JSON document.
    fn decode(&self, message: &str, mut bytes: &[u8]) -> Value {
        if message == TIMESTAMP {
            let time = Timestamp::decode(bytes).expect("a timestamp");
            return serde_json::to_value(time).unwrap();
        }
        let mut out = Map::new();
        while !bytes.is_empty() {
            let key = varint(&mut bytes);
            let (number, wire_type) = (key >> 3, key & 7);
            let field = (self.messages[message].iter())
                .find(|field| field.number == number)
                .unwrap_or_else(|| panic!("{message} has no field {number}"));
            let length_delimited_type = field.map
                || matches!(field.ty.as_str(), "string" | "bytes")
                || self.messages.contains_key(&field.ty)
                || field.ty == TIMESTAMP;
            let expected = if length_delimited_type { 2 } else { 0 };
            assert_eq!(wire_type, expected, "{message}.{}'s wire type", field.name);
            let value = if expected == 2 {
                let data = length_delimited(&mut bytes);
                self.decode_len(field, data)
            } else {
                self.decode_varint(field, varint(&mut bytes))
            };
            let name = json_name(&field.name);
            match (field.map, field.repeated) {
                (true, _) => {
                    let entries = out.entry(name).or_insert_with(|| json!({}));
                    let (key, value) = value.as_array().unwrap().split_at(1);
                    entries[key[0].as_str().unwrap()] = value[0].clone();
                }
                (_, true) => {
                    let items = out.entry(name).or_insert_with(|| json!([]));
                    items.as_array_mut().unwrap().push(value);
                }
                _ => drop(out.insert(name, value)),
            }
        }
        Value::Object(out)
    }

    fn decode_len(&self, field: &Field, data: &[u8]) -> Value {
        match field.ty.as_str() {
            _ if field.map => {
                // A map entry: key 1, value 2, both strings here.
                let entry = self.decode_map_entry(data);
                json!([entry.0, entry.1])
            }
            "string" => json!(std::str::from_utf8(data).expect("UTF-8")),
            "bytes" => json!(base64::engine::general_purpose::STANDARD.encode(data)),
            ty => self.decode(ty, data),
        }
    }

    fn decode_map_entry(&self, mut data: &[u8]) -> (String, String) {
        let mut entry = (String::new(), String::new());
        while !data.is_empty() {
            let key = varint(&mut data);
            let text = String::from_utf8(length_delimited(&mut data).to_vec()).unwrap();
            match key {
                0x0a => entry.0 = text,
                0x12 => entry.1 = text,
                other => panic!("a map entry's key {other}"),
            }
        }
        entry
    }

    fn decode_varint(&self, field: &Field, raw: u64) -> Value {
        match field.ty.as_str() {
            "bool" => json!(raw != 0),
            "uint32" => json!(u32::try_from(raw).expect("a uint32")),
            "int32" => json!(raw as i64 as i32),
            "sint32" => json!(((raw >> 1) as i64) ^ -((raw & 1) as i64)),
            "int64" => json!((raw as i64).to_string()),
            ty => {
                let values = &self.enums[ty];
                let found = values.iter().find(|(_, number)| *number as u64 == raw);
                json!(found.expect("a value of the enum").0)
            }
        }
    }
}

/// Holds `T` to the .proto's `message` (see the module's comment).
fn check<T: crate::envd::connect::Message + PartialEq + std::fmt::Debug>(
    schema: &Schema,
    message: &str,
) {
    for variant in 0..schema.variants(message) {
        let document = schema.sample(message, variant);
        let value: T = serde_json::from_value(document.clone())
            .unwrap_or_else(|err| panic!("{message} from {document}: {err}"));
        let written = serde_json::to_value(&value).unwrap();
        assert_eq!(written, document, "{message} in JSON");
        let bytes = value.encode_to_vec();
        assert_eq!(
            schema.decode(message, &bytes),
            document,
            "{message} in binary"
        );
        assert_eq!(T::decode(&bytes[..]).unwrap(), value, "{message} decoded");
    }
}

#[test]
fn every_message_agrees_with_the_proto_files() {
    let schema = Schema::parse(&[PROCESS, FILESYSTEM]);
    let mut checked = Vec::new();
    macro_rules! agree {
        ($($rust:ty => [$($message:literal),+]),+ $(,)?) => {$($(
            check::<$rust>(&schema, $message);
            checked.push($message.to_owned());
        )+)+};
    }
    agree! {
        Empty => [
            "process.ListRequest", "process.UpdateResponse", "process.ProcessEvent.KeepAlive",
            "process.SendInputResponse", "process.StreamInputRequest.KeepAlive",
            "process.StreamInputResponse", "process.SendSignalResponse",
            "process.CloseStdinResponse", "filesystem.RemoveResponse",
            "filesystem.WatchDirResponse.StartEvent", "filesystem.WatchDirResponse.KeepAlive",
            "filesystem.RemoveWatcherResponse"
        ],
        Pty => ["process.PTY"],
        PtySize => ["process.PTY.Size"],
        ProcessConfig => ["process.ProcessConfig"],
        ProcessInfo => ["process.ProcessInfo"],
        ListResponse => ["process.ListResponse"],
        StartRequest => ["process.StartRequest"],
        UpdateRequest => ["process.UpdateRequest"],
        ProcessEvent => ["process.ProcessEvent"],
        StartEvent => ["process.ProcessEvent.StartEvent"],
        DataEvent => ["process.ProcessEvent.DataEvent"],
        EndEvent => ["process.ProcessEvent.EndEvent"],
        ProcessEventResponse => ["process.StartResponse", "process.ConnectResponse"],
        SendInputRequest => ["process.SendInputRequest"],
        ProcessInput => ["process.ProcessInput"],
        StreamInputRequest => ["process.StreamInputRequest"],
        Selected => [
            "process.StreamInputRequest.StartEvent", "process.CloseStdinRequest",
            "process.ConnectRequest"
        ],
        StreamInputData => ["process.StreamInputRequest.DataEvent"],
        SendSignalRequest => ["process.SendSignalRequest"],
        ProcessSelector => ["process.ProcessSelector"],
        MoveRequest => ["filesystem.MoveRequest"],
        EntryResponse => [
            "filesystem.MoveResponse", "filesystem.MakeDirResponse", "filesystem.StatResponse"
        ],
        PathRequest => [
            "filesystem.MakeDirRequest", "filesystem.RemoveRequest", "filesystem.StatRequest"
        ],
        EntryInfo => ["filesystem.EntryInfo"],
        ListDirRequest => ["filesystem.ListDirRequest"],
        ListDirResponse => ["filesystem.ListDirResponse"],
        WatchRequest => ["filesystem.WatchDirRequest", "filesystem.CreateWatcherRequest"],
        FilesystemEvent => ["filesystem.FilesystemEvent"],
        WatchDirResponse => ["filesystem.WatchDirResponse"],
        WatcherId => [
            "filesystem.CreateWatcherResponse", "filesystem.GetWatcherEventsRequest",
            "filesystem.RemoveWatcherRequest"
        ],
        GetWatcherEventsResponse => ["filesystem.GetWatcherEventsResponse"],
    }
    let mut defined: Vec<_> = schema.messages.keys().cloned().collect();
    defined.sort();
    checked.sort();
    assert_eq!(
        checked, defined,
        "every message of the .proto files has its Rust type"
    );
}

#[test]
fn the_check_catches_a_wrong_number_or_encoding() {
    let schema = Schema::parse(&[PROCESS, FILESYSTEM]);
    // `exit_code` is sint32: an int32 encoding of the same value reads differently.
    let as_int32 = [
        0x08, 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
    ];
    let read = schema.decode("process.ProcessEvent.EndEvent", &as_int32);
    assert_ne!(read["exitCode"], json!(-3));
    let zigzag = [0x08, 0x05];
    let read = schema.decode("process.ProcessEvent.EndEvent", &zigzag);
    assert_eq!(read["exitCode"], json!(-3));
    let wrong_number = std::panic::catch_unwind(|| schema.decode("process.PTY.Size", &[0x18, 1]));
    assert!(wrong_number.is_err(), "field 3 is not in PTY.Size");
}

#[test]
fn events_and_requests_use_the_proto3_json_mapping() {
    let end = ProcessEventResponse::from(Event::End(EndEvent {
        exit_code: -1,
        exited: false,
        status: "signal: killed".into(),
        error: Some("signal: killed".into()),
    }));
    assert_eq!(
        serde_json::to_string(&end).unwrap(),
        r#"{"event":{"end":{"exitCode":-1,"exited":false,"status":"signal: killed","error":"signal: killed"}}}"#
    );
    let data = ProcessEvent {
        event: Some(Event::Data(DataEvent {
            output: Some(Output::Stdout(Bytes::from_static(b"hi"))),
        })),
    };
    assert_eq!(
        serde_json::to_string(&data).unwrap(),
        r#"{"data":{"stdout":"aGk="}}"#
    );
    let request: SendSignalRequest =
        serde_json::from_str(r#"{"process":{"pid":7},"signal":"SIGNAL_SIGKILL"}"#).unwrap();
    assert_eq!(request.process.selector, Some(Selector::Pid(7)));
    assert_eq!(request.signal(), Signal::Sigkill);
    let request: SendSignalRequest = serde_json::from_str(r#"{"signal":15}"#).unwrap();
    assert_eq!(request.signal(), Signal::Sigterm);
    let input: SendInputRequest =
        serde_json::from_str(r#"{"process":{"tag":"t"},"input":{"stdin":"aGk"}}"#).unwrap();
    let stdin = input.input.and_then(|input| input.input);
    assert_eq!(stdin, Some(Input::Stdin(Bytes::from_static(b"hi"))));
}

#[test]
fn the_binary_codec_decodes_what_it_encodes() {
    let request = SendSignalRequest {
        process: ProcessSelector {
            selector: Some(Selector::Tag("t".into())),
        },
        signal: Signal::Sigterm.into(),
    };
    let bytes = request.encode_to_vec();
    // Field 1 (LEN) holding field 2 (LEN) "t"; field 2 (varint) 15.
    assert_eq!(bytes, [0x0a, 0x03, 0x12, 0x01, b't', 0x10, 15]);
    assert_eq!(SendSignalRequest::decode(&bytes[..]).unwrap(), request);
}
