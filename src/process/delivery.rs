//! Pushes a process's events to whichever connection its session is attached to, in seq order.
//! While detached nothing is sent; the client catches up with `process/read` after resuming.

use super::output::Event;
use super::ManagedProcess;
use crate::session::Attachment;
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::process::{ClosedNotification, ExitedNotification, OutputNotification};
use exec_server_protocol::rpc::method;
use std::sync::Arc;
use tokio::sync::watch;

/// Events taken from the log per lock.
const BATCH: usize = 64;

pub async fn deliver(
    process: Arc<ManagedProcess>,
    mut attachment: watch::Receiver<Option<Attachment>>,
) {
    let mut changes = process.subscribe();
    loop {
        changes.borrow_and_update();
        let current = attachment.borrow_and_update().clone();
        if let Some(current) = current {
            if send_pending(&process, &current, &attachment).await {
                return;
            }
        }
        tokio::select! {
            result = changes.changed() => if result.is_err() { return },
            result = attachment.changed() => if result.is_err() { return },
        }
    }
}

/// Sends what is pending; returns true once the closed event went out (nothing more will come).
async fn send_pending(
    process: &ManagedProcess,
    current: &Attachment,
    attachment: &watch::Receiver<Option<Attachment>>,
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
            let text = notification_text(process, current, &event);
            if current.outbound.send(text).await.is_err() {
                return false;
            }
            process.mark_delivered(event.seq());
            if matches!(event, Event::Closed { .. }) {
                return true;
            }
        }
    }
}

fn notification_text(process: &ManagedProcess, current: &Attachment, event: &Event) -> String {
    let process_id = process.id.clone();
    let outbound = &current.outbound;
    match event {
        Event::Output(chunk) => outbound.notification_text(
            method::PROCESS_OUTPUT,
            &OutputNotification {
                process_id,
                seq: chunk.seq,
                stream: chunk.stream,
                chunk: Base64Bytes(chunk.data.to_vec()),
            },
        ),
        Event::Exited {
            seq,
            code,
            sandbox_denied,
        } => outbound.notification_text(
            method::PROCESS_EXITED,
            &ExitedNotification {
                process_id,
                seq: *seq,
                exit_code: *code,
                sandbox_denied: *sandbox_denied,
            },
        ),
        Event::Closed { seq } => outbound.notification_text(
            method::PROCESS_CLOSED,
            &ClosedNotification {
                process_id,
                seq: *seq,
            },
        ),
    }
}
