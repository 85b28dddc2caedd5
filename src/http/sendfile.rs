//! Hits sent with `sendfile` on plain HTTP/1 connections: the body goes from
//! the page cache to the socket without a copy through user space.
//!
//! hyper writes every response itself, so the body is handed to it as
//! *stand-ins*: slices of [`STAND_IN`], a static buffer no one reads,
//! each one queued (file, offset, length) on the connection's [`Sends`] as
//! hyper takes it from the body. hyper's vectored writes keep each body
//! chunk as its own buffer ([`PlainStream::is_write_vectored`], and the
//! connection's builder asks for vectored writes), and send them in the
//! order it took them. [`PlainStream`] writes what comes before a stand-in
//! as it is (with `MSG_MORE`, so head and body leave together), and a
//! stand-in by `sendfile` from the queue's first range. A stand-in that
//! does not match that range exactly (which would mean the order was lost)
//! fails the connection: the client sees a cut transfer, never the stand-in's
//! bytes.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// What a body chunk stands in for is at most this long.
const CHUNK: usize = 256 * 1024;

/// Never read: its slices only carry a length (and their place, which
/// tells a stand-in from the response's own bytes).
static STAND_IN: [u8; CHUNK] = [0; CHUNK];

/// Whether `buf` is a stand-in: `Some(offset)` into [`STAND_IN`].
fn stand_in(buf: &[u8]) -> Option<usize> {
    let base = STAND_IN.as_ptr() as usize;
    let at = buf.as_ptr() as usize;
    (!buf.is_empty() && at >= base && at + buf.len() <= base + CHUNK).then(|| at - base)
}

/// A response body's bytes as a range of an open file: set by the handler
/// as a response extension, used by a plain-HTTP/1 connection instead of
/// the body (any other connection ignores it).
#[derive(Clone)]
pub struct FileRange {
    file: Arc<File>,
    start: u64,
    len: u64,
}

impl FileRange {
    pub fn new(file: Arc<File>, start: u64, len: u64) -> FileRange {
        FileRange { file, start, len }
    }
}

/// One chunk taken by hyper and not yet sent: `sent` of its `len` bytes
/// are out.
struct Queued {
    file: Arc<File>,
    offset: u64,
    len: usize,
    sent: usize,
}

/// The ranges a connection's stand-ins stand for, in the order hyper took
/// them. A `std::sync::Mutex`: the connection's one task uses it, never
/// across an await.
#[derive(Clone, Default)]
pub struct Sends(Arc<Mutex<VecDeque<Queued>>>);

impl Sends {
    /// The body hyper writes for `range` on this connection.
    pub fn body(&self, range: FileRange) -> axum::body::Body {
        axum::body::Body::new(StandIns {
            range,
            at: 0,
            sends: self.clone(),
        })
    }
}

/// A body of stand-ins for a [`FileRange`].
struct StandIns {
    range: FileRange,
    /// Bytes of the range handed to hyper so far.
    at: u64,
    sends: Sends,
}

impl hyper::body::Body for StandIns {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let left = this.range.len - this.at;
        if left == 0 {
            return Poll::Ready(None);
        }
        let len = left.min(CHUNK as u64) as usize;
        this.sends
            .0
            .lock()
            .expect("not poisoned")
            .push_back(Queued {
                file: this.range.file.clone(),
                offset: this.range.start + this.at,
                len,
                sent: 0,
            });
        this.at += len as u64;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&STAND_IN[..len])))))
    }

    fn is_end_stream(&self) -> bool {
        self.at == self.range.len
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.range.len - self.at)
    }
}

/// A plain TCP connection that sends stand-ins from their files.
pub struct PlainStream {
    inner: TcpStream,
    sends: Sends,
}

impl PlainStream {
    pub fn new(inner: TcpStream, sends: Sends) -> PlainStream {
        PlainStream { inner, sends }
    }

    /// Writes `bufs` up to the first stand-in; with `MSG_MORE` when one
    /// follows, so the head waits for the body.
    fn poll_plain(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let plain = bufs.iter().take_while(|b| stand_in(b).is_none()).count();
        let more = plain < bufs.len();
        let bufs = &bufs[..plain];
        if !more {
            return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        }
        let flags = rustix::net::SendFlags::MORE | rustix::net::SendFlags::NOSIGNAL;
        loop {
            ready!(self.inner.poll_write_ready(cx))?;
            let sent = self.inner.try_io(Interest::WRITABLE, || {
                let mut control = rustix::net::SendAncillaryBuffer::default();
                Ok(rustix::net::sendmsg(
                    &self.inner,
                    bufs,
                    &mut control,
                    flags,
                )?)
            });
            match sent {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                done => return Poll::Ready(done),
            }
        }
    }

    /// Sends the stand-in `buf` (at `offset` into [`STAND_IN`]) from the
    /// queue's first range.
    fn poll_send_file(
        &self,
        cx: &mut Context<'_>,
        buf: &[u8],
        offset: usize,
    ) -> Poll<io::Result<usize>> {
        let mut queue = self.sends.0.lock().expect("not poisoned");
        let Some(first) = queue.front_mut() else {
            return Poll::Ready(Err(io::Error::other("a body stand-in with nothing queued")));
        };
        if offset != first.sent || offset + buf.len() != first.len {
            return Poll::Ready(Err(io::Error::other(
                "a body stand-in out of step with its queued range",
            )));
        }
        loop {
            ready!(self.inner.poll_write_ready(cx))?;
            let mut from = first.offset + first.sent as u64;
            let sent = self.inner.try_io(Interest::WRITABLE, || {
                Ok(rustix::fs::sendfile(
                    &self.inner,
                    &*first.file,
                    Some(&mut from),
                    first.len - first.sent,
                )?)
            });
            match sent {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
                Ok(0) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "a blob's file ended before its length",
                    )))
                }
                Ok(n) => {
                    first.sent += n;
                    if first.sent == first.len {
                        queue.pop_front();
                    }
                    return Poll::Ready(Ok(n));
                }
            }
        }
    }
}

impl AsyncRead for PlainStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for PlainStream {
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
        let this = self.get_mut();
        let Some(first) = bufs.iter().find(|b| !b.is_empty()) else {
            return Poll::Ready(Ok(0));
        };
        match stand_in(first) {
            Some(offset) => this.poll_send_file(cx, first, offset),
            None => this.poll_plain(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stand_ins_are_told_from_other_bytes() {
        assert_eq!(stand_in(&STAND_IN[..10]), Some(0));
        assert_eq!(stand_in(&STAND_IN[5..10]), Some(5));
        assert_eq!(stand_in(&STAND_IN[..0]), None);
        let zeros = vec![0u8; 10];
        assert_eq!(stand_in(&zeros), None);
    }
}
