//! rpm: a yum/dnf repository (Fedora, RHEL, openSUSE…). `repodata/repomd.xml`
//! (and its `.asc`) is a mutable document; data files named by their own
//! digest (`repodata/<hex>-primary.xml.gz`) and `.rpm` packages are
//! immutable. `repomd.xml` declares each data file's checksum and size,
//! `primary.xml` (plain, `.gz`, `.xz` or `.zst`, read as a stream with a
//! bound on what it unpacks to) each package's; locations are relative to the
//! repository root (the directory above `repodata/`) or to an `xml:base`.
//! On a remote with `files` mirrors, `xml:base` locations on its hosts are
//! re-pointed at the proxy (`relocate`); otherwise both are served as stored.

use std::io::BufRead;

use axum::http::HeaderMap;
use quick_xml::events::{BytesStart, Event};

use super::declared::{Algo, Declared, Document};
use super::rewrite::Rewrite;
use super::unpack::{stopped, Stopped, Unpacked};
use super::{Digests, Ecosystem, Plan, Rewritten};

mod relocate;

pub struct Rpm;

impl Ecosystem for Rpm {
    fn name(&self) -> &'static str {
        "rpm"
    }

    /// Packages (and delta packages), and data files named by their
    /// digest, immutable; `repomd.xml` and its `primary.xml` (not the
    /// zchunk one) relocated when their packages sit on a `files` host.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        let immutable = path.ends_with(".rpm")
            || path.ends_with(".drpm")
            || data_file(path).is_some_and(|(hex, _)| hex.is_some());
        let relocated = is_repomd(path) || is_primary(path);
        Plan {
            immutable,
            document: if relocated {
                Rewritten::WithFiles
            } else {
                Rewritten::Never
            },
            ..Plan::default()
        }
    }

    /// `repomd.xml` states its primaries' digests: it needs them.
    fn rewritten_with(&self, path: &str, body: &[u8]) -> Vec<String> {
        match is_repomd(path) {
            true => relocate::primaries(path, body),
            false => Vec::new(),
        }
    }

    fn rewrite_body(
        &self,
        path: &str,
        body: Vec<u8>,
        rewrite: &Rewrite,
        others: &[(String, Vec<u8>)],
    ) -> Vec<u8> {
        if is_repomd(path) {
            return relocate::restate(path, body, others, rewrite, MAX_PRIMARY);
        }
        match relocate::relocate(&body, rewrite, Algo::Sha256, MAX_PRIMARY) {
            Ok(Some(relocated)) => relocated.bytes,
            Ok(None) => body,
            Err(error) => {
                tracing::warn!(path, %error, "primary.xml not relocated; served as stored");
                body
            }
        }
    }

    fn digests(&self) -> Option<&dyn Digests> {
        Some(self)
    }

    #[cfg(test)]
    fn conformance(&self) -> super::conformance::Rows {
        tests::rows()
    }
}

/// For a file in a `repodata/` directory other than `repomd.xml*`: the hex
/// digest its name starts with (`<hex>-`), if it does, and the rest of its
/// name (`primary.xml.gz`).
fn data_file(path: &str) -> Option<(Option<&str>, &str)> {
    let (dir, name) = path.rsplit_once('/')?;
    if !(dir == "repodata" || dir.ends_with("/repodata")) || name.starts_with("repomd.xml") {
        return None;
    }
    match name.split_once('-') {
        Some((hex, rest)) if hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Some((Some(hex), rest))
        }
        _ => Some((None, name)),
    }
}

/// The most a `primary.xml` being relocated may unpack to (learning it
/// takes the remote's `max_learned_size`; relocation runs within
/// `max_document_size` already).
const MAX_PRIMARY: u64 = super::unpack::DEFAULT_MAX_UNPACKED;

/// `body` decompressed by its magic as a stream of at most `max` bytes, for
/// relocation (the one decoder learning uses too: `kind::unpack`).
fn decompress(body: &[u8], max: u64) -> std::io::Result<Box<dyn BufRead + '_>> {
    Unpacked::new(body, max)
        .map(Unpacked::into_reader)
        .map_err(std::io::Error::other)
}

fn is_repomd(path: &str) -> bool {
    path == "repodata/repomd.xml" || path.ends_with("/repodata/repomd.xml")
}

/// A `primary.xml` data file, plain or compressed as it can be learned
/// (zchunk's is not).
fn is_primary(path: &str) -> bool {
    data_file(path).is_some_and(|(_, name)| {
        matches!(
            name,
            "primary.xml" | "primary.xml.gz" | "primary.xml.xz" | "primary.xml.zst"
        )
    })
}

impl Digests for Rpm {
    /// `<sha256>-…` (or `<sha512>-…`) data files: createrepo_c names them
    /// by the digest of their own bytes.
    fn in_path(&self, path: &str) -> Option<Declared> {
        let hex = data_file(path)?.0?;
        match hex.len() {
            64 => Declared::from_hex(Algo::Sha256, hex),
            128 => Declared::from_hex(Algo::Sha512, hex),
            _ => None,
        }
    }

    /// Packages and data files (whose name does not declare a digest
    /// already), and `~files/` paths (`xml:base` on a files host).
    fn artifact_key(&self, path: &str) -> Option<String> {
        let listed = path.ends_with(".rpm")
            || path.starts_with(super::FILES_PREFIX)
            || data_file(path).is_some();
        (listed && self.in_path(path).is_none()).then(|| super::declared::canonical(path))
    }

    /// `repomd.xml`, and the `primary.xml` data file in any compression
    /// but zchunk's.
    fn declares(&self, path: &str) -> bool {
        is_repomd(path) || is_primary(path)
    }

    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        learn(document, body, document.max_unpacked)
    }
}

fn learn(document: &Document<'_>, body: &[u8], max: u64) -> Vec<(String, Declared)> {
    let (record, what) = if is_repomd(document.path) {
        (&b"data"[..], "repomd.xml")
    } else {
        (&b"package"[..], "primary.xml")
    };
    // Read as a stream, bounded (`kind::unpack`): past `max` learning
    // stops, and what was read before is kept.
    let mut found = Vec::new();
    let read = Unpacked::new(body, max)
        .and_then(|unpacked| records(unpacked.into_reader(), record, &mut found));
    if let Err(stop) = read {
        tracing::warn!(
            document = document.path,
            %stop,
            learned = found.len(),
            "stopped learning the digests this {what} declares; it is served as sent"
        );
    }
    found
        .into_iter()
        .filter_map(|r| Some((locate(document, &r)?, r.declared)))
        .collect()
}

/// One `<data>` (repomd) or `<package>` (primary): its checksum (with the
/// length `<size>` states: repomd's `<size>` text, primary's `<size
/// package=…>`) and where it is.
struct Record {
    declared: Declared,
    href: String,
    base: Option<String>,
}

/// Every `record` element's `<checksum type=…>` and `<location href
/// xml:base>`, read as a stream.
fn records(input: impl BufRead, record: &[u8], out: &mut Vec<Record>) -> Result<(), Stopped> {
    let mut reader = quick_xml::Reader::from_reader(input);
    let mut buf = Vec::new();
    let mut inside = false;
    // The checksum's function while its text is read, and the text.
    let mut algo: Option<Option<Algo>> = None;
    let (mut text, mut checksum) = (String::new(), None);
    let mut location: Option<(String, Option<String>)> = None;
    // The length stated, and whether a `<size>`'s text is being read.
    let (mut size, mut size_text): (Option<u64>, Option<String>) = (None, None);
    loop {
        let event = reader.read_event_into(&mut buf).map_err(|e| match e {
            quick_xml::Error::Io(io) => stopped(&io),
            other => Stopped::Broken(other.to_string()),
        })?;
        match event {
            Event::Start(e) if e.name().as_ref() == record => {
                (inside, checksum, location, size) = (true, None, None, None);
            }
            Event::Empty(e) if inside && e.name().as_ref() == b"size" => {
                size = attribute(&e, b"package").and_then(|n| n.parse().ok());
            }
            Event::Start(e) if inside && e.name().as_ref() == b"size" => {
                match attribute(&e, b"package") {
                    Some(n) => size = n.parse().ok(),
                    None => size_text = Some(String::new()),
                }
            }
            Event::Text(t) if size_text.is_some() => {
                if let Some(size_text) = &mut size_text {
                    size_text.push_str(std::str::from_utf8(&t).unwrap_or(""));
                }
            }
            Event::End(e) if e.name().as_ref() == b"size" => {
                if let Some(text) = size_text.take() {
                    size = text.trim().parse().ok();
                }
            }
            Event::Start(e) if inside && e.name().as_ref() == b"checksum" => {
                algo = Some(attribute(&e, b"type").as_deref().and_then(algo_named));
                text.clear();
            }
            Event::Text(t) if algo.is_some() => {
                text.push_str(std::str::from_utf8(&t).unwrap_or(""));
            }
            Event::End(e) if e.name().as_ref() == b"checksum" => {
                if let Some(Some(algo)) = algo.take() {
                    checksum = Declared::from_hex(algo, &text);
                }
            }
            Event::Start(e) | Event::Empty(e) if inside && e.name().as_ref() == b"location" => {
                if let Some(href) = attribute(&e, b"href") {
                    location = Some((href, attribute(&e, b"xml:base")));
                }
            }
            Event::End(e) if e.name().as_ref() == record => {
                inside = false;
                if let (Some(declared), Some((href, base))) = (checksum.take(), location.take()) {
                    out.push(Record {
                        declared: declared.with_size(size.take()),
                        href,
                        base,
                    });
                }
            }
            Event::Eof => return Ok(()),
            _ => {}
        }
        buf.clear();
    }
}

fn attribute(element: &BytesStart<'_>, name: &[u8]) -> Option<String> {
    element
        .attributes()
        .flatten()
        .find(|a| a.key.as_ref() == name)
        .and_then(|a| a.unescape_value().ok().map(|v| v.into_owned()))
}

/// `sha` is createrepo's old name for sha1.
fn algo_named(name: &str) -> Option<Algo> {
    match name {
        "sha" => Some(Algo::Sha1),
        other => Algo::parse(other),
    }
}

/// The path below the remote a record's location is served at: `href`
/// relative to the repository root (both documents are in `repodata/`), or
/// to an absolute `xml:base`; `None` on a host that is not the remote's.
fn locate(document: &Document<'_>, record: &Record) -> Option<String> {
    match &record.base {
        Some(base) if url::Url::parse(base).is_ok() => {
            let mut base = base.clone();
            if !base.ends_with('/') {
                base.push('/');
            }
            let url = url::Url::parse(&base).ok()?.join(&record.href).ok()?;
            document.path_of(url.as_str())
        }
        Some(base) => document.path_of(&format!(
            "../{}/{}",
            base.trim_end_matches('/'),
            record.href
        )),
        None if url::Url::parse(&record.href).is_ok() => document.path_of(&record.href),
        None => document.path_of(&format!("../{}", record.href)),
    }
}

#[cfg(test)]
mod tests;
