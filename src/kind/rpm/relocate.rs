//! Relocation: on a remote with `files` mirrors, a `primary.xml` whose
//! packages sit on one of the remote's hosts (`<location
//! xml:base="http://files.host/…">`, which dnf fetches from that host
//! directly) is served with those locations re-pointed at the proxy, in the
//! compression it came in; and `repomd.xml`, which lists that file's
//! checksum and size (dnf checks the file it downloads against them),
//! restates them for the bytes served. The relocated file keeps its path
//! (librepo checks a data file by repomd's checksum, not by its name), and
//! the `primary_zck` beside it, which would carry the old locations, is left
//! out of `repomd.xml` (dnf then reads the relocated `primary.xml`). Both are
//! pure functions of the stored bytes and the rewrite, so the checksum
//! `repomd.xml` states is the digest of what the same request base is
//! served.

use std::collections::HashMap;
use std::io::{self, Write};

use flate2::write::GzEncoder;
use quick_xml::events::{BytesStart, BytesText, Event};

use super::super::declared::{Algo, Declared, Hashers};
use super::super::rewrite::Rewrite;
use super::{algo_named, attribute, decompress};

/// A relocated `primary.xml`: the bytes served, and the digest (in the
/// function asked for) and length of their uncompressed XML, `repomd.xml`'s
/// `open-checksum` and `open-size`.
pub(super) struct Relocated {
    pub bytes: Vec<u8>,
    pub open: Declared,
}

/// The compression a body came in, which the relocated one is given too.
enum Packing {
    Gzip(GzEncoder<Vec<u8>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
    Xz(liblzma::write::XzEncoder<Vec<u8>>),
    Plain(Vec<u8>),
}

impl Packing {
    fn like(body: &[u8]) -> io::Result<Packing> {
        Ok(if body.starts_with(&[0x1f, 0x8b]) {
            Packing::Gzip(GzEncoder::new(Vec::new(), flate2::Compression::default()))
        } else if body.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Packing::Zstd(zstd::stream::write::Encoder::new(Vec::new(), 3)?)
        } else if body.starts_with(b"\xfd7zXZ\0") {
            Packing::Xz(liblzma::write::XzEncoder::new(Vec::new(), 6))
        } else {
            Packing::Plain(Vec::new())
        })
    }

    fn finish(self) -> io::Result<Vec<u8>> {
        match self {
            Packing::Gzip(gz) => gz.finish(),
            Packing::Zstd(zst) => zst.finish(),
            Packing::Xz(xz) => xz.finish(),
            Packing::Plain(xml) => Ok(xml),
        }
    }
}

/// The XML as it is written: hashed and counted, then packed.
struct Sink {
    packing: Packing,
    open: Hashers,
}

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.open.update(bytes);
        match &mut self.packing {
            Packing::Gzip(gz) => gz.write_all(bytes)?,
            Packing::Zstd(zst) => zst.write_all(bytes)?,
            Packing::Xz(xz) => xz.write_all(bytes)?,
            Packing::Plain(xml) => xml.extend_from_slice(bytes),
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `body`, a `primary.xml` as stored, with every location on one of the
/// remote's hosts (an `xml:base`, or an absolute `href`) re-pointed at the
/// proxy; `None` when it has none (it is served as stored). Read as a stream
/// of at most `max` unpacked bytes; `open` is the function of the `open`
/// digest.
pub(super) fn relocate(
    body: &[u8],
    rewrite: &Rewrite,
    open: Algo,
    max: u64,
) -> io::Result<Option<Relocated>> {
    let mut reader = quick_xml::Reader::from_reader(decompress(body, max)?);
    let mut writer = quick_xml::Writer::new(Sink {
        packing: Packing::like(body)?,
        open: Hashers::with(Some(open)),
    });
    let (mut buf, mut moved) = (Vec::new(), false);
    loop {
        let event = reader
            .read_event_into(&mut buf)
            .map_err(|e| io::Error::other(e.to_string()))?;
        match event {
            Event::Eof => break,
            Event::Empty(e) if e.name().as_ref() == b"location" => match relocated(&e, rewrite) {
                Some(e) => {
                    moved = true;
                    writer.write_event(Event::Empty(e))?;
                }
                None => writer.write_event(Event::Empty(e))?,
            },
            Event::Start(e) if e.name().as_ref() == b"location" => match relocated(&e, rewrite) {
                Some(e) => {
                    moved = true;
                    writer.write_event(Event::Start(e))?;
                }
                None => writer.write_event(Event::Start(e))?,
            },
            event => writer.write_event(event)?,
        }
        buf.clear();
    }
    if !moved {
        return Ok(None);
    }
    let Sink { packing, open } = writer.into_inner();
    Ok(Some(Relocated {
        bytes: packing.finish()?,
        open: open.finish().1,
    }))
}

/// A `<location>` with its `xml:base` (or absolute `href`) re-pointed, or
/// `None` when neither is on one of the remote's hosts.
fn relocated(element: &BytesStart<'_>, rewrite: &Rewrite) -> Option<BytesStart<'static>> {
    let mut moved = false;
    let name = String::from_utf8_lossy(element.name().as_ref()).into_owned();
    let mut out = BytesStart::new(name);
    for attribute in element.attributes().flatten() {
        let key = attribute.key.as_ref();
        let value = attribute.unescape_value().ok()?;
        if key == b"xml:base" || (key == b"href" && url::Url::parse(&value).is_ok()) {
            let to = rewrite.apply(&value);
            if to != value {
                moved = true;
                let key = String::from_utf8_lossy(key).into_owned();
                out.push_attribute((key.as_str(), to.as_str()));
                continue;
            }
        }
        out.push_attribute(attribute);
    }
    moved.then_some(out)
}

/// The paths (below the remote) of the `primary.xml` files `repomd` (at
/// `path`) lists in a compression that can be relocated.
pub(super) fn primaries(path: &str, repomd: &[u8]) -> Vec<String> {
    let root = path.strip_suffix("repodata/repomd.xml").unwrap_or("");
    let mut reader = quick_xml::Reader::from_reader(repomd);
    let (mut buf, mut out, mut kind) = (Vec::new(), Vec::new(), None);
    loop {
        match reader.read_event_into(&mut buf) {
            Ok(Event::Start(e)) if e.name().as_ref() == b"data" => kind = attribute(&e, b"type"),
            Ok(Event::Start(e) | Event::Empty(e))
                if e.name().as_ref() == b"location" && kind.as_deref() == Some("primary") =>
            {
                if let Some(href) = attribute(&e, b"href").filter(|h| !h.contains("://")) {
                    out.push(format!("{root}{href}"));
                }
            }
            Ok(Event::Eof) | Err(_) => return out,
            _ => {}
        }
        buf.clear();
    }
}

/// `repomd` (at `path`) restating, for each primary that relocation changes
/// (`stored`: each primary's path and stored bytes), its `checksum`,
/// `open-checksum`, `size` and `open-size` for the relocated bytes, and
/// without its `primary_zck`; unchanged when no primary moves (or it cannot
/// be read).
pub(super) fn restate(
    path: &str,
    repomd: Vec<u8>,
    stored: &[(String, Vec<u8>)],
    rewrite: &Rewrite,
    max: u64,
) -> Vec<u8> {
    let root = path.strip_suffix("repodata/repomd.xml").unwrap_or("");
    let stored: HashMap<&str, &[u8]> = stored
        .iter()
        .filter_map(|(p, b)| Some((p.strip_prefix(root)?, b.as_slice())))
        .collect();
    match restated(&repomd, &stored, rewrite, max) {
        Ok(Some(out)) => out,
        Ok(None) => repomd,
        Err(error) => {
            tracing::warn!(path, %error, "repomd.xml not restated for the relocated primary");
            repomd
        }
    }
}

/// One `<data>` element's events, kept until its location is known.
type Block = Vec<Event<'static>>;

fn restated(
    repomd: &[u8],
    stored: &HashMap<&str, &[u8]>,
    rewrite: &Rewrite,
    max: u64,
) -> io::Result<Option<Vec<u8>>> {
    let mut reader = quick_xml::Reader::from_reader(repomd);
    let mut writer = quick_xml::Writer::new(Vec::with_capacity(repomd.len()));
    let (mut buf, mut block): (Vec<u8>, Option<Block>) = (Vec::new(), None);
    let mut moved = false;
    loop {
        let event = reader
            .read_event_into(&mut buf)
            .map_err(|e| io::Error::other(e.to_string()))?
            .into_owned();
        match event {
            Event::Eof => break,
            Event::Start(e) if e.name().as_ref() == b"data" => {
                block = Some(vec![Event::Start(e)]);
            }
            Event::End(e) if e.name().as_ref() == b"data" && block.is_some() => {
                let mut events = block.take().unwrap_or_default();
                events.push(Event::End(e));
                match data_type(&events).as_deref() {
                    Some("primary") => moved |= restate_block(&mut events, stored, rewrite, max)?,
                    // Left out: what is written is used only when a
                    // primary moved, and then the zchunk one is stale.
                    Some("primary_zck") => events.clear(),
                    _ => {}
                }
                for event in events {
                    writer.write_event(event)?;
                }
            }
            event => match &mut block {
                Some(events) => events.push(event),
                None => writer.write_event(event)?,
            },
        }
        buf.clear();
    }
    Ok(moved.then(|| writer.into_inner()))
}

fn data_type(events: &Block) -> Option<String> {
    match events.first() {
        Some(Event::Start(e)) => attribute(e, b"type"),
        _ => None,
    }
}

/// Restates one primary's `<data>` for its relocated bytes; whether it moved.
fn restate_block(
    events: &mut Block,
    stored: &HashMap<&str, &[u8]>,
    rewrite: &Rewrite,
    max: u64,
) -> io::Result<bool> {
    let href = events.iter().find_map(|event| match event {
        Event::Start(e) | Event::Empty(e) if e.name().as_ref() == b"location" => {
            attribute(e, b"href")
        }
        _ => None,
    });
    let Some(body) = href.as_deref().and_then(|href| stored.get(href)) else {
        return Ok(false);
    };
    let algo_of = |element: &[u8]| {
        events
            .iter()
            .find_map(|event| match event {
                Event::Start(e) if e.name().as_ref() == element => attribute(e, b"type"),
                _ => None,
            })
            .as_deref()
            .and_then(algo_named)
    };
    let checksum_algo = algo_of(b"checksum").unwrap_or(Algo::Sha256);
    let open_algo = algo_of(b"open-checksum").unwrap_or(checksum_algo);
    let Some(relocated) = relocate(body, rewrite, open_algo, max)? else {
        return Ok(false);
    };
    let mut hashers = Hashers::with(Some(checksum_algo));
    hashers.update(&relocated.bytes);
    let checksum = hashers.finish().1;
    let texts: [(&[u8], String); 4] = [
        (b"checksum", checksum.hex()),
        (b"open-checksum", relocated.open.hex()),
        (b"size", relocated.bytes.len().to_string()),
        (
            b"open-size",
            relocated.open.size().unwrap_or_default().to_string(),
        ),
    ];
    let mut inside: Option<String> = None;
    for event in events.iter_mut() {
        match event {
            Event::Start(e) => {
                inside = texts
                    .iter()
                    .find(|(name, _)| e.name().as_ref() == *name)
                    .map(|(_, text)| text.clone());
            }
            Event::Text(t) => {
                if let Some(text) = &inside {
                    *t = BytesText::new(text).into_owned();
                }
            }
            Event::End(_) => inside = None,
            _ => {}
        }
    }
    Ok(true)
}
