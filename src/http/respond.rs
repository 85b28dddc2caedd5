//! Building artifact responses: from a complete blob (hits and revalidated
//! copies, with conditional requests and single byte ranges) and from a fill
//! in progress (misses, streamed as the body arrives).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use crate::cache::{Blob, Digest, Entry};
use crate::fill::Head;
use crate::metrics::CacheStatus;

/// A constant name: inserting a `&str` name parses it on every response.
pub const X_CACHE_STATUS: HeaderName = HeaderName::from_static("x-cache-status");

/// Headers a hit's map has room for before it grows.
const RESPONSE_HEADERS: usize = 12;

fn status_header(cache: CacheStatus) -> HeaderValue {
    HeaderValue::from_static(cache.as_str())
}

/// The validators we send for an entry, built on its first response and
/// kept in its [`Prepared`](crate::cache::Prepared) slot, so a hit copies
/// two header values instead of formatting them.
struct Validators {
    /// `"<sha256>"`: a strong validator for our clients.
    etag: HeaderValue,
    /// The mirror's `Last-Modified`, else when the body was fetched.
    last_modified: HeaderValue,
    /// `last_modified` as a time, at whole seconds as HTTP dates are.
    modified: SystemTime,
    /// The entry's `Content-Type`, checked once.
    content_type: HeaderValue,
}

fn validators(entry: &Entry) -> &Validators {
    entry.prepared.get_or_init(|| {
        let fetched = UNIX_EPOCH + Duration::from_millis(entry.fetched_at_ms.max(0) as u64);
        let upstream = entry
            .upstream_last_modified
            .as_deref()
            .and_then(|s| Some((s, httpdate::parse_http_date(s).ok()?)));
        let modified = upstream.map_or(fetched, |(_, time)| time);
        // An IMF-fixdate (29 bytes; the other two forms HTTP allows are
        // longer or shorter) is sent as it came: the entry index's records
        // give one back with every hit they serve.
        let date = match upstream {
            Some((text, _)) if text.len() == 29 => text.to_string(),
            _ => httpdate::fmt_http_date(modified),
        };
        // The three values are slices of one buffer: one allocation (and
        // one shared count) an entry, not three, in the entry cache's memory.
        let typed = entry
            .content_type
            .as_deref()
            .filter(|t| HeaderValue::from_str(t).is_ok());
        let mut text = format!("\"{}\"{date}", entry.digest.to_hex());
        let (etag_end, date_end) = (text.len() - date.len(), text.len());
        text.push_str(typed.unwrap_or_default());
        let text = Bytes::from(text);
        let value = |range: std::ops::Range<usize>| {
            HeaderValue::from_maybe_shared(text.slice(range)).expect("checked header text")
        };
        Validators {
            // At whole seconds, as the date is.
            modified: UNIX_EPOCH
                + Duration::from_secs(
                    modified
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |since| since.as_secs()),
                ),
            etag: value(0..etag_end),
            last_modified: value(etag_end..date_end),
            content_type: match typed {
                Some(_) => value(date_end..text.len()),
                None => content_type(None),
            },
        }
    })
}

/// Serves a complete blob (committed, or a finished fill's file): conditional
/// requests, single byte ranges, HEAD.
pub fn from_entry(
    entry: &Entry,
    blob: &Blob,
    cache: CacheStatus,
    method: &Method,
    request: &HeaderMap,
) -> Response {
    let mut response = Response::new(Body::empty());
    // Room for a hit's headers and those kept or added after: an empty
    // map takes six, then grows and rehashes them.
    *response.headers_mut() = HeaderMap::with_capacity(RESPONSE_HEADERS);
    let headers = response.headers_mut();
    let validators = validators(entry);
    headers.insert(X_CACHE_STATUS, status_header(cache));
    headers.insert(header::ETAG, validators.etag.clone());
    headers.insert(header::LAST_MODIFIED, validators.last_modified.clone());
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));

    if not_modified(request, validators) {
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        return response;
    }
    headers.insert(header::CONTENT_TYPE, validators.content_type.clone());

    let Some((start, len)) = ranged(
        &mut response,
        request,
        entry.size,
        &validators.etag,
        &validators.last_modified,
    ) else {
        return response;
    };
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if method != Method::HEAD {
        *response.body_mut() = match blob {
            // One frame of known length: hyper writes head and body together
            // and knows the body has ended without polling it again.
            Blob::Memory(bytes) => Body::from(bytes.slice(start as usize..(start + len) as usize)),
            _ => Body::from_stream(blob.stream(start, len)),
        };
    }
    response
}

/// Serves a body that is still arriving (a fill in progress, or an uncached
/// stream-through): headers now, bytes as they come, answered as `cache`
/// (a hit for a request that joined a fill whose bytes had all arrived).
/// Range and conditional headers are ignored on a miss (allowed: a 200 is
/// always a valid answer).
pub fn from_fill(
    head: &Head,
    body: impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    method: &Method,
    cache: CacheStatus,
) -> Response {
    from_fill_body(head, Body::from_stream(body), method, cache)
}

/// [`from_fill`] for a body whose every byte the fill already holds in
/// memory (a small one published before it is hashed): one chunk of known
/// length, which hyper writes with the head, instead of a reader that polls
/// the fill for each of the upstream's chunks and then for its end. Its
/// `Content-Length` is the body's, also when the upstream sent it chunked.
pub fn from_fill_whole(head: &Head, body: Bytes, method: &Method, cache: CacheStatus) -> Response {
    let len = body.len();
    let mut response = from_fill_body(head, Body::from(body), method, cache);
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    response
}

fn from_fill_body(head: &Head, body: Body, method: &Method, cache: CacheStatus) -> Response {
    let mut response = Response::new(Body::empty());
    let headers = response.headers_mut();
    headers.insert(X_CACHE_STATUS, status_header(cache));
    headers.insert(
        header::CONTENT_TYPE,
        content_type(head.content_type.as_deref()),
    );
    if let Some(len) = head.content_length {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    if method != Method::HEAD {
        *response.body_mut() = body;
    }
    response
}

/// The one byte range (offset, length) a request asks of a body still
/// arriving whose announced length is known; `None` (serve it whole) with no
/// range, several, an `If-Range` (nothing to compare it with yet), an
/// unknown length, or a range outside the body.
pub fn range_of_fill(request: &HeaderMap, announced: Option<u64>) -> Option<(u64, u64)> {
    let size = announced?;
    let range = request.get(header::RANGE)?.to_str().ok()?;
    if request.contains_key(header::IF_RANGE) {
        return None;
    }
    let ranges = http_range_header::parse_range_header(range)
        .ok()?
        .validate(size)
        .ok()?;
    match ranges.as_slice() {
        [one] => Some((*one.start(), one.end() - one.start() + 1)),
        _ => None,
    }
}

/// [`from_fill`] for one byte range of a body of `size` bytes still
/// arriving: a 206 whose bytes come as the fill writes them (a resumed
/// download does not wait for the whole file).
pub fn from_fill_range(
    head: &Head,
    body: impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    (start, len): (u64, u64),
    size: u64,
    method: &Method,
) -> Response {
    let mut response = from_fill(head, body, method, CacheStatus::Miss);
    *response.status_mut() = StatusCode::PARTIAL_CONTENT;
    let value = format!("bytes {start}-{}/{size}", start + len - 1);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_RANGE,
        HeaderValue::from_str(&value).expect("digits are valid"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    response
}

/// Adds the mirror's headers an ecosystem keeps with an entry (`kept`, as
/// `kind::keep_headers` wrote them), absolute URLs on the remote's hosts in
/// them re-pointed at the proxy by `rewrite`. A kept header replaces the
/// proxy's own of that name (the hub's `ETag`).
pub fn add_kept(response: &mut Response, kept: &str, rewrite: &crate::kind::rewrite::Rewrite) {
    let headers = response.headers_mut();
    let mut added: Vec<header::HeaderName> = Vec::new();
    for (name, value) in crate::kind::kept_headers(kept) {
        let Ok(name) = header::HeaderName::from_bytes(name.as_bytes()) else {
            continue;
        };
        // A go-getter address with a forced getter (`git::https://…`) is
        // fetched by the client's own getter, not through the proxy.
        let forced_getter = value
            .split_once("::")
            .is_some_and(|(getter, _)| getter.bytes().all(|b| b.is_ascii_alphanumeric()));
        let value = if value.contains("://") && !forced_getter {
            HeaderValue::from_str(&rewrite.apply(value))
        } else {
            HeaderValue::from_str(value)
        };
        let Ok(value) = value else { continue };
        if added.contains(&name) {
            headers.append(name, value);
        } else {
            headers.insert(name.clone(), value);
            added.push(name);
        }
    }
}

/// A rewritten index document. Its validator is the blob's digest qualified by
/// the base it was rewritten for, so a client never gets a 304 for a copy
/// rewritten for another base. No ranges.
pub fn document(
    entry: &Entry,
    body: Bytes,
    base: &str,
    cache: CacheStatus,
    method: &Method,
    request: &HeaderMap,
) -> Response {
    let base_tag = &Digest::of(base.as_bytes()).to_hex()[..12];
    let etag = HeaderValue::from_str(&format!("\"{}-{base_tag}\"", entry.digest.to_hex()))
        .expect("hex is a valid header");
    let mut response = Response::new(Body::empty());
    let headers = response.headers_mut();
    headers.insert(X_CACHE_STATUS, status_header(cache));
    headers.insert(header::ETAG, etag.clone());
    headers.insert(
        header::LAST_MODIFIED,
        validators(entry).last_modified.clone(),
    );
    if matches_etag(request, &etag) {
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        return response;
    }
    headers.insert(
        header::CONTENT_TYPE,
        content_type(entry.content_type.as_deref()),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len() as u64));
    if method != Method::HEAD {
        *response.body_mut() = Body::from(body);
    }
    response
}

/// A body read whole and validated by its MD5 (`kind::Etag::WholeMd5`:
/// Bundler's compact index): ETag `"<md5>"` of the body served, 304 on a
/// matching `If-None-Match`, one byte range cut from this body with the same
/// ETag (so a client appending to its copy can check the whole result).
pub fn whole_md5(
    entry: &Entry,
    body: Bytes,
    cache: CacheStatus,
    method: &Method,
    request: &HeaderMap,
) -> Response {
    use md5::Digest as _;
    let md5 = hex::encode(md5::Md5::digest(&body));
    let etag = HeaderValue::from_str(&format!("\"{md5}\"")).expect("hex is a valid header");
    let last_modified = validators(entry).last_modified.clone();
    let mut response = Response::new(Body::empty());
    let headers = response.headers_mut();
    headers.insert(X_CACHE_STATUS, status_header(cache));
    headers.insert(header::ETAG, etag.clone());
    headers.insert(header::LAST_MODIFIED, last_modified.clone());
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if matches_etag(request, &etag) {
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        return response;
    }
    headers.insert(
        header::CONTENT_TYPE,
        content_type(entry.content_type.as_deref()),
    );
    let size = body.len() as u64;
    let Some((start, len)) = ranged(&mut response, request, size, &etag, &last_modified) else {
        return response;
    };
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if method != Method::HEAD {
        *response.body_mut() = Body::from(body.slice(start as usize..(start + len) as usize));
    }
    response
}

/// A remembered "not found" (404/410) from every mirror.
pub fn absent(status: u16, cache: CacheStatus) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::NOT_FOUND);
    let mut response = (status, "not found on any mirror\n").into_response();
    response
        .headers_mut()
        .insert(X_CACHE_STATUS, status_header(cache));
    response
}

/// An empty 200 the proxy answers itself (the GOPROXY protocol's
/// `sumdb/{db}/supported`).
pub fn empty_ok(cache: CacheStatus) -> Response {
    let mut response = StatusCode::OK.into_response();
    response
        .headers_mut()
        .insert(X_CACHE_STATUS, status_header(cache));
    response
}

/// Marks a response of a content-negotiated path, so that a cache between
/// the client and us keeps the variants apart as we do.
pub fn vary_on_accept(response: &mut Response) {
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
}

fn content_type(value: Option<&str>) -> HeaderValue {
    value
        .and_then(|v| HeaderValue::from_str(v).ok())
        .unwrap_or_else(|| HeaderValue::from_static("application/octet-stream"))
}

/// RFC 9110 §13.2.2: `If-None-Match` decides when present; otherwise
/// `If-Modified-Since`.
fn not_modified(request: &HeaderMap, ours: &Validators) -> bool {
    if request.contains_key(header::IF_NONE_MATCH) {
        return matches_etag(request, &ours.etag);
    }
    if let Some(ims) = request.get(header::IF_MODIFIED_SINCE) {
        if let Some(since) = ims
            .to_str()
            .ok()
            .and_then(|s| httpdate::parse_http_date(s).ok())
        {
            return ours.modified <= since;
        }
    }
    false
}

/// Whether `If-None-Match` lists `etag` (weak comparison) or `*`.
fn matches_etag(request: &HeaderMap, etag: &HeaderValue) -> bool {
    let Some(inm) = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let ours = etag.to_str().unwrap_or_default();
    inm.split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || tag.trim_start_matches("W/") == ours)
}

/// The part of a body of `size` bytes to send (offset, length), with the
/// status and `Content-Range` set on `response`; `None` for a 416, which is
/// then complete.
fn ranged(
    response: &mut Response,
    request: &HeaderMap,
    size: u64,
    etag: &HeaderValue,
    last_modified: &HeaderValue,
) -> Option<(u64, u64)> {
    match requested_range(request, size, etag, last_modified) {
        RangeAnswer::Full => Some((0, size)),
        RangeAnswer::Partial(start, end) => {
            *response.status_mut() = StatusCode::PARTIAL_CONTENT;
            let value = format!("bytes {start}-{end}/{size}");
            response.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&value).expect("digits are valid"),
            );
            Some((start, end - start + 1))
        }
        RangeAnswer::Unsatisfiable => {
            *response.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
            let value = format!("bytes */{size}");
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&value).expect("digits are valid"),
            );
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
            None
        }
    }
}

enum RangeAnswer {
    Full,
    /// Inclusive byte offsets.
    Partial(u64, u64),
    Unsatisfiable,
}

/// One byte range is served as a 206; several ranges, a range that `If-Range`
/// rules out, or an unparsable header get the whole body (RFC 9110 allows
/// ignoring Range). A well-formed range outside the body is a 416.
fn requested_range(
    request: &HeaderMap,
    size: u64,
    etag: &HeaderValue,
    last_modified: &HeaderValue,
) -> RangeAnswer {
    let Some(range) = request.get(header::RANGE).and_then(|v| v.to_str().ok()) else {
        return RangeAnswer::Full;
    };
    if let Some(if_range) = request.get(header::IF_RANGE) {
        if if_range != etag && if_range != last_modified {
            return RangeAnswer::Full;
        }
    }
    let Ok(parsed) = http_range_header::parse_range_header(range) else {
        return RangeAnswer::Full;
    };
    match parsed.validate(size) {
        Ok(ranges) if ranges.len() == 1 => {
            RangeAnswer::Partial(*ranges[0].start(), *ranges[0].end())
        }
        Ok(_) => RangeAnswer::Full,
        Err(_) => RangeAnswer::Unsatisfiable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entrys_header_values_fit_the_room_the_entry_cache_counts() {
        let mut entry = Entry::new(
            Digest([0xab; 32]),
            1024,
            Some("application/vnd.debian.binary-package".into()),
            None,
            Some("Tue, 01 Dec 2026 10:00:00 GMT".into()),
            0,
        );
        let made = validators(&entry);
        assert_eq!(
            made.etag.as_bytes(),
            format!("\"{}\"", "ab".repeat(32)).as_bytes()
        );
        assert_eq!(made.last_modified, "Tue, 01 Dec 2026 10:00:00 GMT");
        assert_eq!(made.content_type, "application/vnd.debian.binary-package");
        // The `Arc` and its value, the one buffer and its shared count, and
        // the allocator's header of each.
        let text = made.etag.len() + made.last_modified.len() + made.content_type.len();
        let held = 16 + std::mem::size_of::<Validators>() + text + 32 + 3 * 16;
        assert!(
            held <= crate::meta::PREPARED_BYTES,
            "{held} bytes held, {} counted",
            crate::meta::PREPARED_BYTES
        );
        // A content type that is no header value: the default.
        entry.content_type = Some("bad\ntype".into());
        entry.prepared = Default::default();
        assert_eq!(validators(&entry).content_type, "application/octet-stream");
    }
}
