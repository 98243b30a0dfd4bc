//! `process.v1` of agent-sandbox's `sandboxd/process.proto` (KEP-539.2), field for field:
//! written with prost's derive rather than generated, so the build needs no protoc.

use std::collections::HashMap;

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Pty {
    #[prost(uint32, tag = "1")]
    pub cols: u32,
    #[prost(uint32, tag = "2")]
    pub rows: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessConfig {
    #[prost(string, repeated, tag = "1")]
    pub command: Vec<String>,
    #[prost(map = "string, string", tag = "2")]
    pub env_vars: HashMap<String, String>,
    #[prost(string, optional, tag = "3")]
    pub cwd: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StartRequest {
    #[prost(message, optional, tag = "1")]
    pub config: Option<ProcessConfig>,
    #[prost(message, optional, tag = "2")]
    pub pty: Option<Pty>,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct InitEvent {
    #[prost(int32, tag = "1")]
    pub process_id: i32,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct ExitEvent {
    #[prost(int32, tag = "1")]
    pub exit_code: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StartResponse {
    #[prost(oneof = "Event", tags = "1, 2, 3, 4")]
    pub event: Option<Event>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Event {
    #[prost(message, tag = "1")]
    Init(InitEvent),
    #[prost(bytes = "bytes", tag = "2")]
    Stdout(bytes::Bytes),
    #[prost(bytes = "bytes", tag = "3")]
    Stderr(bytes::Bytes),
    #[prost(message, tag = "4")]
    Exit(ExitEvent),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecuteRequest {
    #[prost(message, optional, tag = "1")]
    pub config: Option<ProcessConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ExecuteResponse {
    #[prost(int32, tag = "1")]
    pub exit_code: i32,
    #[prost(bytes = "vec", tag = "2")]
    pub stdout: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub stderr: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteStdinRequest {
    #[prost(int32, tag = "1")]
    pub process_id: i32,
    #[prost(oneof = "Payload", tags = "2, 3")]
    pub payload: Option<Payload>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Payload {
    #[prost(bytes = "bytes", tag = "2")]
    Input(bytes::Bytes),
    /// `google.protobuf.Empty`, which prost maps to `()`.
    #[prost(message, tag = "3")]
    Eof(()),
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Empty {}

#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum Signal {
    Unspecified = 0,
    Sigint = 2,
    Sigkill = 9,
    Sigterm = 15,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct SendSignalRequest {
    #[prost(int32, tag = "1")]
    pub process_id: i32,
    #[prost(enumeration = "Signal", tag = "2")]
    pub signal: i32,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct ResizeTtyRequest {
    #[prost(int32, tag = "1")]
    pub process_id: i32,
    #[prost(uint32, tag = "2")]
    pub cols: u32,
    #[prost(uint32, tag = "3")]
    pub rows: u32,
}
