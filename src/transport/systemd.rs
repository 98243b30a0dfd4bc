//! Telling the service manager (systemd, `Type=notify`) what the daemon is doing: serving, or
//! handing its main process over to a successor.

/// Tells systemd (Type=notify) that the daemon serves; a successor also names itself the
/// unit's main process (its predecessor already did, but one that died before that could not).
pub(super) fn notify_serving(took_over: bool) {
    let own = std::process::id();
    if took_over {
        notify(&[
            sd_notify::NotifyState::MainPid(own),
            sd_notify::NotifyState::Ready,
        ]);
    } else {
        notify(&[sd_notify::NotifyState::Ready]);
    }
}

/// Names the successor `pid` the unit's main process, once this daemon hands over to it.
pub(super) fn notify_handed_over(pid: u32) {
    notify(&[sd_notify::NotifyState::MainPid(pid)]);
}

/// sd_notify(3): a no-op without NOTIFY_SOCKET.
fn notify(states: &[sd_notify::NotifyState]) {
    if let Err(err) = sd_notify::notify(states) {
        tracing::warn!("cannot notify the service manager: {err}");
    }
}
