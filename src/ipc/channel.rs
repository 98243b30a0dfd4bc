//! The transport under every message between the daemon and its children: descriptors passed
//! with SCM_RIGHTS, and length-prefixed frames (youki's `libcontainer/src/process/channel.rs`
//! is the model). What the bytes mean is [`super::message`]'s alone.
//!
//! A stream socket carries control data only along with at least one byte, so descriptors are
//! always sent with data: a marker, or the first bytes of a launch.

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use std::io::{self, Read, Write as _};
use std::os::fd::{AsFd as _, AsRawFd, BorrowedFd, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Sends `data` with `fds` attached (none: plain data); returns how many bytes of `data` the
/// socket took, at least the first unless it is non-blocking and full. `MSG_NOSIGNAL`: a peer
/// that is gone is an error, not a SIGPIPE.
pub(crate) fn send_fds(socket: BorrowedFd<'_>, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    let rights = [ControlMessage::ScmRights(fds)];
    Ok(sendmsg::<()>(
        socket.as_raw_fd(),
        &[io::IoSlice::new(data)],
        if fds.is_empty() { &[] } else { &rights },
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?)
}

/// Sends all of `data` on a blocking socket, `fds` with its first bytes.
pub(crate) fn send_all_with_fds(socket: &UnixStream, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let sent = send_fds(socket.as_fd(), data, fds)?;
    (&*socket).write_all(&data[sent..])
}

/// What one `recvmsg` read.
pub(crate) struct Received {
    /// How many bytes of the buffer it filled (0: EOF).
    pub(crate) bytes: usize,
    /// The descriptors that came with them, close-on-exec, now ours.
    pub(crate) fds: Vec<OwnedFd>,
    /// More descriptors came than there was room for (the kernel closed the rest).
    pub(crate) truncated: bool,
}

/// [`recv_fds`] on an async socket.
pub(crate) async fn recv_fds_async(
    socket: &tokio::net::UnixStream,
    buf: &mut [u8],
    max_fds: usize,
) -> io::Result<Received> {
    loop {
        socket.readable().await?;
        let received = socket.try_io(tokio::io::Interest::READABLE, || {
            recv_fds(socket.as_fd(), buf, max_fds, true)
        });
        match received {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            received => return received,
        }
    }
}

/// Receives into `buf` with room for `max_fds` descriptors. `nonblocking`: `WouldBlock`
/// instead of waiting.
pub(crate) fn recv_fds(
    socket: BorrowedFd<'_>,
    buf: &mut [u8],
    max_fds: usize,
    nonblocking: bool,
) -> io::Result<Received> {
    let mut iov = [io::IoSliceMut::new(buf)];
    // As `nix::cmsg_space!`, for a number of descriptors known only here.
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE((max_fds * std::mem::size_of::<RawFd>()) as u32) };
    let mut space = vec![0u8; space as usize];
    let mut flags = MsgFlags::MSG_CMSG_CLOEXEC;
    if nonblocking {
        flags |= MsgFlags::MSG_DONTWAIT;
    }
    let message = recvmsg::<()>(socket.as_raw_fd(), &mut iov, Some(&mut space), flags)?;
    let mut fds = Vec::new();
    for cmsg in message.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            // SAFETY: the kernel installed these descriptors for us alone.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    Ok(Received {
        bytes: message.bytes,
        fds,
        truncated: message.flags.contains(MsgFlags::MSG_CTRUNC),
    })
}

/// A frame that could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FrameError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("the launch is too large")]
    TooLarge,
}

/// One length-prefixed frame (a little-endian u32, then as many bytes), of at most `max`
/// bytes.
pub(crate) fn read_frame(input: &mut impl Read, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    input.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(FrameError::TooLarge);
    }
    let mut data = vec![0; len];
    input.read_exact(&mut data)?;
    Ok(data)
}

/// A message: its `marker` (a launch, an order, an answer), then each of `frames`
/// length-prefixed, as [`read_frame`] reads them.
pub(crate) fn message(marker: Option<u8>, frames: &[&[u8]]) -> Vec<u8> {
    let total: usize = frames.iter().map(|frame| 4 + frame.len()).sum();
    let mut out = Vec::with_capacity(1 + total);
    out.extend(marker);
    for frame in frames {
        out.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        out.extend_from_slice(frame);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_descriptors_travel_together() {
        let (a, b) = UnixStream::pair().unwrap();
        let passed = std::fs::File::open("/dev/null").unwrap();
        let data = message(Some(b'L'), &[b"setup", b""]);
        send_all_with_fds(&a, &data, &[passed.as_raw_fd()]).unwrap();
        let mut buf = [0u8; 1];
        let first = recv_fds(b.as_fd(), &mut buf, 1, false).unwrap();
        assert_eq!((first.bytes, buf[0], first.fds.len()), (1, b'L', 1));
        assert_eq!(read_frame(&mut &b, 16).unwrap(), b"setup");
        assert_eq!(read_frame(&mut &b, 16).unwrap(), b"");
        drop(a);
        let err = read_frame(&mut &b, 16).unwrap_err();
        assert!(matches!(err, FrameError::Io(_)), "{err}");
    }

    #[test]
    fn an_oversized_frame_is_refused() {
        let frame = message(Some(b'L'), &[&[0u8; 17]]);
        let err = read_frame(&mut &frame[1..], 16).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge));
    }
}
