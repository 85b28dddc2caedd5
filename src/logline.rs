//! The request log line, written without `tracing_subscriber`'s general
//! formatter: one line per request is the hit path's largest single cost
//! after the socket (callgrind: about 12,000 of 42,000 instructions per
//! 1 KiB hit went to formatting it, mostly styling with ANSI turned off and
//! `Debug` of every field). [`TextLine`] writes events of
//! [`REQUEST_TARGET`] directly, byte for byte as the default text format
//! does, and hands every other event to that default format.

use std::fmt;
use std::time::SystemTime;

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
    write!(writer, "{} {level} ", humantime::format_rfc3339_micros(now))?;
    let mut fields = Fields {
        writer,
        first: true,
        result: Ok(()),
    };
    event.record(&mut fields);
    fields.result?;
    writer.write_char('\n')
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
            .and_then(|()| write!(self.writer, "{value}"));
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
    use std::fmt::Write as _;
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
    fn the_timestamp_is_rfc3339_with_microseconds() {
        let mut line = String::new();
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_796_069_261_561_802);
        write!(line, "{}", humantime::format_rfc3339_micros(at)).unwrap();
        assert_eq!(line, "2026-11-30T20:07:41.561802Z");
    }
}
