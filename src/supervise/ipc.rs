//! Framed IPC between the coordinator and its workers over Unix-domain sockets.
//!
//! A frame is a u32 little-endian payload length followed by the payload; a length
//! above `MAX_FRAME_BYTES` is refused before anything is allocated. Payloads are built
//! with `Encoder` and read back with `Decoder`, whose every read is bounds-checked.
//! Connections are accepted only from a peer whose SO_PEERCRED uid is ours and whose pid
//! is one of the children we spawned. Every read and accept has a deadline.
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Largest frame accepted (64 MiB): far above one gradient message (≈ 400 KiB per
/// micro-batch), far below what could exhaust memory.
pub const MAX_FRAME_BYTES: u32 = 64 * 1024 * 1024;

/// Longest Unix socket path (`sun_path` is 108 bytes including the NUL).
pub const MAX_SOCKET_PATH_BYTES: usize = 107;

/// Why IPC failed.
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    /// The peer closed its end of the connection.
    #[error("{peer} closed the connection")]
    PeerClosed {
        /// The peer's name (e.g. `worker pid N`, `coordinator`).
        peer: String,
    },
    /// No whole frame arrived before the read deadline.
    #[error("{peer} sent no frame within {timeout_ms} ms")]
    Timeout {
        /// The peer's name.
        peer: String,
        /// The deadline that passed, in milliseconds.
        timeout_ms: u64,
    },
    /// A frame above [`MAX_FRAME_BYTES`]: announced by the peer (refused before anything
    /// is allocated) or about to be sent.
    #[error("{peer} announced a {length}-byte frame, above the {MAX_FRAME_BYTES}-byte cap")]
    FrameTooLarge {
        /// The peer's name.
        peer: String,
        /// The announced payload length in bytes (`u32::MAX` for an outgoing frame).
        length: u32,
    },
    /// A socket operation failed.
    #[error("I/O with {peer} failed: {source}")]
    Io {
        /// The peer's name ("listener" for the accepting socket).
        peer: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The peer broke the protocol: a message this side cannot use, or (while accepting)
    /// a worker that exited before it connected.
    #[error("malformed message from {peer}: {reason}")]
    Malformed {
        /// The peer's name.
        peer: String,
        /// What is wrong with the payload.
        reason: String,
    },
    /// The socket path does not fit in `sun_path` ([`MAX_SOCKET_PATH_BYTES`]).
    #[error("socket path {0} is longer than {MAX_SOCKET_PATH_BYTES} bytes")]
    SocketPathTooLong(PathBuf),
    /// A connection came from a process that is not one of our children, or not our uid.
    #[error("refused a connection from pid {pid} uid {uid}: not a child we spawned as this user")]
    UnexpectedPeer {
        /// The peer's pid (SO_PEERCRED).
        pid: i32,
        /// The peer's uid (SO_PEERCRED).
        uid: u32,
    },
    /// No worker connected before the accept deadline.
    #[error("no worker connected within {timeout_ms} ms")]
    AcceptTimeout {
        /// The deadline that passed, in milliseconds.
        timeout_ms: u64,
    },
}

/// Refuses socket paths that do not fit in `sun_path` (both ends call it).
pub fn check_socket_path(path: &Path) -> Result<(), IpcError> {
    if path.as_os_str().len() > MAX_SOCKET_PATH_BYTES {
        return Err(IpcError::SocketPathTooLong(path.to_owned()));
    }
    Ok(())
}

/// Binds a listener at `path`, refusing paths that do not fit in `sun_path`.
pub fn bind(path: &Path) -> Result<UnixListener, IpcError> {
    check_socket_path(path)?;
    UnixListener::bind(path).map_err(|source| IpcError::Io {
        peer: "listener".into(),
        source,
    })
}

/// Accepts one connection before `timeout_ms`, checking SO_PEERCRED: the peer's uid must
/// be ours and `allowed_pid` must accept its pid. `keep_waiting` is polled between tries so
/// the caller can abort when a child dies before connecting.
pub fn accept_checked(
    listener: &UnixListener,
    timeout_ms: u64,
    allowed_pid: impl Fn(u32) -> bool,
    mut keep_waiting: impl FnMut() -> Result<(), IpcError>,
) -> Result<(UnixStream, u32), IpcError> {
    let io = |source| IpcError::Io {
        peer: "listener".into(),
        source,
    };
    listener.set_nonblocking(true).map_err(io)?;
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).map_err(io)?;
                let credentials = rustix::net::sockopt::socket_peercred(&stream)
                    .map_err(|errno| io(std::io::Error::from(errno)))?;
                let pid = credentials.pid.as_raw_nonzero().get();
                let uid = credentials.uid.as_raw();
                if uid != rustix::process::geteuid().as_raw()
                    || pid <= 0
                    || !allowed_pid(pid as u32)
                {
                    return Err(IpcError::UnexpectedPeer { pid, uid });
                }
                return Ok((stream, pid as u32));
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                keep_waiting()?;
                if Instant::now() >= deadline {
                    return Err(IpcError::AcceptTimeout { timeout_ms });
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(error) => return Err(io(error)),
        }
    }
}

/// One end of a framed connection, with a per-read deadline.
///
/// The stream keeps one send and one receive buffer for its whole life: after the first
/// frames of each size, a step's frames are built and read without allocating, and each
/// frame goes out in one `write` (header and payload together).
#[derive(Debug)]
pub struct FramedStream {
    stream: UnixStream,
    peer: String,
    timeout_ms: u64,
    send_buffer: Vec<u8>,
    receive_buffer: Vec<u8>,
}

/// Socket buffer size asked for on each framed connection (4 MiB).
const SOCKET_BUFFER_BYTES: usize = 4 * 1024 * 1024;

/// Bytes of the frame header (the u32 payload length).
const HEADER_BYTES: usize = 4;

impl FramedStream {
    /// Wraps a connected stream: `peer` names the other end in errors, and every read waits
    /// at most `timeout_ms` milliseconds. Asks the kernel for larger socket buffers (a hint).
    pub fn new(
        stream: UnixStream,
        peer: impl Into<String>,
        timeout_ms: u64,
    ) -> Result<Self, IpcError> {
        let peer = peer.into();
        // A hint, not a requirement (the kernel caps it at net.core.[wr]mem_max): with
        // the default ~200 KiB a step's ~1–5 MB frames cross the socket in dozens of
        // writer/reader hand-offs, each a wake-up that waits for a core on a loaded
        // machine. A failure only leaves the default.
        let _ = rustix::net::sockopt::set_socket_send_buffer_size(&stream, SOCKET_BUFFER_BYTES);
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&stream, SOCKET_BUFFER_BYTES);
        stream
            .set_read_timeout(Some(Duration::from_millis(timeout_ms.max(1))))
            .map_err(|source| IpcError::Io {
                peer: peer.clone(),
                source,
            })?;
        Ok(FramedStream {
            stream,
            peer,
            timeout_ms,
            send_buffer: Vec::new(),
            receive_buffer: Vec::new(),
        })
    }

    /// The other end's name, as given to [`FramedStream::new`].
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Sends one frame.
    pub fn send(&mut self, payload: &[u8]) -> Result<(), IpcError> {
        let (&tag, body) = match payload.split_first() {
            Some(split) => split,
            None => return self.send_raw(&[]),
        };
        self.send_with(tag, |encoder| {
            encoder.0.extend_from_slice(body);
        })
    }

    /// Builds a payload that starts with `tag` in the stream's reused send buffer (behind
    /// room for the header) and sends it as one frame with one write.
    pub fn send_with(&mut self, tag: u8, build: impl FnOnce(&mut Encoder)) -> Result<(), IpcError> {
        let mut encoder = self.encoder(tag);
        build(&mut encoder);
        self.send_encoder(encoder)
    }

    /// An encoder over the stream's reused send buffer, holding room for the header and
    /// `tag`; send it with [`Self::send_encoder`] (one dropped instead only costs the
    /// buffer, which the next frame allocates again).
    pub fn encoder(&mut self, tag: u8) -> Encoder {
        let mut buffer = std::mem::take(&mut self.send_buffer);
        buffer.clear();
        buffer.extend_from_slice(&[0; HEADER_BYTES]);
        buffer.push(tag);
        Encoder(buffer)
    }

    /// Sends what `encoder` (from [`Self::encoder`]) holds as one frame with one write,
    /// and keeps its buffer for the next frame.
    pub fn send_encoder(&mut self, encoder: Encoder) -> Result<(), IpcError> {
        let mut buffer = encoder.0;
        let result = self.write_frame(&mut buffer);
        self.send_buffer = buffer;
        result
    }

    /// An empty frame (no tag): what `send(&[])` always sent.
    fn send_raw(&mut self, payload: &[u8]) -> Result<(), IpcError> {
        let mut frame = Vec::with_capacity(HEADER_BYTES + payload.len());
        frame.extend_from_slice(&[0; HEADER_BYTES]);
        frame.extend_from_slice(payload);
        self.write_frame(&mut frame)
    }

    /// Fills in the header of `frame` (header room + payload) and writes it whole.
    fn write_frame(&mut self, frame: &mut [u8]) -> Result<(), IpcError> {
        let length = u32::try_from(frame.len() - HEADER_BYTES)
            .ok()
            .filter(|&length| length <= MAX_FRAME_BYTES)
            .ok_or_else(|| IpcError::FrameTooLarge {
                peer: self.peer.clone(),
                length: u32::MAX,
            })?;
        frame[..HEADER_BYTES].copy_from_slice(&length.to_le_bytes());
        let io = |source| IpcError::Io {
            peer: self.peer.clone(),
            source,
        };
        self.stream.write_all(frame).map_err(io)?;
        self.stream.flush().map_err(io)
    }

    /// Receives one frame, waiting at most the stream's timeout for each read.
    pub fn receive(&mut self) -> Result<Vec<u8>, IpcError> {
        self.receive_frame().map(<[u8]>::to_vec)
    }

    /// Receives one frame into the stream's reused receive buffer and lends it out until
    /// the next receive.
    pub fn receive_frame(&mut self) -> Result<&[u8], IpcError> {
        let mut header = [0u8; HEADER_BYTES];
        self.read_exact(&mut header)?;
        let length = u32::from_le_bytes(header);
        if length > MAX_FRAME_BYTES {
            return Err(IpcError::FrameTooLarge {
                peer: self.peer.clone(),
                length,
            });
        }
        let mut buffer = std::mem::take(&mut self.receive_buffer);
        buffer.resize(length as usize, 0);
        let result = self.read_exact(&mut buffer);
        self.receive_buffer = buffer;
        result?;
        Ok(&self.receive_buffer)
    }

    /// The payload of the last frame received (empty before any), still in the buffer.
    pub fn last_frame(&self) -> &[u8] {
        &self.receive_buffer
    }

    fn read_exact(&mut self, buffer: &mut [u8]) -> Result<(), IpcError> {
        match self.stream.read_exact(buffer) {
            Ok(()) => Ok(()),
            Err(error) => Err(match error.kind() {
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                    IpcError::PeerClosed {
                        peer: self.peer.clone(),
                    }
                }
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    IpcError::Timeout {
                        peer: self.peer.clone(),
                        timeout_ms: self.timeout_ms,
                    }
                }
                _ => IpcError::Io {
                    peer: self.peer.clone(),
                    source: error,
                },
            }),
        }
    }
}

/// A 4-byte value the encoder writes in bulk (`f32`, `u32`): plain bytes on a
/// little-endian host, converted word by word elsewhere.
trait LeWord: bytemuck::Pod {
    #[cfg_attr(target_endian = "little", allow(dead_code))]
    fn le_bytes(self) -> [u8; 4];
}

impl LeWord for f32 {
    fn le_bytes(self) -> [u8; 4] {
        self.to_le_bytes()
    }
}

impl LeWord for u32 {
    fn le_bytes(self) -> [u8; 4] {
        self.to_le_bytes()
    }
}

/// Builds a message payload.
#[derive(Debug, Default)]
pub struct Encoder(Vec<u8>);

impl Encoder {
    /// Starts a payload with its message tag byte.
    pub fn new(tag: u8) -> Self {
        Encoder(vec![tag])
    }
    /// Appends a u32, little-endian.
    pub fn u32(&mut self, value: u32) -> &mut Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }
    /// Appends a u64, little-endian.
    pub fn u64(&mut self, value: u64) -> &mut Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }
    /// Appends an FP32 value, little-endian.
    pub fn f32(&mut self, value: f32) -> &mut Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }
    /// A length-prefixed byte string.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        self.u64(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
        self
    }
    /// A length-prefixed FP32 vector (little-endian): one copy of the values' bytes.
    pub fn f32s(&mut self, values: &[f32]) -> &mut Self {
        self.words(values)
    }
    /// A length-prefixed u32 vector (little-endian): one copy of the values' bytes.
    pub fn u32s(&mut self, values: &[u32]) -> &mut Self {
        self.words(values)
    }
    /// A length-prefixed vector of 4-byte words, little-endian on every host.
    fn words<T: LeWord>(&mut self, values: &[T]) -> &mut Self {
        self.u64(values.len() as u64);
        #[cfg(target_endian = "little")]
        self.0.extend_from_slice(bytemuck::cast_slice(values));
        #[cfg(not(target_endian = "little"))]
        for value in values {
            self.0.extend_from_slice(&value.le_bytes());
        }
        self
    }
    /// Bytes written so far (a position for [`Self::patch_u64`]).
    pub fn position(&self) -> usize {
        self.0.len()
    }
    /// Overwrites the u64 written at `position` (a field known only once the rest is
    /// written); a position outside what was written is left alone.
    pub fn patch_u64(&mut self, position: usize, value: u64) {
        if let Some(slot) = self.0.get_mut(position..position + 8) {
            slot.copy_from_slice(&value.to_le_bytes());
        }
    }
    /// The payload built, tag byte first.
    pub fn finish(self) -> Vec<u8> {
        self.0
    }
}

/// Reads a message payload; every read is bounds-checked.
#[derive(Debug)]
pub struct Decoder<'a> {
    bytes: &'a [u8],
    position: usize,
}

/// Why a payload could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// A read needed more bytes than the payload has left (or a length prefix promised
    /// more elements than fit in it).
    #[error("payload ends at byte {at}, {needed} more needed")]
    Truncated {
        /// Offset of the read in the payload, after the tag byte.
        at: usize,
        /// Bytes the read needed (`usize::MAX` for a length prefix that cannot fit).
        needed: usize,
    },
    /// The message was read whole and this many bytes were left over.
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
    /// The payload has no tag byte.
    #[error("empty payload")]
    Empty,
}

impl<'a> Decoder<'a> {
    /// Splits off the tag byte.
    pub fn new(bytes: &'a [u8]) -> Result<(u8, Self), DecodeError> {
        let (&tag, rest) = bytes.split_first().ok_or(DecodeError::Empty)?;
        Ok((
            tag,
            Decoder {
                bytes: rest,
                position: 0,
            },
        ))
    }

    fn take(&mut self, count: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .position
            .checked_add(count)
            .filter(|&end| end <= self.bytes.len())
            .ok_or(DecodeError::Truncated {
                at: self.position,
                needed: count,
            })?;
        let slice = &self.bytes[self.position..end];
        self.position = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// Reads a little-endian u32.
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    /// Reads a little-endian u64.
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    /// Reads a little-endian FP32 value.
    pub fn f32(&mut self) -> Result<f32, DecodeError> {
        Ok(f32::from_le_bytes(self.array()?))
    }

    fn length(&mut self, element_bytes: usize) -> Result<usize, DecodeError> {
        let count = self.u64()?;
        let remaining = self.bytes.len() - self.position;
        // Reject before allocating: the elements must fit in what is left.
        usize::try_from(count)
            .ok()
            .filter(|&count| {
                count
                    .checked_mul(element_bytes)
                    .is_some_and(|bytes| bytes <= remaining)
            })
            .ok_or(DecodeError::Truncated {
                at: self.position,
                needed: usize::MAX,
            })
    }

    /// A length-prefixed byte string, borrowed from the payload.
    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let count = self.length(1)?;
        self.take(count)
    }
    /// A length-prefixed FP32 vector left as its little-endian bytes (4 per value).
    pub fn f32_bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let count = self.length(4)?;
        self.take(count * 4)
    }
    /// A length-prefixed FP32 vector: one copy of its bytes (then a byte swap per value
    /// on a big-endian machine).
    pub fn f32s(&mut self) -> Result<Vec<f32>, DecodeError> {
        let count = self.length(4)?;
        let raw = self.take(count * 4)?;
        let mut values = vec![0f32; count];
        bytemuck::cast_slice_mut::<f32, u8>(&mut values).copy_from_slice(raw);
        #[cfg(not(target_endian = "little"))]
        for value in &mut values {
            *value = f32::from_bits(u32::from_le(value.to_bits()));
        }
        Ok(values)
    }
    /// A length-prefixed u32 vector, read like [`Self::f32s`].
    pub fn u32s(&mut self) -> Result<Vec<u32>, DecodeError> {
        let count = self.length(4)?;
        let raw = self.take(count * 4)?;
        let mut values = vec![0u32; count];
        bytemuck::cast_slice_mut::<u32, u8>(&mut values).copy_from_slice(raw);
        #[cfg(not(target_endian = "little"))]
        for value in &mut values {
            *value = u32::from_le(*value);
        }
        Ok(values)
    }

    /// Fails if anything is left unread.
    pub fn finish(self) -> Result<(), DecodeError> {
        match self.bytes.len() - self.position {
            0 => Ok(()),
            extra => Err(DecodeError::Trailing(extra)),
        }
    }
}

/// The worker protocol's encoding of hyper-parameters: each field at its own width.
impl crate::core::logical::HyperparameterWriter for Encoder {
    fn u64(&mut self, _name: &'static str, value: u64) {
        Encoder::u64(self, value);
    }
    fn u32(&mut self, _name: &'static str, value: u32) {
        Encoder::u32(self, value);
    }
    fn f32(&mut self, _name: &'static str, value: f32) {
        Encoder::f32(self, value);
    }
}

impl crate::core::logical::HyperparameterReader for Decoder<'_> {
    type Error = DecodeError;
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Decoder::u64(self)
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Decoder::u32(self)
    }
    fn f32(&mut self) -> Result<f32, DecodeError> {
        Decoder::f32(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_and_truncation() {
        let mut encoder = Encoder::new(7);
        encoder.u32(3).f32s(&[1.0, -2.5]).u32s(&[9]).bytes(b"xy");
        let payload = encoder.finish();
        let (tag, mut decoder) = Decoder::new(&payload).expect("tag");
        assert_eq!(tag, 7);
        assert_eq!(decoder.u32(), Ok(3));
        assert_eq!(decoder.f32s(), Ok(vec![1.0, -2.5]));
        assert_eq!(decoder.u32s(), Ok(vec![9]));
        assert_eq!(decoder.bytes(), Ok(&b"xy"[..]));
        decoder.finish().expect("nothing left");

        for cut in 1..payload.len() {
            let (_, mut decoder) = Decoder::new(&payload[..cut]).expect("tag");
            let result = (|| -> Result<(), DecodeError> {
                decoder.u32()?;
                decoder.f32s()?;
                decoder.u32s()?;
                decoder.bytes()?;
                Ok(())
            })();
            assert!(result.is_err(), "cut at {cut} decoded");
        }
    }

    #[test]
    fn huge_announced_length_is_refused_before_allocation() {
        let mut encoder = Encoder::new(1);
        encoder.u64(u64::MAX);
        let payload = encoder.finish();
        let (_, mut decoder) = Decoder::new(&payload).expect("tag");
        assert!(decoder.f32s().is_err());
    }

    #[test]
    fn frames_over_a_real_socket_pair() {
        let (a, b) = UnixStream::pair().expect("pair");
        let mut left = FramedStream::new(a, "left", 2_000).expect("left");
        let mut right = FramedStream::new(b, "right", 200).expect("right");
        left.send(b"hello").expect("send");
        assert_eq!(right.receive().expect("frame"), b"hello");
        // Frames of growing and shrinking sizes through the reused buffers.
        for length in [3usize, 70_000, 1, 0, 5_000] {
            let values: Vec<f32> = (0..length).map(|i| i as f32).collect();
            left.send_with(9, |e| {
                e.f32s(&values);
            })
            .expect("send_with");
            let frame = right.receive_frame().expect("frame");
            let (tag, mut decoder) = Decoder::new(frame).expect("tag");
            assert_eq!(tag, 9);
            assert_eq!(decoder.f32s(), Ok(values));
            decoder.finish().expect("nothing left");
        }
        // Nothing sent: the read deadline fires.
        assert!(matches!(right.receive(), Err(IpcError::Timeout { .. })));
        // Oversized header is refused.
        let mut raw = left.stream.try_clone().expect("clone");
        raw.write_all(&(MAX_FRAME_BYTES + 1).to_le_bytes())
            .expect("write");
        assert!(matches!(
            right.receive(),
            Err(IpcError::FrameTooLarge { .. })
        ));
        drop(raw);
        drop(left);
        assert!(matches!(right.receive(), Err(IpcError::PeerClosed { .. })));
    }

    #[test]
    fn peer_credentials_are_checked() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("s");
        let listener = bind(&path).expect("bind");
        let _client = UnixStream::connect(&path).expect("connect");
        let me = std::process::id();
        // Our own pid is not an allowed child: refused.
        let refused = accept_checked(&listener, 1_000, |pid| pid != me, || Ok(()));
        assert!(matches!(refused, Err(IpcError::UnexpectedPeer { .. })));
        let _client = UnixStream::connect(&path).expect("connect");
        let (_, pid) =
            accept_checked(&listener, 1_000, |pid| pid == me, || Ok(())).expect("accepted");
        assert_eq!(pid, me);
        let long = directory.path().join("x".repeat(120));
        assert!(matches!(bind(&long), Err(IpcError::SocketPathTooLong(_))));
        assert!(matches!(
            accept_checked(&listener, 20, |_| true, || Ok(())),
            Err(IpcError::AcceptTimeout { .. })
        ));
    }
}
