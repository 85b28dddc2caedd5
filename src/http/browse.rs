//! The browse pages: `/-/browse/` lists the remotes the caller may read,
//! `/-/browse/{remote}/{prefix}` (or `?prefix=`) a remote's cached entries
//! under a path prefix — size, age, last access, hits, digest — a page of
//! [`PAGE`] at a time (`?after=` the last path shown), with a link to purge
//! each one when `server.admin_token` is set.
//!
//! A remote's page goes through [`super::access::admit`], the check every
//! request of that remote passes: a caller who may not read the remote gets
//! the same 401/403 as for its artifacts and sees none of its paths. Paths
//! are shown percent-decoded, as text: maud escapes every interpolated
//! string, so a hostile path (`<script>` in a file name) is never markup.
//! The purge buttons use the admin API (`DELETE /-/cache/…`) with the token
//! typed into the page; the script reads paths from `data-` attributes only.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::access::{self, Peer};
use crate::clock::now_ms;
use crate::error::ProxyError;
use crate::meta::browse::{BrowsePage, Browsed};
use crate::proxy::Proxy;

/// Entries per page.
pub const PAGE: usize = 100;

pub async fn browse(
    State(proxy): State<Arc<Proxy>>,
    peer: Option<Extension<Peer>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let peer = peer.map(|Extension(p)| p);
    let rest = uri
        .path()
        .strip_prefix("/-/browse")
        .unwrap_or_default()
        .trim_start_matches('/');
    let query: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    if rest.is_empty() {
        return match access::caller(&proxy, &headers, peer.as_ref()).await {
            Ok(caller) => {
                let mut names: Vec<String> = proxy
                    .remotes()
                    .values()
                    .filter(|r| r.config.access.admits(caller.user()))
                    .map(|r| r.name.clone())
                    .collect();
                names.sort();
                index(&names).into_response()
            }
            Err(e) => e.into_response(),
        };
    }
    let (name, path_prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let Some(remote) = proxy.remote(name) else {
        return ProxyError::UnknownRemote(name.to_string()).into_response();
    };
    if let Err(refused) = access::admit(&proxy, &remote, &headers, peer.as_ref()).await {
        return refused.into_response();
    }
    let prefix = query
        .get("prefix")
        .map_or(path_prefix, String::as_str)
        .to_string();
    let after = query.get("after").map_or("", String::as_str);
    match proxy.cache.meta.browse(name, &prefix, after, PAGE).await {
        Ok(page) => {
            let purge = proxy.server().admin_token.is_some();
            remote_page(name, &prefix, after, &page, purge, now_ms()).into_response()
        }
        Err(e) => e.into_response(),
    }
}

fn shell(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body { (body) }
        }
    }
}

fn index(names: &[String]) -> Markup {
    shell(
        "mirrorcache: browse",
        html! {
            p.nav { a href="/-/" { "dashboard" } }
            h1 { "Browse" }
            ul #remotes {
                @for name in names {
                    li { a href=(format!("/-/browse/{name}/")) { (name) } }
                }
            }
        },
    )
}

fn remote_page(
    remote: &str,
    prefix: &str,
    after: &str,
    page: &BrowsePage,
    purge: bool,
    now_ms: i64,
) -> Markup {
    let next = page.rows.last().filter(|_| page.more).map(|last| {
        let query = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("prefix", prefix)
            .append_pair("after", &last.path)
            .finish();
        format!("/-/browse/{remote}/?{query}")
    });
    shell(
        &format!("mirrorcache: {remote}"),
        html! {
            p.nav { a href="/-/" { "dashboard" } " · " a href="/-/browse/" { "all remotes" } }
            h1 { "Browse " span #remote { (remote) } }
            form #search method="get" action=(format!("/-/browse/{remote}/")) {
                label { "path prefix " input type="search" name="prefix" value=(prefix) placeholder="left-pad/"; }
                " " button type="submit" { "search" }
            }
            p #totals {
                (page.total_entries) " entries, " (bytes(page.total_bytes))
                @if !prefix.is_empty() { " under " code { (decoded(prefix)) } }
                @if !after.is_empty() { ", from after " code { (decoded(after)) } }
            }
            @if purge {
                p #purge-token {
                    label { "admin token " input #admin-token type="password" autocomplete="off"; }
                    noscript { " (purging needs JavaScript; without it: "
                        code { "curl -X DELETE -H 'Authorization: Bearer …' <server>/-/cache/<remote>/<path>" } ")" }
                }
            }
            table #entries {
                thead { tr { th { "path" } th { "size" } th { "age" } th { "last access" } th { "hits" } th { "sha256" }
                    @if purge { th {} } } }
                tbody { @for row in &page.rows { (entry_row(remote, row, purge, now_ms)) } }
            }
            @if let Some(next) = next { p { a #next rel="next" href=(next) { "next page" } } }
            @if purge { script { (PreEscaped(PURGE_SCRIPT)) } }
        },
    )
}

fn entry_row(remote: &str, row: &Browsed, purge: bool, now_ms: i64) -> Markup {
    let artifact = row.path.split('?').next().unwrap_or_default();
    let variant = row.path.split_once('?').map(|(_, v)| v);
    html! {
        tr.entry data-path=(row.path) {
            td.path {
                a href=(format!("/{remote}/{artifact}")) { (decoded(artifact)) }
                @if let Some(variant) = variant { " " span.variant { "(" (variant) ")" } }
            }
            td.size { (bytes(row.size)) }
            td.age { (since(now_ms, row.fetched_at_ms)) }
            td.last-access { (since(now_ms, row.last_access_ms)) " ago" }
            td.hits { (row.hits) }
            td.digest title=(row.digest) { code { (row.digest.get(..12).unwrap_or(&row.digest)) "…" } }
            @if purge {
                td { button.purge type="button" data-key=(format!("{remote}/{artifact}")) { "purge" } }
            }
        }
    }
}

/// A stored path as a person reads it: percent-decoded (lossily).
fn decoded(path: &str) -> String {
    percent_encoding::percent_decode_str(path)
        .decode_utf8_lossy()
        .into_owned()
}

fn bytes(n: u64) -> String {
    bytesize::ByteSize(n).display().iec().to_string()
}

/// "3h": the largest unit of the time from `then` to `now`.
fn since(now_ms: i64, then_ms: i64) -> String {
    let secs = (now_ms - then_ms).max(0) / 1000;
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin:1em 0}\
th,td{padding:.25em .75em;border-bottom:1px solid #ddd;text-align:left}\
td.size,td.hits{text-align:right}.nav{color:#666}code{font-size:12px}\
.variant{color:#666}input[type=search]{width:24em}";

/// The purge buttons: `DELETE /-/cache/{key}` with the typed token. The key
/// comes from a `data-` attribute (text, never markup) and is already a
/// request path as the cache keeps it; the answer is written as text.
const PURGE_SCRIPT: &str = r#"
(function () {
  document.querySelectorAll('button.purge').forEach(function (button) {
    button.addEventListener('click', function () {
      var token = document.getElementById('admin-token').value;
      fetch('/-/cache/' + button.dataset.key, {
        method: 'DELETE', headers: { 'Authorization': 'Bearer ' + token }
      }).then(function (r) {
        button.textContent = r.ok ? 'purged' : 'refused (' + r.status + ')';
        if (r.ok) button.disabled = true;
      }).catch(function () { button.textContent = 'failed'; });
    });
  });
})();
"#;
