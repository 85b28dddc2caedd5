//! Progress of long work (`verify`, `warm`): on a terminal an indicatif bar
//! (items and bytes done, rate, time left); otherwise plain lines, so a CI log
//! shows progress without control characters.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often the plain display prints a progress line (when it prints them).
const PLAIN_EVERY: Duration = Duration::from_secs(5);

pub struct Progress {
    /// `Some` on a terminal.
    bar: Option<ProgressBar>,
    what: &'static str,
    items_total: u64,
    items_done: AtomicU64,
    bytes_done: AtomicU64,
    bytes_total: u64,
    started: Instant,
    /// When the plain display last printed a progress line.
    last_line: Mutex<Instant>,
}

impl Progress {
    /// A display for `items_total` items (`what`: "blobs", "artifacts") of
    /// `bytes_total` bytes (0 when unknown). A bar when stderr is a terminal.
    pub fn new(what: &'static str, items_total: u64, bytes_total: u64) -> Progress {
        Progress::with_terminal(
            what,
            items_total,
            bytes_total,
            std::io::stderr().is_terminal(),
        )
    }

    pub fn with_terminal(
        what: &'static str,
        items_total: u64,
        bytes_total: u64,
        terminal: bool,
    ) -> Progress {
        let bar = terminal.then(|| {
            let (len, template) = if bytes_total > 0 {
                (bytes_total, "{wide_bar} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ETA {eta} · {msg}")
            } else {
                (items_total, "{wide_bar} {per_sec} ETA {eta} · {msg}")
            };
            let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(template)
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            bar
        });
        let progress = Progress {
            bar,
            what,
            items_total,
            items_done: AtomicU64::new(0),
            bytes_done: AtomicU64::new(0),
            bytes_total,
            started: Instant::now(),
            last_line: Mutex::new(Instant::now()),
        };
        progress.set_message();
        progress
    }

    /// One item done, of `bytes` bytes. The plain display prints a progress
    /// line at most every few seconds (and none when `quiet_lines`, for
    /// callers that print a line per item themselves).
    pub fn advance(&self, bytes: u64, quiet_lines: bool) {
        self.items_done.fetch_add(1, Ordering::Relaxed);
        self.bytes_done.fetch_add(bytes, Ordering::Relaxed);
        match &self.bar {
            Some(bar) => {
                if self.bytes_total > 0 {
                    bar.inc(bytes);
                } else {
                    bar.inc(1);
                }
                self.set_message();
            }
            None if !quiet_lines => {
                let mut last = self.last_line.lock().expect("progress poisoned");
                if last.elapsed() >= PLAIN_EVERY {
                    *last = Instant::now();
                    eprintln!("{}", self.summary());
                }
            }
            None => {}
        }
    }

    /// A line above the bar on a terminal; on stdout otherwise.
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => println!("{line}"),
        }
    }

    /// "12/40 blobs, 1.2 GiB of 3.0 GiB, 80 MiB/s, 25 s left".
    pub fn summary(&self) -> String {
        let (items, bytes) = (
            self.items_done.load(Ordering::Relaxed),
            self.bytes_done.load(Ordering::Relaxed),
        );
        let secs = self.started.elapsed().as_secs_f64().max(0.001);
        let rate = bytes as f64 / secs;
        let mut line = format!(
            "{items}/{} {}, {}",
            self.items_total,
            self.what,
            size(bytes)
        );
        if self.bytes_total > 0 {
            line += &format!(" of {}", size(self.bytes_total));
        }
        line += &format!(", {}/s", size(rate as u64));
        if self.bytes_total > bytes && rate > 0.0 {
            line += &format!(", {:.0} s left", (self.bytes_total - bytes) as f64 / rate);
        }
        line
    }

    /// Clears the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    fn set_message(&self) {
        if let Some(bar) = &self.bar {
            let mut message = format!(
                "{}/{} {}",
                self.items_done.load(Ordering::Relaxed),
                self.items_total,
                self.what
            );
            if self.bytes_total == 0 {
                // The bar counts items: say the bytes here (warm).
                message += &format!(", {}", size(self.bytes_done.load(Ordering::Relaxed)));
            }
            bar.set_message(message);
        }
    }
}

/// `verify`'s progress: the display is made when verify knows its totals.
#[derive(Default)]
pub struct VerifyProgress {
    progress: std::sync::OnceLock<Progress>,
}

impl VerifyProgress {
    pub fn finish(&self) {
        if let Some(progress) = self.progress.get() {
            progress.finish();
        }
    }
}

impl crate::cache::verify::Observer for VerifyProgress {
    fn start(&self, blobs: u64, bytes: u64) {
        let _ = self.progress.set(Progress::new("blobs", blobs, bytes));
    }

    fn blob_done(&self, bytes: u64) {
        if let Some(progress) = self.progress.get() {
            progress.advance(bytes, false);
        }
    }
}

fn size(bytes: u64) -> String {
    bytesize::ByteSize(bytes).display().iec().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_bar_templates_are_valid() {
        for bytes in [0, 4096] {
            let progress = Progress::with_terminal("artifacts", 2, bytes, true);
            progress.advance(1024, true);
            progress.println("a line above the bar");
            progress.finish();
        }
    }

    #[test]
    fn the_plain_summary_counts_items_and_bytes() {
        let progress = Progress::with_terminal("blobs", 4, 4096, false);
        progress.advance(1024, true);
        progress.advance(1024, true);
        let line = progress.summary();
        assert!(
            line.starts_with("2/4 blobs, 2.0 KiB of 4.0 KiB, "),
            "{line}"
        );
    }
}
