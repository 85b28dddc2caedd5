//! An index document as the learner reads it: decompressed by its magic
//! (gzip, xz, zstd, or plain) as a stream, never whole, with a bound on the
//! bytes it unpacks to and on the memory a decompressor may take, and read a
//! line at a time with a bound on a line's length. Every ecosystem whose
//! learner reads a compressed or large index (apt's `Packages`, rpm's
//! `primary.xml`) reads it through here, so a bomb from a broken or hostile
//! mirror costs a bounded amount of memory and time, and past the bound the
//! learning stops (the caller says so, naming the document); the document
//! itself is served as the mirror sent it.

use std::io::{self, BufRead, BufReader, Read};

/// `max_learned_size`'s default: the most a document is unpacked to while
/// its digests are learned. Debian's largest `Packages` (main/amd64) is
/// about 50 MB unpacked and Fedora's `everything` `primary.xml` about 300
/// MB: more than an order of magnitude above the first, three times the
/// second.
pub const DEFAULT_MAX_UNPACKED: u64 = 1024 * 1024 * 1024;

/// The most an xz decoder may allocate (its dictionary, chiefly: 64 MiB
/// at `xz -9`); a stream that asks for more is refused by liblzma.
const XZ_MEMORY: u64 = 128 * 1024 * 1024;

/// The longest line [`Unpacked::line`] holds (an apt `Description` line is
/// a few hundred bytes): a longer one ends the reading.
pub const MAX_LINE: usize = 1024 * 1024;

/// Why a document was not read to its end.
#[derive(Debug, thiserror::Error)]
pub enum Stopped {
    #[error("unpacks to more than {0} bytes (max_learned_size)")]
    TooLarge(u64),
    #[error("has a line longer than {MAX_LINE} bytes")]
    LongLine,
    #[error("cannot be read: {0}")]
    Broken(String),
}

/// The decompressed bytes of a document, read as a stream.
pub struct Unpacked<'a> {
    reader: Box<dyn BufRead + 'a>,
}

impl<'a> Unpacked<'a> {
    /// `body` decompressed by its magic, failing past `max` bytes.
    pub fn new(body: &'a [u8], max: u64) -> Result<Unpacked<'a>, Stopped> {
        let inner: Box<dyn Read + 'a> = if body.starts_with(&[0x1f, 0x8b]) {
            Box::new(flate2::read::MultiGzDecoder::new(body))
        } else if body.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            let decoder = zstd::stream::read::Decoder::with_buffer(body)
                .map_err(|e| Stopped::Broken(e.to_string()))?;
            Box::new(decoder)
        } else if body.starts_with(b"\xfd7zXZ\0") {
            let stream = liblzma::stream::Stream::new_stream_decoder(
                XZ_MEMORY,
                liblzma::stream::CONCATENATED,
            )
            .map_err(|e| Stopped::Broken(e.to_string()))?;
            Box::new(liblzma::read::XzDecoder::new_stream(body, stream))
        } else {
            Box::new(body)
        };
        Ok(Unpacked {
            reader: Box::new(BufReader::with_capacity(
                64 * 1024,
                Capped {
                    inner,
                    left: max,
                    max,
                },
            )),
        })
    }

    /// The reader itself (for a streaming parser of its own: quick-xml).
    pub fn into_reader(self) -> Box<dyn BufRead + 'a> {
        self.reader
    }

    /// The next line into `line` (cleared first, without its `\n`);
    /// `Ok(false)` at the end.
    pub fn line(&mut self, line: &mut Vec<u8>) -> Result<bool, Stopped> {
        line.clear();
        loop {
            let available = self.reader.fill_buf().map_err(|e| stopped(&e))?;
            if available.is_empty() {
                return Ok(!line.is_empty());
            }
            let (taken, done) = match available.iter().position(|b| *b == b'\n') {
                Some(at) => (at + 1, true),
                None => (available.len(), false),
            };
            let end = if done { taken - 1 } else { taken };
            if line.len() + end > MAX_LINE {
                return Err(Stopped::LongLine);
            }
            line.extend_from_slice(&available[..end]);
            self.reader.consume(taken);
            if done {
                return Ok(true);
            }
        }
    }
}

/// The stop an I/O error from [`Unpacked`]'s reader means.
pub fn stopped(error: &io::Error) -> Stopped {
    match error.get_ref().and_then(|e| e.downcast_ref::<TooLarge>()) {
        Some(TooLarge(max)) => Stopped::TooLarge(*max),
        None => Stopped::Broken(error.to_string()),
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unpacks to more than {0} bytes")]
struct TooLarge(u64);

/// A reader that fails once it has given its bound.
struct Capped<R> {
    inner: R,
    left: u64,
    max: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // The bound is reached: the end, if nothing follows.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::other(TooLarge(self.max))),
            };
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xz(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        liblzma::read::XzEncoder::new(bytes, 1)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn every_format_unpacks_to_the_same_lines() {
        let text = b"one\ntwo\n\nthree";
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, text).unwrap();
        let gz = gz.finish().unwrap();
        let zst = zstd::stream::encode_all(&text[..], 3).unwrap();
        for body in [&text[..], &gz, &xz(text), &zst] {
            let mut unpacked = Unpacked::new(body, 1024).unwrap();
            let (mut line, mut lines) = (Vec::new(), Vec::new());
            while unpacked.line(&mut line).unwrap() {
                lines.push(String::from_utf8(line.clone()).unwrap());
            }
            assert_eq!(lines, ["one", "two", "", "three"]);
        }
    }

    #[test]
    fn past_the_bound_the_reading_stops() {
        let chunk = vec![b'\n'; 1024 * 1024];
        // Concatenated xz streams: each unpacks to 1 MiB.
        let one = xz(&chunk);
        let bomb: Vec<u8> = std::iter::repeat_n(&one[..], 8)
            .flatten()
            .copied()
            .collect();
        let mut unpacked = Unpacked::new(&bomb, 3 * 1024 * 1024).unwrap();
        let mut line = Vec::new();
        let mut lines = 0u64;
        let stop = loop {
            match unpacked.line(&mut line) {
                Ok(true) => lines += 1,
                Ok(false) => panic!("read to the end"),
                Err(stop) => break stop,
            }
        };
        assert!(matches!(stop, Stopped::TooLarge(_)), "{stop}");
        assert!(lines <= 3 * 1024 * 1024);
        // Exactly the bound is still the end.
        let mut unpacked = Unpacked::new(&one, 1024 * 1024).unwrap();
        while unpacked.line(&mut line).unwrap() {}
        let long = vec![b'x'; MAX_LINE + 1];
        let mut unpacked = Unpacked::new(&long, u64::MAX).unwrap();
        assert!(matches!(unpacked.line(&mut line), Err(Stopped::LongLine)));
    }
}
