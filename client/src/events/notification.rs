//! The notifications a client routes, decoded from their JSON-RPC params (an output chunk
//! arrives apart from its header, as a slice of the message).

use bytes::Bytes;
use exec_server_protocol::fs::ChangedNotification;
use exec_server_protocol::process::{
    ClosedNotification, ExitedNotification, InputWaitNotification, OutputNotification, OutputStream,
};
use exec_server_protocol::rpc::method;

/// The notifications routed to processes, and to watches.
pub enum Notification {
    Output(Output),
    Exited(ExitedNotification),
    Closed(ClosedNotification),
    InputWait(InputWaitNotification),
    Changed(ChangedNotification),
}

#[derive(Clone, Copy)]
pub enum NotificationKind {
    Output,
    Exited,
    Closed,
    InputWait,
    Changed,
}

impl Notification {
    pub fn kind(method: &str) -> Option<NotificationKind> {
        match method {
            method::PROCESS_OUTPUT => Some(NotificationKind::Output),
            method::PROCESS_EXITED => Some(NotificationKind::Exited),
            method::PROCESS_CLOSED => Some(NotificationKind::Closed),
            method::PROCESS_INPUT_WAIT => Some(NotificationKind::InputWait),
            method::FS_CHANGED => Some(NotificationKind::Changed),
            _ => None,
        }
    }
}

/// `process/output`, its chunk as received.
pub struct Output {
    pub process_id: String,
    pub seq: u64,
    pub stream: OutputStream,
    pub data: Bytes,
}

impl From<OutputNotification> for Output {
    fn from(n: OutputNotification) -> Self {
        Output {
            process_id: n.process_id,
            seq: n.seq,
            stream: n.stream,
            data: n.chunk.0.into(),
        }
    }
}

/// `process/output` params of a binary message: everything but the chunk, which is the payload.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct OutputHeader {
    process_id: String,
    seq: u64,
    stream: OutputStream,
}

impl OutputHeader {
    fn with_chunk(self, chunk: Bytes) -> Notification {
        Notification::Output(Output {
            process_id: self.process_id,
            seq: self.seq,
            stream: self.stream,
            data: chunk,
        })
    }
}

impl NotificationKind {
    /// Decodes the params of a message whose method was already read; `chunk` is the binary
    /// payload that stands for the params' `chunk` member, if the message had one.
    pub fn decode_from<'de, A: serde::de::MapAccess<'de>>(
        self,
        map: &mut A,
        chunk: Option<Bytes>,
    ) -> Result<Notification, A::Error> {
        Ok(match (self, chunk) {
            (Self::Output, Some(chunk)) => map.next_value::<OutputHeader>()?.with_chunk(chunk),
            (Self::Output, None) => {
                Notification::Output(map.next_value::<OutputNotification>()?.into())
            }
            (Self::Exited, _) => Notification::Exited(map.next_value()?),
            (Self::Closed, _) => Notification::Closed(map.next_value()?),
            (Self::InputWait, _) => Notification::InputWait(map.next_value()?),
            (Self::Changed, _) => Notification::Changed(map.next_value()?),
        })
    }

    /// [`Self::decode_from`] for params already taken out as raw JSON.
    pub fn decode(self, params: &str, chunk: Option<Bytes>) -> serde_json::Result<Notification> {
        Ok(match (self, chunk) {
            (Self::Output, Some(chunk)) => {
                serde_json::from_str::<OutputHeader>(params)?.with_chunk(chunk)
            }
            (Self::Output, None) => {
                Notification::Output(serde_json::from_str::<OutputNotification>(params)?.into())
            }
            (Self::Exited, _) => Notification::Exited(serde_json::from_str(params)?),
            (Self::Closed, _) => Notification::Closed(serde_json::from_str(params)?),
            (Self::InputWait, _) => Notification::InputWait(serde_json::from_str(params)?),
            (Self::Changed, _) => Notification::Changed(serde_json::from_str(params)?),
        })
    }
}
