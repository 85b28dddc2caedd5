//! The dashboard's charts: the per-minute history ([`crate::history`]) as
//! small server-rendered SVG line charts, one per measure. No script draws
//! them; every label is text interpolated by maud (escaped).

use std::fmt::Write as _;

use maud::{html, Markup};

use crate::history::Minute;

/// Width of the drawing in SVG units: one unit per minute of the day.
const WIDTH: usize = crate::history::MINUTES;
const HEIGHT: f64 = 100.0;

/// One measure over the window, `None` where it has no value (a hit ratio
/// in a minute without requests).
struct Series {
    id: &'static str,
    title: &'static str,
    values: Vec<Option<f64>>,
    format: fn(f64) -> String,
    /// A day's total makes sense (counts and bytes, not ratios or times).
    summed: bool,
}

/// The charts of the window `minutes` (oldest first).
pub(super) fn charts(minutes: &[Minute]) -> Markup {
    let series = [
        Series {
            id: "requests",
            title: "requests / min",
            values: minutes.iter().map(|m| Some(m.requests as f64)).collect(),
            format: |v| format!("{v:.0}"),
            summed: true,
        },
        Series {
            id: "hit-ratio",
            title: "hit ratio",
            values: minutes.iter().map(Minute::hit_ratio).collect(),
            format: |v| format!("{:.1}%", v * 100.0),
            summed: false,
        },
        Series {
            id: "from-cache",
            title: "bytes from cache / min",
            values: minutes
                .iter()
                .map(|m| Some(m.bytes_from_cache as f64))
                .collect(),
            format: |v| bytes(v as u64),
            summed: true,
        },
        Series {
            id: "from-upstream",
            title: "bytes from upstream / min",
            values: minutes
                .iter()
                .map(|m| Some(m.bytes_from_upstream as f64))
                .collect(),
            format: |v| bytes(v as u64),
            summed: true,
        },
        Series {
            id: "upstream-errors",
            title: "upstream errors / min",
            values: minutes
                .iter()
                .map(|m| Some(m.upstream_errors as f64))
                .collect(),
            format: |v| format!("{v:.0}"),
            summed: true,
        },
        Series {
            id: "first-byte",
            title: "fill latency (upstream first byte, mean)",
            values: minutes.iter().map(|m| m.first_byte_ms).collect(),
            format: |v| format!("{v:.1} ms"),
            summed: false,
        },
    ];
    html! {
        div.charts {
            @for s in &series { (chart(s)) }
        }
    }
}

fn chart(s: &Series) -> Markup {
    let max = s.values.iter().flatten().fold(0.0f64, |a, &b| a.max(b));
    let last = s.values.iter().rev().flatten().next().copied();
    let summary = if s.summed {
        format!(
            "24 h: {} · peak {}",
            (s.format)(s.values.iter().flatten().sum()),
            (s.format)(max)
        )
    } else {
        format!(
            "last {} · peak {}",
            last.map_or_else(|| "–".to_string(), s.format),
            (s.format)(max)
        )
    };
    html! {
        figure.chart id=(format!("chart-{}", s.id)) {
            figcaption { span.title { (s.title) } " " span.summary { (summary) } }
            svg xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {WIDTH} {HEIGHT}"))
                preserveAspectRatio="none" width="360" height="60" role="img" {
                title { (s.title) ": " (summary) }
                rect x="0" y="0" width=(WIDTH) height=(HEIGHT) fill="#f6f8fa" {}
                path d=(line(&s.values, max)) fill="none" stroke="#2f6fb0" stroke-width="2"
                    vector-effect="non-scaling-stroke" {}
            }
            div.axis { span { "−24 h" } span { "now" } }
        }
    }
}

/// The SVG path of `values` scaled to `max` (a gap where a value is none).
fn line(values: &[Option<f64>], max: f64) -> String {
    let mut d = String::with_capacity(values.len() * 8);
    let mut pen_down = false;
    for (x, value) in values.iter().enumerate() {
        match value {
            Some(v) => {
                let y = if max > 0.0 {
                    HEIGHT - 2.0 - v / max * (HEIGHT - 6.0)
                } else {
                    HEIGHT - 2.0
                };
                let _ = write!(d, "{}{x} {y:.1}", if pen_down { "L" } else { "M" });
                pen_down = true;
            }
            None => pen_down = false,
        }
    }
    d
}

fn bytes(n: u64) -> String {
    bytesize::ByteSize(n).display().iec().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_breaks_where_there_is_no_value_and_scales_to_its_peak() {
        assert_eq!(
            line(&[Some(0.0), Some(10.0), None, Some(5.0)], 10.0),
            "M0 98.0L1 4.0M3 51.0"
        );
        assert_eq!(line(&[Some(0.0)], 0.0), "M0 98.0");
    }
}
