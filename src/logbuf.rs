//! The log's buffer (`[log] buffer`, `[log] flush`): the thread that logs a
//! line appends it to memory, and one thread of the buffer's own writes
//! what is waiting to the sink (stderr) every `flush`, as soon as `buffer`
//! bytes wait, or at once after a warning or an error. A request's log
//! line then costs no system call and wakes no thread, as nginx's
//! `access_log … buffer= flush=` (the anchor of the benchmarks) does. The
//! lines of a process killed with SIGKILL that were not yet written (at
//! most `flush` of them) are lost; a graceful stop writes them all
//! ([`Flusher`]'s drop).

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

/// Bytes held before lines are dropped (counted, and the count logged):
/// what a sink that stopped taking lines may cost in memory.
const MAX_HELD: usize = 16 << 20;

/// Where the server's log lines go: a [`MakeWriter`] for `tracing`.
#[derive(Clone)]
pub struct LogBuffer {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Bytes that wake the writing thread (0: every line does).
    limit: usize,
}

#[derive(Default)]
struct State {
    lines: Vec<u8>,
    /// A warning or an error is waiting.
    urgent: bool,
    closed: bool,
    dropped: u64,
}

impl State {
    /// Whether the writing thread has a reason to write now (a buffer of
    /// `limit` bytes, 0 for every line).
    fn due(&self, limit: usize) -> bool {
        self.closed || self.urgent || (!self.lines.is_empty() && self.lines.len() >= limit)
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends one whole line (or drops and counts it when the buffer is
    /// full), waking the writing thread when it is due.
    fn append(&self, line: &[u8], urgent: bool) {
        let mut state = self.state();
        if state.lines.len() + line.len() > MAX_HELD {
            state.dropped += 1;
            return;
        }
        state.lines.extend_from_slice(line);
        state.urgent |= urgent;
        let wake = state.due(self.limit);
        drop(state);
        if wake {
            self.wake.notify_one();
        }
    }
}

impl LogBuffer {
    /// Appends one whole line of an `INFO` event written without `tracing`
    /// (`crate::logline`).
    pub fn append(&self, line: &[u8]) {
        self.shared.append(line, false);
    }
}

/// Writes what is waiting when dropped, then stops the writing thread.
pub struct Flusher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// A buffer writing to `sink` once `limit` bytes wait (at most half of
/// what it holds before dropping lines) or every `every`, and its flusher
/// (keep it for as long as lines are logged).
pub fn buffered(
    sink: Box<dyn Write + Send>,
    limit: usize,
    every: Duration,
) -> io::Result<(LogBuffer, Flusher)> {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        wake: Condvar::new(),
        limit: limit.min(MAX_HELD / 2),
    });
    let for_thread = shared.clone();
    let thread = std::thread::Builder::new()
        .name("log-writer".into())
        .spawn(move || write_out(&for_thread, sink, every))?;
    Ok((
        LogBuffer {
            shared: shared.clone(),
        },
        Flusher {
            shared,
            thread: Some(thread),
        },
    ))
}

/// The writing thread: waits for a reason to write, takes what is waiting
/// (the buffer swapped with an empty one, so loggers never wait for the
/// sink) and writes it.
fn write_out(shared: &Shared, mut sink: Box<dyn Write + Send>, every: Duration) {
    let mut taken = Vec::new();
    loop {
        let mut state = shared.state();
        let deadline = Instant::now() + every;
        loop {
            if state.due(shared.limit) {
                break;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            state = shared
                .wake
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        std::mem::swap(&mut state.lines, &mut taken);
        state.urgent = false;
        let dropped = std::mem::take(&mut state.dropped);
        let closed = state.closed;
        drop(state);
        // Nowhere to tell of a failed write to the log but the log itself.
        if dropped > 0 {
            let _ = writeln!(
                sink,
                "{dropped} log lines dropped: the log's sink took no more"
            );
        }
        if !taken.is_empty() {
            let _ = sink.write_all(&taken).and_then(|()| sink.flush());
            taken.clear();
            // A burst's room is not kept for ever.
            taken.shrink_to(shared.limit.max(64 << 10));
        }
        if closed {
            return;
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.shared.state().closed = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One log line (as `tracing`'s formatter writes it: whole, in one call).
pub struct Line<'a> {
    shared: &'a Shared,
    urgent: bool,
}

impl Write for Line<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.shared.append(bytes, self.urgent);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogBuffer {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        Line {
            shared: &self.shared,
            urgent: false,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Line<'a> {
        Line {
            shared: &self.shared,
            // Less verbose compares smaller: WARN and ERROR.
            urgent: *meta.level() <= tracing::Level::WARN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink the test reads: what was written, and how many writes.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            let mut sink = self.0.lock().unwrap();
            sink.0.extend_from_slice(bytes);
            sink.1 += 1;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Sink {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().0.clone()).unwrap()
        }
        fn writes(&self) -> usize {
            self.0.lock().unwrap().1
        }
        /// Waits (10 s at most) until `what` holds of the text.
        fn wait_for(&self, what: impl Fn(&str) -> bool) -> String {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let text = self.text();
                if what(&text) || Instant::now() > deadline {
                    return text;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    fn line(buffer: &LogBuffer, urgent: bool, text: &str) {
        let mut line = Line {
            shared: &buffer.shared,
            urgent,
        };
        line.write_all(text.as_bytes()).unwrap();
    }

    /// Info lines wait in memory (no write for a flush interval far longer
    /// than the test); a warning takes them out with it, in order.
    #[test]
    fn lines_wait_until_a_warning_and_leave_in_order() {
        let sink = Sink::default();
        let (buffer, _flusher) =
            buffered(Box::new(sink.clone()), 1 << 20, Duration::from_secs(3600)).unwrap();
        for i in 0..100 {
            line(&buffer, false, &format!("info {i}\n"));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(sink.writes(), 0, "{}", sink.text());
        line(&buffer, true, "warn\n");
        let text = sink.wait_for(|t| t.ends_with("warn\n"));
        let expected: String = (0..100).map(|i| format!("info {i}\n")).collect();
        assert_eq!(text, format!("{expected}warn\n"));
    }

    /// Lines go out once `limit` bytes wait, or after the flush interval;
    /// dropping the flusher writes what is left.
    #[test]
    fn a_full_buffer_the_interval_and_the_drop_each_write() {
        let sink = Sink::default();
        let (buffer, flusher) =
            buffered(Box::new(sink.clone()), 64, Duration::from_secs(3600)).unwrap();
        line(&buffer, false, &"x".repeat(63));
        line(&buffer, false, "\n");
        assert_eq!(sink.wait_for(|t| t.len() == 64).len(), 64);
        line(&buffer, false, "tail\n");
        drop(flusher);
        assert!(sink.text().ends_with("tail\n"));

        let sink = Sink::default();
        let (buffer, _flusher) =
            buffered(Box::new(sink.clone()), 1 << 20, Duration::from_millis(20)).unwrap();
        line(&buffer, false, "soon\n");
        assert_eq!(sink.wait_for(|t| !t.is_empty()), "soon\n");
    }

    /// Past what the buffer may hold, lines are dropped and counted, and
    /// the count is written.
    #[test]
    fn lines_past_the_cap_are_dropped_and_counted() {
        /// A sink that blocks until let go (and says when it was entered).
        struct Stuck(Arc<Mutex<()>>, Sink, Arc<std::sync::atomic::AtomicBool>);
        impl Write for Stuck {
            fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
                self.2.store(true, std::sync::atomic::Ordering::SeqCst);
                let _held = self.0.lock().unwrap();
                self.1.write(bytes)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock().unwrap();
        let sink = Sink::default();
        let entered = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (buffer, flusher) = buffered(
            Box::new(Stuck(gate.clone(), sink.clone(), entered.clone())),
            0,
            Duration::from_secs(3600),
        )
        .unwrap();
        // The first line is taken by the writer, which then blocks.
        line(&buffer, false, "first\n");
        while !entered.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let big = "y".repeat(1 << 20);
        for _ in 0..20 {
            line(&buffer, false, &big);
        }
        drop(held);
        drop(flusher);
        let text = sink.text();
        assert!(text.starts_with("first\n"), "{}", &text[..20]);
        assert!(text.contains("4 log lines dropped"), "{}", text.len());
        assert_eq!(text.matches('y').count(), 16 << 20);
    }
}
