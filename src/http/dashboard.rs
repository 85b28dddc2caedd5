//! The dashboard, `GET /-/`: one server-rendered page over the same
//! [`Snapshot`] as `/-/status`. Works without JavaScript; a few lines of
//! inline script refresh the numbers from `/-/status` every few seconds.
//!
//! The page is a maud template, checked at compile time; maud escapes every
//! interpolated string, so names from the config (mirror URLs) or from
//! requests (fill keys, error texts) are always text, never markup. The
//! inline script writes with `textContent` only, for the same reason.

use std::sync::Arc;

use axum::extract::State;
use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::snapshot::{MirrorView, RemoteView, Snapshot};
use crate::fill::FillProgress;
use crate::proxy::Proxy;

/// With `[auth]`, only the remotes the caller may read.
pub async fn dashboard(
    State(proxy): State<Arc<Proxy>>,
    peer: Option<axum::Extension<super::access::Peer>>,
    headers: axum::http::HeaderMap,
) -> Result<Markup, crate::error::ProxyError> {
    let peer = peer.map(|axum::Extension(p)| p);
    let snapshot = super::access::snapshot_for(&proxy, &headers, peer.as_ref()).await?;
    // The history of the remotes shown, and nothing of the others.
    let window = proxy
        .history
        .window(|name| snapshot.remotes.iter().any(|r| r.name == name));
    let saved_today: Vec<u64> = snapshot
        .remotes
        .iter()
        .map(|r| {
            proxy
                .history
                .window(|name| name == r.name)
                .iter()
                .map(|m| m.bytes_from_cache)
                .sum()
        })
        .collect();
    let history = History {
        on: proxy.server().history,
        window: &window,
        saved_today: &saved_today,
    };
    Ok(page(&snapshot, &history))
}

/// What the dashboard shows of the per-minute history.
struct History<'a> {
    on: bool,
    /// The last 24 h of the remotes shown, oldest first.
    window: &'a [crate::history::Minute],
    /// Bytes served from the cache in the last 24 h, by remote (as `remotes`).
    saved_today: &'a [u64],
}

fn page(s: &Snapshot, history: &History) -> Markup {
    let saved: u64 = s.remotes.iter().map(|r| r.counts.bytes_from_cache).sum();
    let saved_today: u64 = history.saved_today.iter().sum();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "mirrorcache" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "mirrorcache" }
                p.note { "Counts since the process started. " a href="/-/status" { "JSON" } " · " a href="/-/metrics" { "metrics" } " · " a href="/-/browse/" { "browse the cache" } }
                section #store {
                    h2 { "Store" }
                    progress #store-bar value=(s.store_bytes.unwrap_or(0)) max=(s.store_max_bytes.max(1)) {}
                    " "
                    span #store-text { (store_text(s.store_bytes, s.store_max_bytes)) }
                }
                section #history {
                    h2 { "Last 24 hours" }
                    @if history.on {
                        (super::charts::charts(history.window))
                    } @else {
                        p.note { "History is off (" code { "server.history = false" } ")." }
                    }
                }
                section #remotes {
                    h2 { "Remotes" }
                    p #saved { "Bytes saved (served from the cache instead of upstream): "
                        span #saved-total { (bytes(saved)) } " since start, "
                        span #saved-today { (bytes(saved_today)) } " in the last 24 h." }
                    table {
                        thead { tr { th { "remote" } th { "kind" } th { "hits" } th { "misses" } th { "hit ratio" } th { "bytes from cache" } th { "bytes from upstream" } th { "saved, 24 h" } th { "" } } }
                        tbody { @for (remote, today) in s.remotes.iter().zip(history.saved_today) { (remote_row(remote, *today)) } }
                    }
                }
                section #mirrors {
                    h2 { "Mirrors" }
                    table {
                        thead { tr { th { "remote" } th { "mirror" } th { "health" } th { "first byte" } th { "in flight" } th { "failures (in a row / all)" } th { "rate limit" } } }
                        tbody {
                            @for remote in &s.remotes {
                                @for (idx, mirror) in remote.mirrors.iter().enumerate() {
                                    (mirror_row(&remote.name, idx, mirror, s.now_ms))
                                }
                            }
                        }
                    }
                }
                section #fills {
                    h2 { "Fills in progress" }
                    table {
                        thead { tr { th { "artifact" } th { "mirror" } th { "progress" } th { "" } } }
                        tbody #fills-body { @for fill in &s.fills { (fill_row(fill)) } }
                    }
                }
                section #quarantine {
                    h2 { "Quarantine refusals" }
                    table {
                        thead { tr { th { "remote" } th { "package" } th { "version" } th { "advisory" } th { "class" } th { "count" } th { "last" } } }
                        tbody #quarantine-body {
                            @for r in &s.quarantine_refusals {
                                tr {
                                    td.remote { (r.remote) } td.package { (r.package) } td.version { (r.version) }
                                    td.advisory { (r.advisory) } td.class { (r.class) } td.count { (r.count) }
                                    td.last { time { (http_time(r.last_ms)) } }
                                }
                            }
                        }
                    }
                }
                section #errors {
                    h2 { "Recent errors" }
                    ol #errors-list {
                        @for error in s.recent_errors.iter().rev() {
                            li { time { (http_time(error.at_ms)) } " " span.source { (error.source) } ": " span.what { (error.what) } }
                        }
                    }
                }
                script { (PreEscaped(SCRIPT)) }
            }
        }
    }
}

fn remote_row(r: &RemoteView, saved_today: u64) -> Markup {
    html! {
        tr data-remote=(r.name) {
            td.name { (r.name) }
            td { (r.kind) }
            td.hits { (r.counts.hits) }
            td.misses { (r.counts.misses) }
            td.ratio { (percent(r.hit_ratio)) }
            td.from-cache { (bytes(r.counts.bytes_from_cache)) }
            td.from-upstream { (bytes(r.counts.bytes_from_upstream)) }
            td.saved-today { (bytes(saved_today)) }
            td { a.browse href=(format!("/-/browse/{}/", r.name)) { "browse" } }
        }
    }
}

fn mirror_row(remote: &str, idx: usize, m: &MirrorView, now_ms: i64) -> Markup {
    html! {
        tr data-mirror=(format!("{remote}#{idx}")) {
            td { (remote) }
            td.url { (m.url) }
            td.health.(m.health) { (health_text(m, now_ms)) }
            td.first-byte { (latency(m.first_byte_ms)) }
            td.in-flight { (m.in_flight) }
            td.failures { (m.consecutive_failures) " / " (m.failures) }
            td.limit { (limit_text(m, now_ms)) }
        }
    }
}

/// A mirror's rate limit: waiting out a 429, or the pulls its last
/// `RateLimit-Remaining` said were left.
fn limit_text(m: &MirrorView, now_ms: i64) -> String {
    match (m.rate_limited_until_ms, m.ratelimit_remaining) {
        (Some(until), _) => format!(
            "429: not asked until {} (in {} s)",
            http_time(until),
            ((until - now_ms).max(0) + 999) / 1000
        ),
        (None, Some(left)) => format!("{left} left"),
        (None, None) => "–".to_string(),
    }
}

fn fill_row(f: &FillProgress) -> Markup {
    html! {
        tr.fill {
            td.key { (f.key) }
            td { (f.mirror.as_deref().unwrap_or("")) }
            td {
                @if let Some(total) = f.total {
                    progress value=(f.written) max=(total.max(1)) {}
                } @else {
                    progress {}
                }
            }
            td.progress-text { (fill_text(f)) }
        }
    }
}

fn health_text(m: &MirrorView, now_ms: i64) -> String {
    match (m.health, m.ejected_until_ms) {
        ("ejected", Some(until)) => format!(
            "ejected until {} (in {} s)",
            http_time(until),
            ((until - now_ms).max(0) + 999) / 1000
        ),
        (health, _) => health.to_string(),
    }
}

fn fill_text(f: &FillProgress) -> String {
    match f.total {
        Some(total) => format!("{} of {} ({})", bytes(f.written), bytes(total), f.stage),
        None => format!("{} ({})", bytes(f.written), f.stage),
    }
}

fn store_text(used: Option<u64>, max: u64) -> String {
    let Some(used) = used else {
        return format!(
            "{} in all (the bytes stored are shown to readers of every remote)",
            bytes(max)
        );
    };
    let share = if max == 0 {
        0.0
    } else {
        used as f64 / max as f64
    };
    format!("{} of {} ({})", bytes(used), bytes(max), percent(share))
}

fn bytes(n: u64) -> String {
    bytesize::ByteSize(n).display().iec().to_string()
}

fn percent(ratio: f64) -> String {
    format!("{:.1}%", ratio * 100.0)
}

fn latency(ms: Option<f64>) -> String {
    ms.map_or_else(|| "–".to_string(), |ms| format!("{ms:.1} ms"))
}

fn http_time(unix_ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(unix_ms.max(0) as u64);
    httpdate::fmt_http_date(at)
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin-bottom:1em}\
th,td{padding:.25em .75em;border-bottom:1px solid #ddd;text-align:left}\
td.healthy{color:#176117}td.ejected{color:#a11}td.probation{color:#a60}\
progress{width:16em}.note{color:#666}\
.charts{display:flex;flex-wrap:wrap;gap:1em}.chart{margin:0}\
.chart figcaption{font-size:12px}.chart .summary{color:#666}\
.chart .axis{display:flex;justify-content:space-between;font-size:11px;color:#888;width:360px}";

/// Refreshes the numbers from `/-/status`. Everything is written with
/// `textContent` or element properties, never as markup.
const SCRIPT: &str = r#"
(function () {
  function bytes(n) {
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + ' ' + u[i];
  }
  function pct(r) { return (r * 100).toFixed(1) + '%'; }
  function cell(row, cls, text) { var c = row.querySelector('.' + cls); if (c) c.textContent = text; }
  function td(tr, text) { var c = document.createElement('td'); c.textContent = text; tr.appendChild(c); return c; }
  function refresh() {
    fetch('/-/status').then(function (r) { return r.json(); }).then(function (s) {
      var bar = document.getElementById('store-bar');
      bar.value = s.store_bytes ?? 0; bar.max = Math.max(s.store_max_bytes, 1);
      if (s.store_bytes !== null) document.getElementById('store-text').textContent = bytes(s.store_bytes) + ' of ' +
        bytes(s.store_max_bytes) + ' (' + pct(s.store_max_bytes ? s.store_bytes / s.store_max_bytes : 0) + ')';
      s.remotes.forEach(function (r) {
        document.querySelectorAll('tr[data-remote]').forEach(function (row) {
          if (row.dataset.remote !== r.name) return;
          cell(row, 'hits', r.hits); cell(row, 'misses', r.misses); cell(row, 'ratio', pct(r.hit_ratio));
          cell(row, 'from-cache', bytes(r.bytes_from_cache)); cell(row, 'from-upstream', bytes(r.bytes_from_upstream));
        });
        r.mirrors.forEach(function (m, i) {
          document.querySelectorAll('tr[data-mirror]').forEach(function (row) {
            if (row.dataset.mirror !== r.name + '#' + i) return;
            var h = row.querySelector('.health');
            h.className = 'health ' + m.health;
            h.textContent = m.health === 'ejected' && m.ejected_until_ms ?
              'ejected until ' + new Date(m.ejected_until_ms).toUTCString() : m.health;
            cell(row, 'first-byte', m.first_byte_ms == null ? '–' : m.first_byte_ms.toFixed(1) + ' ms');
            cell(row, 'in-flight', m.in_flight);
            cell(row, 'failures', m.consecutive_failures + ' / ' + m.failures);
            cell(row, 'limit', m.rate_limited_until_ms ? '429: not asked until ' + new Date(m.rate_limited_until_ms).toUTCString() :
              (m.ratelimit_remaining == null ? '–' : m.ratelimit_remaining + ' left'));
          });
        });
      });
      var body = document.getElementById('fills-body');
      body.textContent = '';
      s.fills.forEach(function (f) {
        var tr = document.createElement('tr'); tr.className = 'fill';
        td(tr, f.key).className = 'key'; td(tr, f.mirror || '');
        var p = document.createElement('progress');
        if (f.total != null) { p.max = Math.max(f.total, 1); p.value = f.written; }
        td(tr, '').appendChild(p);
        td(tr, f.total != null ? bytes(f.written) + ' of ' + bytes(f.total) + ' (' + f.stage + ')'
          : bytes(f.written) + ' (' + f.stage + ')').className = 'progress-text';
        body.appendChild(tr);
      });
      var list = document.getElementById('errors-list');
      list.textContent = '';
      s.recent_errors.slice().reverse().forEach(function (e) {
        var li = document.createElement('li');
        li.textContent = new Date(e.at_ms).toUTCString() + ' ' + e.source + ': ' + e.what;
        list.appendChild(li);
      });
    }).catch(function () {});
  }
  setInterval(refresh, 5000);
})();
"#;
