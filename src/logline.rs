//! The request log line, written without `tracing_subscriber`'s general
//! formatter: one line per request is the hit path's largest single cost
//! after the socket (callgrind: about 12,000 of 42,000 instructions per
//! 1 KiB hit went to formatting it, mostly styling with ANSI turned off and
//! `Debug` of every field). [`TextLine`] writes events of
//! [`REQUEST_TARGET`] directly, byte for byte as the default text format
//! does, and hands every other event to that default format.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::time::SystemTime as SystemTimer;
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

/// The target of the one-line-per-request event (`http::artifact`). Filters
/// on `mirrorcache` or `mirrorcache::http` still apply to it.
pub const REQUEST_TARGET: &str = "mirrorcache::http::request";

/// The text log format: the default one (no target, no ANSI), with a fast
/// path for the request line.
pub struct TextLine {
    fallback: format::Format<format::Full, SystemTimer>,
}

impl Default for TextLine {
    fn default() -> TextLine {
        TextLine {
            fallback: format::Format::default()
                .with_target(false)
                .with_ansi(false),
        }
    }
}

impl<S, N> FormatEvent<S, N> for TextLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        // Inside a span the default format prints the span's fields too.
        if meta.target() != REQUEST_TARGET || ctx.lookup_current().is_some() {
            return self.fallback.format_event(ctx, writer, event);
        }
        write_line(&mut writer, SystemTime::now(), meta.level(), event)
    }
}

fn write_line(
    writer: &mut impl fmt::Write,
    now: SystemTime,
    level: &Level,
    event: &Event<'_>,
) -> fmt::Result {
    // As the default: RFC 3339 with microseconds, the level right-aligned
    // in five columns.
    let level = match *level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    };
    write_timestamp(writer, now)?;
    writer.write_char(' ')?;
    writer.write_str(level)?;
    writer.write_char(' ')?;
    let mut fields = Fields {
        writer,
        first: true,
        result: Ok(()),
    };
    event.record(&mut fields);
    fields.result?;
    writer.write_char('\n')
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
pub struct Millis(pub Duration);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tenths = (self.0.as_micros() + 50) / 100;
        let mut digits = itoa::Buffer::new();
        f.write_str(digits.format(tenths / 10))?;
        f.write_char('.')?;
        f.write_str(digits.format(tenths % 10))
    }
}

/// Writes each field as the default format's visitor does: the message
/// bare, then ` name=value`, strings quoted and escaped as `Debug` does.
struct Fields<'w, W> {
    writer: &'w mut W,
    first: bool,
    result: fmt::Result,
}

impl<W: fmt::Write> Fields<'_, W> {
    fn name(&mut self, field: &Field) -> fmt::Result {
        if !std::mem::take(&mut self.first) {
            self.writer.write_char(' ')?;
        }
        let name = field.name();
        if name == "message" {
            return Ok(());
        }
        self.writer
            .write_str(name.strip_prefix("r#").unwrap_or(name))?;
        self.writer.write_char('=')
    }
}

/// What `Debug` for `str` writes unchanged between its quotes.
fn needs_no_escape(value: &str) -> bool {
    value
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

impl<W: fmt::Write> Visit for Fields<'_, W> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        self.result = self.name(field).and_then(|()| {
            if field.name() == "message" {
                self.writer.write_str(value)
            } else if needs_no_escape(value) {
                self.writer.write_char('"')?;
                self.writer.write_str(value)?;
                self.writer.write_char('"')
            } else {
                write!(self.writer, "{value:?}")
            }
        });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.result.is_err() {
            return;
        }
        self.result = self
            .name(field)
            .and_then(|()| self.writer.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        self.result = self
            .name(field)
            .and_then(|()| write!(self.writer, "{value:?}"));
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

    fn request_events() {
        let method = axum::http::Method::GET;
        for path in ["/o/a.bin", "/o/with \"quote\"\\and\tcontrol/é"] {
            tracing::info!(
                target: REQUEST_TARGET,
                method = %method,
                path,
                status = 200u16,
                cache = "HIT",
                mirror = "http://127.0.0.1:8080",
                bytes = 1024u64,
                ms = format_args!("{:.1}", 1.25),
                "request"
            );
        }
        tracing::warn!(target: REQUEST_TARGET, r#type = "x", "request");
    }

    /// Everything after the timestamp, as the given formatter writes it.
    fn lines_after_timestamps(buffer: &Buffer) -> Vec<String> {
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|line| line.split_once(' ').unwrap().1.to_string())
            .collect()
    }

    #[test]
    fn the_request_line_is_the_default_text_format_byte_for_byte() {
        let (ours, default) = (Buffer::default(), Buffer::default());
        let writer = ours.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .event_format(TextLine::default())
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, request_events);
        let writer = default.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_target(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, request_events);
        let ours = lines_after_timestamps(&ours);
        assert_eq!(ours.len(), 3);
        assert_eq!(ours, lines_after_timestamps(&default));
        assert!(ours[0].starts_with(" INFO request method=GET path=\"/o/a.bin\" status=200"));
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
