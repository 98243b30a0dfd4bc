//! envd's messages (e2b-dev/infra `packages/envd/spec/process/process.proto` and
//! `filesystem/filesystem.proto`) in the proto3 JSON mapping: lowerCamelCase names (the proto
//! names accepted too), `bytes` as base64, 64-bit integers as strings, enums by name, a oneof
//! as the one field set, default values left out.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// `bytes`: base64 on the wire (standard or URL-safe, padded or not, as proto3 JSON allows).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Base64(pub Vec<u8>);

impl Serialize for Base64 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use base64::Engine as _;
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Base64 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use base64::engine::{general_purpose, DecodePaddingMode, GeneralPurpose};
        use base64::Engine as _;
        let text = String::deserialize(deserializer)?;
        let lenient = general_purpose::GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent);
        let standard = GeneralPurpose::new(&base64::alphabet::STANDARD, lenient);
        let url_safe = GeneralPurpose::new(&base64::alphabet::URL_SAFE, lenient);
        (standard.decode(&text).or_else(|_| url_safe.decode(&text)))
            .map(Base64)
            .map_err(serde::de::Error::custom)
    }
}

/// An enum field: its value's name on the wire; a name or a number accepted.
macro_rules! proto_enum {
    ($name:ident { $($variant:ident = $number:literal => $wire:literal),+ $(,)? }) => {
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub(crate) enum $name {
            #[default]
            $($variant),+
        }
        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(match self { $(Self::$variant => $wire),+ })
            }
        }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                match serde_json::Value::deserialize(deserializer)? {
                    $(serde_json::Value::String(s) if s == $wire => Ok(Self::$variant),)+
                    $(serde_json::Value::Number(n) if n.as_i64() == Some($number) => Ok(Self::$variant),)+
                    other => Err(serde::de::Error::custom(format!(
                        "unknown {} value {other}", stringify!($name)
                    ))),
                }
            }
        }
    };
}

/// `int64`: a string on the wire; a number accepted.
fn int64_string<S: Serializer>(value: &i64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&value.to_string())
}

// ---- process.proto ----

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct ProcessConfig {
    pub cmd: String,
    pub args: Vec<String>,
    pub envs: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PtySize {
    pub cols: u32,
    pub rows: u32,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Pty {
    pub size: Option<PtySize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct StartRequest {
    pub process: ProcessConfig,
    pub pty: Option<Pty>,
    pub tag: Option<String>,
    pub stdin: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ProcessSelector {
    Pid(u32),
    Tag(String),
    #[default]
    #[serde(skip)]
    None,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Selected {
    pub process: ProcessSelector,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct UpdateRequest {
    pub process: ProcessSelector,
    pub pty: Option<Pty>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ProcessInput {
    Stdin(Base64),
    Pty(Base64),
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct SendInputRequest {
    pub process: ProcessSelector,
    pub input: Option<ProcessInput>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum StreamInputRequest {
    Start(Selected),
    Data(StreamInputData),
    Keepalive(Empty),
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct StreamInputData {
    pub input: Option<ProcessInput>,
}

proto_enum!(Signal {
    Unspecified = 0 => "SIGNAL_UNSPECIFIED",
    Sigterm = 15 => "SIGNAL_SIGTERM",
    Sigkill = 9 => "SIGNAL_SIGKILL",
});

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct SendSignalRequest {
    pub process: ProcessSelector,
    pub signal: Signal,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Empty {}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProcessInfo {
    pub config: ProcessConfig,
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ListResponse {
    pub processes: Vec<ProcessInfo>,
}

/// `StartResponse` and `ConnectResponse` alike: one `ProcessEvent`.
#[derive(Debug, Serialize)]
pub(crate) struct ProcessEventResponse {
    pub event: ProcessEvent,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ProcessEvent {
    Start { pid: u32 },
    Data(DataEvent),
    End(EndEvent),
    Keepalive(Empty),
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum DataEvent {
    Stdout(Base64),
    Stderr(Base64),
    Pty(Base64),
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EndEvent {
    pub exit_code: i32,
    pub exited: bool,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

// ---- filesystem.proto ----

proto_enum!(FileType {
    Unspecified = 0 => "FILE_TYPE_UNSPECIFIED",
    File = 1 => "FILE_TYPE_FILE",
    Directory = 2 => "FILE_TYPE_DIRECTORY",
    Symlink = 3 => "FILE_TYPE_SYMLINK",
});

proto_enum!(EventType {
    Unspecified = 0 => "EVENT_TYPE_UNSPECIFIED",
    Create = 1 => "EVENT_TYPE_CREATE",
    Write = 2 => "EVENT_TYPE_WRITE",
    Remove = 3 => "EVENT_TYPE_REMOVE",
    Rename = 4 => "EVENT_TYPE_RENAME",
    Chmod = 5 => "EVENT_TYPE_CHMOD",
});

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EntryInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: FileType,
    pub path: String,
    #[serde(serialize_with = "int64_string")]
    pub size: i64,
    pub mode: u32,
    pub permissions: String,
    pub owner: String,
    pub group: String,
    /// RFC 3339, as `google.protobuf.Timestamp` is in JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct PathRequest {
    pub path: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ListDirRequest {
    pub path: String,
    pub depth: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct MoveRequest {
    pub source: String,
    pub destination: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct EntryResponse {
    pub entry: EntryInfo,
}

#[derive(Debug, Serialize)]
pub(crate) struct ListDirResponse {
    pub entries: Vec<EntryInfo>,
}

/// `WatchDirRequest` and `CreateWatcherRequest` alike.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct WatchRequest {
    pub path: String,
    pub recursive: bool,
    #[serde(alias = "include_entry")]
    pub include_entry: bool,
    #[serde(alias = "allow_network_mounts")]
    pub allow_network_mounts: bool,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FilesystemEvent {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: EventType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum WatchDirResponse {
    Start(Empty),
    Filesystem(Box<FilesystemEvent>),
    Keepalive(Empty),
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct WatcherId {
    #[serde(alias = "watcher_id", skip_serializing_if = "String::is_empty")]
    pub watcher_id: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct GetWatcherEventsResponse {
    pub events: Vec<FilesystemEvent>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_and_requests_use_the_proto3_json_mapping() {
        let end = ProcessEventResponse {
            event: ProcessEvent::End(EndEvent {
                exit_code: -1,
                exited: false,
                status: "signal: killed".into(),
                error: Some("signal: killed".into()),
            }),
        };
        assert_eq!(
            serde_json::to_string(&end).unwrap(),
            r#"{"event":{"end":{"exitCode":-1,"exited":false,"status":"signal: killed","error":"signal: killed"}}}"#
        );
        let data = ProcessEvent::Data(DataEvent::Stdout(Base64(b"hi".to_vec())));
        assert_eq!(
            serde_json::to_string(&data).unwrap(),
            r#"{"data":{"stdout":"aGk="}}"#
        );
        let request: SendSignalRequest =
            serde_json::from_str(r#"{"process":{"pid":7},"signal":"SIGNAL_SIGKILL"}"#).unwrap();
        assert!(matches!(request.process, ProcessSelector::Pid(7)));
        assert_eq!(request.signal, Signal::Sigkill);
        let request: SendSignalRequest = serde_json::from_str(r#"{"signal":15}"#).unwrap();
        assert_eq!(request.signal, Signal::Sigterm);
        let input: SendInputRequest =
            serde_json::from_str(r#"{"process":{"tag":"t"},"input":{"stdin":"aGk"}}"#).unwrap();
        assert!(matches!(input.input, Some(ProcessInput::Stdin(Base64(ref b))) if b == b"hi"));
    }
}
