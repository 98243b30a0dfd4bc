//! envd's messages (our `proto/envd/process/process.proto` and `filesystem/filesystem.proto`,
//! written from e2b-dev/infra's `packages/envd/spec/`), each one Rust type serving both
//! codecs: prost's derive for the binary one (field tags from the .proto), serde for the proto3
//! JSON mapping (lowerCamelCase names, the proto names accepted where the SDKs send them,
//! `bytes` as base64, 64-bit integers as strings, enums by name, a oneof as the one field set).
//! A type serves every .proto message of its shape (`PathRequest` is `StatRequest`,
//! `MakeDirRequest` and `RemoveRequest`); the `agreement` tests hold them to the .proto files.
//!
//! In prost's shapes: an enum field is an `i32` (its getter gives the enum), a message field
//! an `Option` unless it is always sent (`required`, the same bytes as a set proto3 field), a
//! oneof an `Option` of its enum, which a message holding only the oneof shows as itself in
//! JSON (`#[serde(transparent)]`: `{"pid":7}`).

#[cfg(test)]
mod agreement;

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// `bytes` fields: base64 in JSON (standard or URL-safe, padded or not, as proto3 JSON allows).
mod base64_bytes {
    use super::*;

    pub(super) fn serialize<S: Serializer>(
        value: &Bytes,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        use base64::Engine as _;
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(value))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Bytes, D::Error> {
        use base64::engine::{general_purpose, DecodePaddingMode, GeneralPurpose};
        use base64::Engine as _;
        let text = String::deserialize(deserializer)?;
        let lenient = general_purpose::GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent);
        let standard = GeneralPurpose::new(&base64::alphabet::STANDARD, lenient);
        let url_safe = GeneralPurpose::new(&base64::alphabet::URL_SAFE, lenient);
        (standard.decode(&text).or_else(|_| url_safe.decode(&text)))
            .map(Bytes::from)
            .map_err(serde::de::Error::custom)
    }
}

/// An enum and the serde module of its fields (an `i32` in prost's shape): its value's name in
/// JSON; a name or a number accepted.
macro_rules! proto_enum {
    ($name:ident in $module:ident { $($variant:ident = $number:literal => $wire:literal),+ $(,)? }) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
        #[repr(i32)]
        pub(crate) enum $name {
            $($variant = $number),+
        }

        mod $module {
            use super::*;

            pub(super) fn serialize<S: Serializer>(value: &i32, serializer: S) -> Result<S::Ok, S::Error> {
                match $name::try_from(*value) {
                    $(Ok($name::$variant) => serializer.serialize_str($wire),)+
                    Err(_) => serializer.serialize_i32(*value),
                }
            }

            pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i32, D::Error> {
                match serde_json::Value::deserialize(deserializer)? {
                    $(serde_json::Value::String(s) if s == $wire => Ok($number),)+
                    $(serde_json::Value::Number(n) if n.as_i64() == Some($number) => Ok($number),)+
                    other => Err(serde::de::Error::custom(format!(
                        "unknown {} value {other}", stringify!($name)
                    ))),
                }
            }
        }
    };
}

/// `int64`: a string in JSON; a number accepted.
mod int64_string {
    use super::*;

    pub(super) fn serialize<S: Serializer>(value: &i64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&value.to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::String(text) => text.parse().map_err(serde::de::Error::custom),
            serde_json::Value::Number(n) => {
                (n.as_i64()).ok_or_else(|| serde::de::Error::custom(format!("{n} is not an int64")))
            }
            other => Err(serde::de::Error::custom(format!("{other} is not an int64"))),
        }
    }
}

// ---- process.proto ----

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct ProcessConfig {
    #[prost(string, tag = "1")]
    pub cmd: String,
    #[prost(string, repeated, tag = "2")]
    pub args: Vec<String>,
    #[prost(btree_map = "string, string", tag = "3")]
    pub envs: BTreeMap<String, String>,
    #[prost(string, optional, tag = "4")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// `PTY.Size`.
#[derive(Clone, Copy, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PtySize {
    #[prost(uint32, tag = "1")]
    pub cols: u32,
    #[prost(uint32, tag = "2")]
    pub rows: u32,
}

/// `PTY`.
#[derive(Clone, Copy, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Pty {
    #[prost(message, optional, tag = "1")]
    pub size: Option<PtySize>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct StartRequest {
    #[prost(message, required, tag = "1")]
    pub process: ProcessConfig,
    #[prost(message, optional, tag = "2")]
    pub pty: Option<Pty>,
    #[prost(string, optional, tag = "3")]
    pub tag: Option<String>,
    #[prost(bool, optional, tag = "4")]
    pub stdin: Option<bool>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct ProcessSelector {
    #[prost(oneof = "Selector", tags = "1, 2")]
    pub selector: Option<Selector>,
}

/// `ProcessSelector.selector`.
#[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Selector {
    #[prost(uint32, tag = "1")]
    Pid(u32),
    #[prost(string, tag = "2")]
    Tag(String),
}

/// `ConnectRequest`, `CloseStdinRequest` and `StreamInputRequest.StartEvent`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Selected {
    #[prost(message, required, tag = "1")]
    pub process: ProcessSelector,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct UpdateRequest {
    #[prost(message, required, tag = "1")]
    pub process: ProcessSelector,
    #[prost(message, optional, tag = "2")]
    pub pty: Option<Pty>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct ProcessInput {
    #[prost(oneof = "Input", tags = "1, 2")]
    pub input: Option<Input>,
}

/// `ProcessInput.input`.
#[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Input {
    #[prost(bytes = "bytes", tag = "1")]
    Stdin(#[serde(with = "base64_bytes")] Bytes),
    #[prost(bytes = "bytes", tag = "2")]
    Pty(#[serde(with = "base64_bytes")] Bytes),
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct SendInputRequest {
    #[prost(message, required, tag = "1")]
    pub process: ProcessSelector,
    #[prost(message, optional, tag = "2")]
    pub input: Option<ProcessInput>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct StreamInputRequest {
    #[prost(oneof = "StreamInputEvent", tags = "1, 2, 3")]
    pub event: Option<StreamInputEvent>,
}

/// `StreamInputRequest.event`.
#[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum StreamInputEvent {
    #[prost(message, tag = "1")]
    Start(Selected),
    #[prost(message, tag = "2")]
    Data(StreamInputData),
    #[prost(message, tag = "3")]
    Keepalive(Empty),
}

/// `StreamInputRequest.DataEvent` (its one field is number 2, as upstream's).
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct StreamInputData {
    #[prost(message, optional, tag = "2")]
    pub input: Option<ProcessInput>,
}

proto_enum!(Signal in signal_json {
    Unspecified = 0 => "SIGNAL_UNSPECIFIED",
    Sigterm = 15 => "SIGNAL_SIGTERM",
    Sigkill = 9 => "SIGNAL_SIGKILL",
});

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct SendSignalRequest {
    #[prost(message, required, tag = "1")]
    pub process: ProcessSelector,
    #[prost(enumeration = "Signal", tag = "2")]
    #[serde(with = "signal_json")]
    pub signal: i32,
}

/// Every message without fields: the empty requests and responses, the keepalive events.
#[derive(Clone, Copy, PartialEq, prost::Message, Serialize, Deserialize)]
pub(crate) struct Empty {}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct ProcessInfo {
    #[prost(message, required, tag = "1")]
    pub config: ProcessConfig,
    #[prost(uint32, tag = "2")]
    pub pid: u32,
    #[prost(string, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ListResponse {
    #[prost(message, repeated, tag = "1")]
    pub processes: Vec<ProcessInfo>,
}

/// `StartResponse` and `ConnectResponse` alike: one `ProcessEvent`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ProcessEventResponse {
    #[prost(message, required, tag = "1")]
    pub event: ProcessEvent,
}

impl From<Event> for ProcessEventResponse {
    fn from(event: Event) -> Self {
        let event = ProcessEvent { event: Some(event) };
        Self { event }
    }
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct ProcessEvent {
    #[prost(oneof = "Event", tags = "1, 2, 3, 4")]
    pub event: Option<Event>,
}

/// `ProcessEvent.event`.
#[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Event {
    #[prost(message, tag = "1")]
    Start(StartEvent),
    #[prost(message, tag = "2")]
    Data(DataEvent),
    #[prost(message, tag = "3")]
    End(EndEvent),
    #[prost(message, tag = "4")]
    Keepalive(Empty),
}

/// `ProcessEvent.StartEvent`.
#[derive(Clone, Copy, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct StartEvent {
    #[prost(uint32, tag = "1")]
    pub pid: u32,
}

/// `ProcessEvent.DataEvent`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct DataEvent {
    #[prost(oneof = "Output", tags = "1, 2, 3")]
    pub output: Option<Output>,
}

/// `ProcessEvent.DataEvent.output`.
#[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Output {
    #[prost(bytes = "bytes", tag = "1")]
    Stdout(#[serde(with = "base64_bytes")] Bytes),
    #[prost(bytes = "bytes", tag = "2")]
    Stderr(#[serde(with = "base64_bytes")] Bytes),
    #[prost(bytes = "bytes", tag = "3")]
    Pty(#[serde(with = "base64_bytes")] Bytes),
}

/// `ProcessEvent.EndEvent`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct EndEvent {
    #[prost(sint32, tag = "1")]
    pub exit_code: i32,
    #[prost(bool, tag = "2")]
    pub exited: bool,
    #[prost(string, tag = "3")]
    pub status: String,
    #[prost(string, optional, tag = "4")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

// ---- filesystem.proto ----

proto_enum!(FileType in file_type_json {
    Unspecified = 0 => "FILE_TYPE_UNSPECIFIED",
    File = 1 => "FILE_TYPE_FILE",
    Directory = 2 => "FILE_TYPE_DIRECTORY",
    Symlink = 3 => "FILE_TYPE_SYMLINK",
});

proto_enum!(EventType in event_type_json {
    Unspecified = 0 => "EVENT_TYPE_UNSPECIFIED",
    Create = 1 => "EVENT_TYPE_CREATE",
    Write = 2 => "EVENT_TYPE_WRITE",
    Remove = 3 => "EVENT_TYPE_REMOVE",
    Rename = 4 => "EVENT_TYPE_RENAME",
    Chmod = 5 => "EVENT_TYPE_CHMOD",
});

/// `google.protobuf.Timestamp`: RFC 3339 in JSON, with nanoseconds.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub(crate) struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

impl Timestamp {
    /// `time`, if it is after 1970 (the JSON form has no earlier times).
    pub(crate) fn of(time: std::time::SystemTime) -> Option<Self> {
        let since = time.duration_since(std::time::UNIX_EPOCH).ok()?;
        Some(Self {
            seconds: i64::try_from(since.as_secs()).ok()?,
            nanos: since.subsec_nanos() as i32,
        })
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // RFC 3339's years, 1970 (as `of` makes them) to 9999.
        let (seconds, nanos) = (u64::try_from(self.seconds), u32::try_from(self.nanos));
        match (seconds, nanos) {
            (Ok(seconds), Ok(nanos)) if seconds < 253_402_300_800 && nanos < 1_000_000_000 => {
                let time = std::time::UNIX_EPOCH + std::time::Duration::new(seconds, nanos);
                serializer.collect_str(&humantime::format_rfc3339_nanos(time))
            }
            _ => Err(serde::ser::Error::custom(
                "a timestamp out of RFC 3339's range",
            )),
        }
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let time = humantime::parse_rfc3339_weak(&text).map_err(serde::de::Error::custom)?;
        Self::of(time).ok_or_else(|| serde::de::Error::custom("a time before 1970"))
    }
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct EntryInfo {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(enumeration = "FileType", tag = "2")]
    #[serde(rename = "type", with = "file_type_json")]
    pub kind: i32,
    #[prost(string, tag = "3")]
    pub path: String,
    #[prost(int64, tag = "4")]
    #[serde(with = "int64_string")]
    pub size: i64,
    #[prost(uint32, tag = "5")]
    pub mode: u32,
    #[prost(string, tag = "6")]
    pub permissions: String,
    #[prost(string, tag = "7")]
    pub owner: String,
    #[prost(string, tag = "8")]
    pub group: String,
    #[prost(message, optional, tag = "9")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_time: Option<Timestamp>,
    #[prost(string, optional, tag = "10")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    #[prost(btree_map = "string, string", tag = "11")]
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// `StatRequest`, `MakeDirRequest` and `RemoveRequest`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PathRequest {
    #[prost(string, tag = "1")]
    pub path: String,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ListDirRequest {
    #[prost(string, tag = "1")]
    pub path: String,
    #[prost(uint32, tag = "2")]
    pub depth: u32,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct MoveRequest {
    #[prost(string, tag = "1")]
    pub source: String,
    #[prost(string, tag = "2")]
    pub destination: String,
}

/// `StatResponse`, `MakeDirResponse` and `MoveResponse`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct EntryResponse {
    #[prost(message, required, tag = "1")]
    pub entry: EntryInfo,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ListDirResponse {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<EntryInfo>,
}

/// `WatchDirRequest` and `CreateWatcherRequest` alike.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct WatchRequest {
    #[prost(string, tag = "1")]
    pub path: String,
    #[prost(bool, tag = "2")]
    pub recursive: bool,
    #[prost(bool, tag = "3")]
    #[serde(alias = "include_entry")]
    pub include_entry: bool,
    #[prost(bool, tag = "4")]
    #[serde(alias = "allow_network_mounts")]
    pub allow_network_mounts: bool,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct FilesystemEvent {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(enumeration = "EventType", tag = "2")]
    #[serde(rename = "type", with = "event_type_json")]
    pub kind: i32,
    #[prost(message, optional, tag = "3")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct WatchDirResponse {
    #[prost(oneof = "WatchEvent", tags = "1, 2, 3")]
    pub event: Option<WatchEvent>,
}

impl From<WatchEvent> for WatchDirResponse {
    fn from(event: WatchEvent) -> Self {
        Self { event: Some(event) }
    }
}

/// `WatchDirResponse.event`.
#[derive(Clone, PartialEq, prost::Oneof, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum WatchEvent {
    #[prost(message, tag = "1")]
    Start(Empty),
    #[prost(message, tag = "2")]
    Filesystem(Box<FilesystemEvent>),
    #[prost(message, tag = "3")]
    Keepalive(Empty),
}

/// `CreateWatcherResponse`, `GetWatcherEventsRequest` and `RemoveWatcherRequest`.
#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct WatcherId {
    #[prost(string, tag = "1")]
    #[serde(alias = "watcher_id", skip_serializing_if = "String::is_empty")]
    pub watcher_id: String,
}

#[derive(Clone, PartialEq, prost::Message, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct GetWatcherEventsResponse {
    #[prost(message, repeated, tag = "1")]
    pub events: Vec<FilesystemEvent>,
}
