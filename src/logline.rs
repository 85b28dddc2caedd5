//! The request log line: one a request, `INFO request method=… path=…
//! status=… cache=… mirror=… bytes=… ms=…` (an audit line adds `audit=true
//! user=… remote=… peer=…`). In the text format (`[log] format`, the
//! default) the server writes it straight into the log's buffer, byte for
//! byte as `tracing_subscriber`'s default text format writes the event, but
//! without `tracing`'s dispatch and field visits: they were the hit path's
//! largest single cost after the socket (see BENCHMARKS.md, "Hit-path
//! profile"). The filter still decides whether it is written
//! (`tracing::event_enabled!` on [`REQUEST_TARGET`] with the event's
//! fields). In the JSON format, inside a span, and in a process whose
//! `main` set no buffer (tests, library users), the line is a `tracing`
//! event of the same fields.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::Level;

use crate::logbuf::LogBuffer;

/// The target of the one-line-per-request event. Filters on `mirrorcache`
/// or `mirrorcache::http` still apply to it.
pub const REQUEST_TARGET: &str = "mirrorcache::http::request";

/// Where request lines go without `tracing` (the text format's buffer).
static DIRECT: OnceLock<LogBuffer> = OnceLock::new();

/// Request lines are written straight to `buffer` from now on, in the text
/// format (set once, by `main`, for the text format only).
pub fn write_requests_to(buffer: LogBuffer) {
    let _ = DIRECT.set(buffer);
}

/// One request's line.
pub struct RequestLine<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub status: u16,
    /// `HIT`, `MISS`, … or `-`.
    pub cache: &'a str,
    /// The mirror that answered, or `-`.
    pub mirror: &'a str,
    pub bytes: u64,
    pub elapsed: Duration,
    /// Who asked, for a remote that is not anonymous.
    pub audit: Option<Audit<'a>>,
}

/// The audit line's fields.
pub struct Audit<'a> {
    /// The user whose credentials were taken, or `-`.
    pub user: &'a str,
    pub remote: &'a str,
    /// The client's address, if known.
    pub peer: Option<IpAddr>,
}

thread_local! {
    /// The line being written, its room kept between requests.
    static LINE: RefCell<String> = const { RefCell::new(String::new()) };
}

impl RequestLine<'_> {
    /// Logs the line: into the text format's buffer if `main` set one and
    /// the filter lets [`REQUEST_TARGET`] through at `INFO`, else as a
    /// `tracing` event.
    pub fn log(&self) {
        let Some(buffer) = DIRECT.get() else {
            return self.event();
        };
        // Inside a span the default format writes the span's fields too.
        if !tracing::Span::current().is_none() {
            return self.event();
        }
        // Asked with the event's own fields, so a directive naming a field
        // picks the lines an event would.
        macro_rules! enabled {
            ($($audit:ident),*) => {
                tracing::event_enabled!(
                    target: REQUEST_TARGET,
                    Level::INFO,
                    message, method, path, status, cache, mirror, bytes, ms $(, $audit)*
                )
            };
        }
        let enabled = match self.audit {
            None => enabled!(),
            Some(_) => enabled!(audit, user, remote, peer),
        };
        if !enabled {
            return;
        }
        LINE.with(|line| {
            // Never re-entered (nothing below logs); if it were, the event.
            let Ok(mut line) = line.try_borrow_mut() else {
                return self.event();
            };
            line.clear();
            // Writing to a `String` does not fail.
            let _ = self.write_text(&mut line, SystemTime::now());
            buffer.append(line.as_bytes());
        });
    }

    /// The line as a `tracing` event.
    fn event(&self) {
        macro_rules! request_line {
            ($($audit:tt)*) => {
                tracing::info!(
                    target: REQUEST_TARGET,
                    method = %self.method,
                    path = self.path,
                    status = self.status,
                    cache = self.cache,
                    mirror = self.mirror,
                    bytes = self.bytes,
                    ms = %Millis(self.elapsed),
                    $($audit)*
                    "request"
                )
            };
        }
        match &self.audit {
            None => request_line!(),
            Some(audit) => request_line!(
                audit = true,
                user = audit.user,
                remote = audit.remote,
                peer = %PeerField(audit.peer),
            ),
        }
    }

    /// The line as the default text format writes the event: RFC 3339
    /// with microseconds, the level right-aligned in five columns, the
    /// message bare, then ` name=value`, strings quoted and escaped as
    /// `Debug` does, `Display` fields bare.
    fn write_text(&self, out: &mut String, now: SystemTime) -> fmt::Result {
        write_timestamp(out, now)?;
        out.push_str("  INFO request method=");
        out.push_str(self.method);
        out.push_str(" path=");
        quoted(out, self.path)?;
        out.push_str(" status=");
        out.push_str(itoa::Buffer::new().format(self.status));
        out.push_str(" cache=");
        quoted(out, self.cache)?;
        out.push_str(" mirror=");
        quoted(out, self.mirror)?;
        out.push_str(" bytes=");
        out.push_str(itoa::Buffer::new().format(self.bytes));
        out.push_str(" ms=");
        Millis(self.elapsed).write_to(out)?;
        if let Some(audit) = &self.audit {
            out.push_str(" audit=true user=");
            quoted(out, audit.user)?;
            out.push_str(" remote=");
            quoted(out, audit.remote)?;
            write!(out, " peer={}", PeerField(audit.peer))?;
        }
        out.push('\n');
        Ok(())
    }
}

/// `value` as `Debug` for `str` writes it.
fn quoted(out: &mut String, value: &str) -> fmt::Result {
    if needs_no_escape(value) {
        out.push('"');
        out.push_str(value);
        out.push('"');
        Ok(())
    } else {
        write!(out, "{value:?}")
    }
}

/// What `Debug` for `str` writes unchanged between its quotes.
fn needs_no_escape(value: &str) -> bool {
    value
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

/// The audit line's `peer`: the address, or `-`.
struct PeerField(Option<IpAddr>);

impl fmt::Display for PeerField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(peer) => peer.fmt(f),
            None => f.write_str("-"),
        }
    }
}

thread_local! {
    /// The second a thread last logged in, and its RFC 3339 text up to the
    /// fraction (`2026-11-30T20:07:41.`): formatted once a second, not per
    /// line.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// `now` as `humantime::format_rfc3339_micros` writes it.
fn write_timestamp(writer: &mut impl fmt::Write, now: SystemTime) -> fmt::Result {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since.as_secs();
    SECOND.with(|second| {
        let mut second = second.borrow_mut();
        if second.0 != seconds {
            let whole =
                humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(seconds));
            second.1 = whole.to_string();
            second.1.pop(); // the `Z`
            second.1.push('.');
            second.0 = seconds;
        }
        writer.write_str(&second.1)
    })?;
    // Six digits of microseconds, zero-padded.
    let micros = since.subsec_micros() + 1_000_000;
    let mut digits = itoa::Buffer::new();
    writer.write_str(&digits.format(micros)[1..])?;
    writer.write_char('Z')
}

/// A duration in milliseconds with one decimal (`12.3`), as the request
/// line's `ms` field: written with integer arithmetic, not float
/// formatting.
struct Millis(Duration);

impl Millis {
    fn write_to(&self, out: &mut impl fmt::Write) -> fmt::Result {
        let tenths = (self.0.as_micros() + 50) / 100;
        let mut digits = itoa::Buffer::new();
        out.write_str(digits.format(tenths / 10))?;
        out.write_char('.')?;
        out.write_str(digits.format(tenths % 10))
    }
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_to(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines() -> Vec<RequestLine<'static>> {
        let line = |path, audit| RequestLine {
            method: "GET",
            path,
            status: 200,
            cache: "HIT",
            mirror: "http://127.0.0.1:8080",
            bytes: 1024,
            elapsed: Duration::from_micros(1_250),
            audit,
        };
        vec![
            line("/o/a.bin", None),
            line("/o/with \"quote\"\\and\tcontrol/é", None),
            line(
                "/o/b.bin",
                Some(Audit {
                    user: "ci",
                    remote: "o",
                    peer: Some("127.0.0.1".parse().unwrap()),
                }),
            ),
            line(
                "/o/c.bin",
                Some(Audit {
                    user: "-",
                    remote: "o",
                    peer: None,
                }),
            ),
        ]
    }

    /// Everything after the timestamp.
    fn after_timestamps(text: &str) -> Vec<String> {
        text.lines()
            .map(|line| line.split_once(' ').unwrap().1.to_string())
            .collect()
    }

    /// The line written straight to the buffer is the one the default
    /// text format (as `main` sets it up) writes of the event.
    #[test]
    fn the_request_line_is_the_default_text_format_byte_for_byte() {
        let default = Buffer::default();
        let writer = default.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_target(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            lines().iter().for_each(RequestLine::event)
        });
        let default = String::from_utf8(default.0.lock().unwrap().clone()).unwrap();
        let mut ours = String::new();
        for line in lines() {
            line.write_text(&mut ours, SystemTime::now()).unwrap();
        }
        let ours = after_timestamps(&ours);
        assert_eq!(ours.len(), 4);
        assert_eq!(ours, after_timestamps(&default));
        assert!(ours[0].starts_with(" INFO request method=GET path=\"/o/a.bin\" status=200"));
        assert!(ours[2].ends_with(" audit=true user=\"ci\" remote=\"o\" peer=127.0.0.1"));
    }

    #[test]
    fn milliseconds_have_one_rounded_decimal() {
        for (micros, text) in [
            (0, "0.0"),
            (49, "0.0"),
            (50, "0.1"),
            (1_250, "1.3"),
            (12_345_678, "12345.7"),
        ] {
            assert_eq!(Millis(Duration::from_micros(micros)).to_string(), text);
        }
    }

    #[test]
    fn the_timestamp_is_rfc3339_with_microseconds() {
        let mut line = String::new();
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_796_069_261_561_802);
        write_timestamp(&mut line, at).unwrap();
        assert_eq!(line, "2026-11-30T20:07:41.561802Z");
        // The same second again (from the thread's cache), and a fraction
        // with leading zeros.
        let mut again = String::new();
        write_timestamp(&mut again, at - std::time::Duration::from_micros(561_000)).unwrap();
        assert_eq!(again, "2026-11-30T20:07:41.000802Z");
        assert_eq!(
            line,
            humantime::format_rfc3339_micros(at).to_string(),
            "as humantime writes it"
        );
    }
}
