//! Pushes a process's events to whichever connection its session is attached to, in seq order,
//! and marks them received as that connection acknowledges their messages (`rpc::outbound`).
//! While detached nothing is sent; the client catches up with `process/read` after resuming.
//! The session owns the attachment and changes it; processes only follow it.

use super::output::{Event, Stored};
use super::ManagedProcess;
use crate::rpc::outbound::{push_json_string, FileChunk, Message, Outbound};
use crate::rpc::payload::Payload;
use exec_server_protocol::process::{
    ClosedNotification, ExitedNotification, InputWaitNotification,
};
use exec_server_protocol::rpc::method;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;
use tokio::sync::watch;

/// Events taken from the log per lock.
const BATCH: usize = 64;

/// The connection a session's notifications currently go to.
#[derive(Clone, Debug)]
pub(crate) struct Attachment {
    pub connection_id: u64,
    pub outbound: Outbound,
}

pub(super) async fn deliver(
    process: Arc<ManagedProcess>,
    mut attachment: watch::Receiver<Option<Attachment>>,
) {
    let mut changes = process.subscribe();
    let mut sent: Option<Sent> = None;
    loop {
        changes.borrow_and_update();
        let current = attachment.borrow_and_update().clone();
        sent = current
            .as_ref()
            .map(|current| Sent::following(current, sent.take()));
        if let (Some(current), Some(sent)) = (&current, &mut sent) {
            sent.apply(&process);
            if send_pending(&process, current, &attachment, sent).await {
                // Nothing more will come; what went out may still be acknowledged.
                while !sent.pending.is_empty() && sent.acknowledged_changed(&attachment).await {
                    sent.apply(&process);
                }
                return;
            }
            send_input_wait(&process, current).await;
        }
        let acknowledged = async {
            match &mut sent {
                Some(sent) => sent.changed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = changes.changed() => if result.is_err() { return },
            result = attachment.changed() => if result.is_err() { return },
            () = acknowledged => {}
        }
    }
}

/// The events sent on one connection that await its proof of receipt.
struct Sent {
    connection_id: u64,
    acknowledged: watch::Receiver<u64>,
    /// (message index, seq) of each event sent and not yet acknowledged, in order.
    pending: VecDeque<(u64, u64)>,
    /// The seq of the first event sent to this connection.
    from: Option<u64>,
}

impl Sent {
    /// `previous` while the attachment is to the same connection; a new connection proves
    /// nothing of what went to the last one.
    fn following(current: &Attachment, previous: Option<Sent>) -> Sent {
        match previous {
            Some(sent) if sent.connection_id == current.connection_id => sent,
            _ => Sent {
                connection_id: current.connection_id,
                acknowledged: current.outbound.acknowledged(),
                pending: VecDeque::new(),
                from: None,
            },
        }
    }

    /// Marks acknowledged the events whose messages the connection acknowledged.
    fn apply(&mut self, process: &ManagedProcess) {
        let acknowledged = *self.acknowledged.borrow_and_update();
        let mut received = None;
        while let Some(&(index, seq)) = self.pending.front() {
            if index > acknowledged {
                break;
            }
            received = Some(seq);
            self.pending.pop_front();
        }
        if let (Some(from), Some(through)) = (self.from, received) {
            process.mark_acknowledged(from, through);
        }
    }

    fn push(&mut self, index: u64, seq: u64) {
        self.from.get_or_insert(seq);
        self.pending.push_back((index, seq));
    }

    /// Resolves when the connection acknowledges more; never once it is gone.
    async fn changed(&mut self) {
        if self.acknowledged.changed().await.is_err() {
            std::future::pending().await
        }
    }

    /// Waits for more acknowledged, or for the attachment to change (false).
    async fn acknowledged_changed(
        &mut self,
        attachment: &watch::Receiver<Option<Attachment>>,
    ) -> bool {
        let mut attachment = attachment.clone();
        tokio::select! {
            () = self.changed() => true,
            _ = attachment.changed() => false,
        }
    }
}

/// Sends what is pending; returns true once the closed event went out (nothing more will come).
async fn send_pending(
    process: &ManagedProcess,
    current: &Attachment,
    attachment: &watch::Receiver<Option<Attachment>>,
    sent: &mut Sent,
) -> bool {
    loop {
        let events = process.undelivered(BATCH);
        if events.is_empty() {
            return false;
        }
        for event in events {
            // A takeover redirects the stream at once; the new owner reads what it missed.
            if attachment.has_changed().unwrap_or(true) {
                return false;
            }
            let message = notification(process, current, &event);
            let Ok(index) = current.outbound.send_message(message).await else {
                return false;
            };
            sent.push(index, event.seq());
            process.mark_delivered(event.seq());
            if matches!(event, Event::Closed { .. }) {
                return true;
            }
        }
        // Receipts are taken in between batches: a stream that never pauses still frees
        // its retention, and asks for proof before the reader has to wait for it.
        sent.apply(process);
        if process.wants_receipt() {
            current.outbound.want_receipt();
        }
    }
}

/// `process/inputWait`, once the events before the wait went out; it takes no seq.
async fn send_input_wait(process: &ManagedProcess, current: &Attachment) {
    let Some(after_seq) = process.input_wait_to_notify() else {
        return;
    };
    if !process.delivered_all() {
        return;
    }
    let text = current.outbound.notification_text(
        method::PROCESS_INPUT_WAIT,
        &InputWaitNotification {
            process_id: process.id.clone(),
            after_seq,
        },
    );
    if current
        .outbound
        .send_message(Message::Text(text))
        .await
        .is_ok()
    {
        process.input_wait_notified(after_seq);
    }
}

fn notification(process: &ManagedProcess, current: &Attachment, event: &Event) -> Message {
    let outbound = &current.outbound;
    let text = match event {
        Event::Output(chunk) => return output(process, outbound, chunk),
        Event::Exited { seq, exit } => outbound.notification_text(
            method::PROCESS_EXITED,
            &ExitedNotification {
                process_id: process.id.clone(),
                seq: *seq,
                exit_code: exit.code,
                sandbox_denied: exit.sandbox_denied,
                details: exit.details.clone(),
            },
        ),
        Event::Closed { seq } => outbound.notification_text(
            method::PROCESS_CLOSED,
            &ClosedNotification {
                process_id: process.id.clone(),
                seq: *seq,
            },
        ),
    };
    Message::Text(text)
}

/// `process/output`, its chunk sent from its file by a transport that can (pinned there until
/// written), or else loaded where the message is built (see [`Outbound::with_chunk`]).
fn output(process: &ManagedProcess, outbound: &Outbound, chunk: &Stored) -> Message {
    let header = output_header(outbound, &process.id, chunk);
    if outbound.sends_files() {
        if let Some((file, pin)) = process.store.pinned(chunk) {
            return Message::File(FileChunk {
                header,
                file,
                offset: chunk.span.offset,
                len: chunk.span.len,
                _held: Box::new(pin),
            });
        }
    }
    let mut payload = Payload::with_capacity(chunk.span.len as usize);
    process
        .store
        .load_into(chunk.stream, chunk.span, payload.buffer());
    outbound.with_chunk(header, payload)
}

/// `process/output` without its chunk, encoded by hand: the chunk is never copied into a JSON
/// string that would then be escape-scanned.
fn output_header(outbound: &Outbound, process_id: &str, chunk: &Stored) -> String {
    outbound.notification_text_with(method::PROCESS_OUTPUT, 96, |text| {
        text.push_str(r#"{"processId":"#);
        push_json_string(text, process_id);
        let stream = serde_json::to_string(&chunk.stream).expect("enums serialize");
        let _ = write!(text, r#","seq":{},"stream":{stream}}}"#, chunk.seq);
    })
}

#[cfg(test)]
mod tests {
    use super::super::output::Span;
    use super::*;
    use exec_server_protocol::base64_bytes::Base64Bytes;
    use exec_server_protocol::process::{OutputNotification, OutputStream};

    #[test]
    fn hand_encoded_output_matches_the_wire_type() {
        let (outbound, _queue) = Outbound::new(true, 1 << 20);
        let data = b"\x00\xffhi\n";
        let chunk = Stored {
            seq: 7,
            stream: OutputStream::Stderr,
            span: Span {
                offset: 0,
                len: data.len() as u64,
            },
        };
        let output = |outbound: &Outbound, process_id: &str, chunk: &Stored| {
            let header = output_header(outbound, process_id, chunk);
            outbound.with_chunk(header, Payload::from(&data[..]))
        };
        let expected = outbound.notification_text(
            method::PROCESS_OUTPUT,
            &OutputNotification {
                process_id: "p \"1\"".into(),
                seq: 7,
                stream: OutputStream::Stderr,
                chunk: Base64Bytes(data.to_vec()),
            },
        );
        let parse = |message: Message| match message {
            Message::Text(text) => serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            other => panic!("{other:?} before the opt-in"),
        };
        assert_eq!(
            parse(output(&outbound, "p \"1\"", &chunk)),
            serde_json::from_str::<serde_json::Value>(&expected).unwrap()
        );
        outbound.set_strict();
        let strict = parse(output(&outbound, "p", &chunk));
        assert_eq!(strict["jsonrpc"], "2.0");
        outbound.enable_binary();
        let Message::Binary(bytes) = output(&outbound, "p", &chunk) else {
            panic!("text after the opt-in");
        };
        let header = br#"{"jsonrpc":"2.0","method":"process/output","params":{"processId":"p","seq":7,"stream":"stderr"}}"#;
        assert_eq!(&bytes[..], &[&header[..], b"\0", &data[..]].concat()[..]);
    }
}
