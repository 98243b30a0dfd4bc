//! Data frames written on a plain socket (TCP or Unix) by the connection's writer itself,
//! beside tungstenite: an output chunk goes from its retention file into the socket with
//! `sendfile` (never read into the daemon, never copied into tungstenite's buffer), any other
//! message with one `sendmsg`. tungstenite still writes the control frames: the writer's pings
//! and Close, and the pongs and close replies its reading side sends on its own.
//!
//! The two never interleave inside a frame: [`Plain`], the socket under hyper and tungstenite,
//! follows the frames written through it, and [`Frames`] takes the socket only between two of
//! them; tungstenite's writes wait meanwhile. TLS sockets and dialed ones keep tungstenite for
//! everything.

use crate::rpc::outbound::{FileChunk, Message};
use futures::{Sink, SinkExt as _};
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tungstenite::protocol::frame::coding::{Control, Data, OpCode};
use tungstenite::protocol::frame::FrameHeader;

/// A plain socket through a shared reference, as tokio's TCP and Unix streams both offer it.
pub(super) trait Stream: AsRawFd + Send + Sync + 'static {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// One non-blocking system call; WouldBlock clears the readiness it relied on.
    fn try_io(
        &self,
        interest: Interest,
        call: &mut dyn FnMut() -> io::Result<usize>,
    ) -> io::Result<usize>;
}

macro_rules! stream {
    ($stream:ty) => {
        impl Stream for $stream {
            fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$stream>::poll_read_ready(self, cx)
            }
            fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$stream>::poll_write_ready(self, cx)
            }
            fn try_io(
                &self,
                interest: Interest,
                call: &mut dyn FnMut() -> io::Result<usize>,
            ) -> io::Result<usize> {
                <$stream>::try_io(self, interest, call)
            }
        }
    };
}

stream!(tokio::net::TcpStream);
stream!(tokio::net::UnixStream);

/// `stream` for hyper (and tungstenite once upgraded), and the handle its writer takes it with.
pub(super) fn plain(stream: impl Stream) -> (Plain, Socket) {
    let socket = Socket {
        stream: Arc::new(stream),
        state: Arc::default(),
    };
    (Plain(socket.clone()), socket)
}

/// A plain socket as hyper and tungstenite read and write it (see the module's doc).
pub(super) struct Plain(Socket);

/// A plain socket shared by its [`Plain`] and its connection's writer.
#[derive(Clone)]
pub(super) struct Socket {
    stream: Arc<dyn Stream>,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// Frames are followed from here on: the HTTP phase is over.
    following: bool,
    /// The writer is writing a frame of its own; tungstenite's writes wait.
    held: bool,
    /// A frame of the writer's broke off: nothing more can be written.
    broken: bool,
    /// tungstenite sent a Close (its own, or the reply to the peer's): no data frame may follow.
    closed: bool,
    /// The header bytes of the frame tungstenite is writing, while incomplete.
    header: Vec<u8>,
    /// What remains of that frame's payload.
    payload_left: u64,
    /// tungstenite's task waiting to write.
    waiting: Option<Waker>,
}

impl State {
    /// Follows `len` bytes of `bufs`, just written.
    fn follow(&mut self, bufs: &[IoSlice<'_>], mut len: usize) {
        for buf in bufs {
            let take = buf.len().min(len);
            self.follow_bytes(&buf[..take]);
            len -= take;
        }
    }

    fn follow_bytes(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.payload_left > 0 {
                let take = self.payload_left.min(bytes.len() as u64);
                self.payload_left -= take;
                bytes = &bytes[take as usize..];
                continue;
            }
            self.header.push(bytes[0]);
            bytes = &bytes[1..];
            let mut cursor = io::Cursor::new(&self.header);
            match FrameHeader::parse(&mut cursor) {
                Ok(None) => {}
                Ok(Some((header, len))) => {
                    self.header.clear();
                    self.payload_left = len;
                    self.closed |= header.opcode == OpCode::Control(Control::Close);
                }
                // Never from tungstenite; taken as a frame's end rather than held forever.
                Err(_) => self.header.clear(),
            }
        }
    }

    fn between_frames(&self) -> bool {
        self.header.is_empty() && self.payload_left == 0
    }
}

fn syscall(result: isize) -> io::Result<usize> {
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(result as usize)
}

fn sendmsg(fd: RawFd, bufs: &[IoSlice<'_>], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is a valid one (no name, no control data).
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is guaranteed ABI-compatible with iovec; sendmsg only reads through it.
    header.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    header.msg_iovlen = bufs.len() as _;
    // SAFETY: `header` points at `bufs`, valid for the call; MSG_NOSIGNAL: a peer gone is an
    // error, not a signal.
    syscall(unsafe { libc::sendmsg(fd, &header, flags | libc::MSG_NOSIGNAL) })
}

impl AsyncRead for Plain {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let stream = &self.0.stream;
        loop {
            ready!(stream.poll_read_ready(cx))?;
            // SAFETY: read writes at most `unfilled.len()` bytes into it, and only the bytes it
            // wrote are then marked initialized.
            let unfilled = unsafe { buf.unfilled_mut() };
            let fd = stream.as_raw_fd();
            let read = stream.try_io(Interest::READABLE, &mut || {
                // SAFETY: `unfilled` is writable memory of that length, for the call.
                syscall(unsafe { libc::read(fd, unfilled.as_mut_ptr().cast(), unfilled.len()) })
            });
            match read {
                Ok(len) => {
                    // SAFETY: the kernel initialized `len` bytes at the start of `unfilled`.
                    unsafe { buf.assume_init(len) };
                    buf.advance(len);
                    return Poll::Ready(Ok(()));
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(err) => return Poll::Ready(Err(err)),
            }
        }
    }
}

impl AsyncWrite for Plain {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let Socket { stream, state } = &self.0;
        loop {
            {
                let mut state = state.lock().unwrap();
                if state.broken {
                    return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
                }
                // Woken when the writer lets go, or when the socket can take more (the
                // writer's own wait for that may have taken the wakeup).
                state.waiting = Some(cx.waker().clone());
                if state.held {
                    return Poll::Pending;
                }
            }
            ready!(stream.poll_write_ready(cx))?;
            // Held through the write, so that the writer cannot start a frame meanwhile.
            let mut state = state.lock().unwrap();
            if state.held {
                continue;
            }
            let fd = stream.as_raw_fd();
            match stream.try_io(Interest::WRITABLE, &mut || sendmsg(fd, bufs, 0)) {
                Ok(len) => {
                    if state.following {
                        state.follow(bufs, len);
                    }
                    return Poll::Ready(Ok(len));
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(err) => return Poll::Ready(Err(err)),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // SAFETY: shutdown of a socket this stream owns, for as long as it is open.
        let result = unsafe { libc::shutdown(self.0.stream.as_raw_fd(), libc::SHUT_WR) };
        Poll::Ready(syscall(result as isize).map(drop))
    }
}

/// The connection's writer's side of a [`Socket`]: it writes data frames itself.
pub(super) struct Frames(Socket);

impl Frames {
    /// Frames written through the socket are followed from here on (its HTTP phase is over).
    pub(super) fn new(socket: Socket) -> Self {
        socket.state.lock().unwrap().following = true;
        Self(socket)
    }

    /// Writes `message` as one frame, between two of tungstenite's (whose writes `sink` flushes
    /// when one is half written).
    pub(super) async fn send<S>(&self, sink: &mut S, message: Message) -> io::Result<()>
    where
        S: Sink<axum::extract::ws::Message, Error = axum::Error> + Unpin,
    {
        self.take(sink).await?;
        let mut taken = Taken {
            state: &self.0.state,
            whole: false,
        };
        let written = self.write(message).await;
        taken.whole = written.is_ok();
        written
    }

    /// Takes the socket between two of tungstenite's frames; refused once a Close went out.
    async fn take<S>(&self, sink: &mut S) -> io::Result<()>
    where
        S: Sink<axum::extract::ws::Message, Error = axum::Error> + Unpin,
    {
        loop {
            {
                let mut state = self.0.state.lock().unwrap();
                if state.broken || state.closed {
                    return Err(io::ErrorKind::BrokenPipe.into());
                }
                if state.between_frames() {
                    state.held = true;
                    return Ok(());
                }
            }
            sink.flush().await.map_err(io::Error::other)?;
        }
    }

    async fn write(&self, message: Message) -> io::Result<()> {
        let opcode = match message {
            Message::Text(_) => Data::Text,
            Message::Binary(_) | Message::File(_) => Data::Binary,
        };
        let frame = FrameHeader {
            opcode: OpCode::Data(opcode),
            ..FrameHeader::default()
        };
        let mut header = Vec::with_capacity(10);
        (frame.format(message.len() as u64, &mut header)).map_err(io::Error::other)?;
        let payload = match &message {
            Message::Text(text) => text.as_bytes(),
            Message::Binary(bytes) => bytes,
            Message::File(chunk) => {
                let mut parts = [
                    IoSlice::new(&header),
                    IoSlice::new(chunk.header.as_bytes()),
                    IoSlice::new(&[exec_server_protocol::binary::SEPARATOR]),
                ];
                // The chunk follows at once: no segment of its own for the header.
                self.send_all(&mut parts, libc::MSG_MORE).await?;
                return self.send_file(chunk).await;
            }
        };
        self.send_all(&mut [IoSlice::new(&header), IoSlice::new(payload)], 0)
            .await
    }

    async fn send_all(&self, mut bufs: &mut [IoSlice<'_>], flags: libc::c_int) -> io::Result<()> {
        let fd = self.0.stream.as_raw_fd();
        while !bufs.is_empty() {
            let sent = self.call(&mut || sendmsg(fd, bufs, flags)).await?;
            IoSlice::advance_slices(&mut bufs, sent);
        }
        Ok(())
    }

    async fn send_file(&self, chunk: &FileChunk) -> io::Result<()> {
        let socket = self.0.stream.as_raw_fd();
        let file = chunk.file.as_raw_fd();
        let mut offset = chunk.offset as libc::off_t;
        let end = chunk.offset + chunk.len;
        while (offset as u64) < end {
            let left = (end - offset as u64) as usize;
            let sent = self
                .call(&mut || {
                    // SAFETY: sendfile between two descriptors open for the call, advancing
                    // `offset`, a live local.
                    syscall(unsafe { libc::sendfile(socket, file, &mut offset, left) })
                })
                .await?;
            if sent == 0 {
                // The file ends before the chunk: the frame cannot be completed.
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(())
    }

    /// `call` once the socket can take more, until it no longer would block.
    async fn call(
        &self,
        call: &mut (dyn FnMut() -> io::Result<usize> + Send),
    ) -> io::Result<usize> {
        let stream = &self.0.stream;
        loop {
            std::future::poll_fn(|cx| stream.poll_write_ready(cx)).await?;
            match stream.try_io(Interest::WRITABLE, call) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                result => return result,
            }
        }
    }
}

/// The writer holds the socket until this drops: let go once its frame is whole, or else (an
/// error, or the write abandoned) the socket can carry nothing more.
struct Taken<'a> {
    state: &'a Mutex<State>,
    whole: bool,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap();
        state.held = false;
        state.broken |= !self.whole;
        if let Some(waiting) = state.waiting.take() {
            waiting.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_followed_however_their_bytes_are_split() {
        let mut frames = Vec::new();
        for (opcode, len) in [
            (Data::Text, 5usize),
            (Data::Binary, 300),
            (Data::Binary, 70_000),
        ] {
            let header = FrameHeader {
                opcode: OpCode::Data(opcode),
                ..FrameHeader::default()
            };
            header.format(len as u64, &mut frames).unwrap();
            frames.extend(std::iter::repeat_n(7u8, len));
        }
        for step in [1, 2, 3, 7, 1000, frames.len()] {
            let mut state = State::default();
            let mut boundaries = 0;
            for piece in frames.chunks(step) {
                state.follow(&[IoSlice::new(piece)], piece.len());
                boundaries += usize::from(state.between_frames());
            }
            assert!(state.between_frames(), "split every {step} bytes");
            assert!(boundaries >= 1);
        }
        assert!(!State::default().closed);
        let mut close = Vec::new();
        let header = FrameHeader {
            opcode: OpCode::Control(Control::Close),
            ..FrameHeader::default()
        };
        header.format(2, &mut close).unwrap();
        close.extend([3, 232]);
        let mut state = State::default();
        state.follow(&[IoSlice::new(&close)], close.len());
        assert!(state.closed && state.between_frames());
        // Half a header, or a header with payload to come, is inside a frame.
        let mut state = State::default();
        state.follow(&[IoSlice::new(&frames[..1])], 1);
        assert!(!state.between_frames());
        state.follow(&[IoSlice::new(&frames[1..3])], 2);
        assert!(!state.between_frames());
    }
}
