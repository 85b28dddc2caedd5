//! apt: a Debian archive. `pool/` files and `by-hash/` copies are immutable;
//! `dists/…/Release`, `InRelease` and `Packages` are mutable files (not
//! rewritten). `Release` declares the sha256 of the index files it lists,
//! `Packages` (plain, `.gz` or `.xz`) those of the pool files, and a
//! `by-hash/SHA256/<hex>` path declares its own.

use axum::http::HeaderMap;

use super::declared::{Algo, Declared, Document};
use super::unpack::{Stopped, Unpacked};
use super::{Digests, Ecosystem, Plan};

pub struct Apt;

impl Ecosystem for Apt {
    fn name(&self) -> &'static str {
        "apt"
    }

    /// Packages, and index files by hash, immutable.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        Plan {
            immutable: path.starts_with("pool/")
                || (path.starts_with("dists/") && path.contains("/by-hash/")),
            ..Plan::default()
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

impl Digests for Apt {
    fn in_path(&self, path: &str) -> Option<Declared> {
        let (_, hex) = path.split_once("/by-hash/SHA256/")?;
        Declared::from_hex(Algo::Sha256, hex)
    }

    /// Pool files, and the index files `Release` lists (not `Release` itself).
    fn artifact_key(&self, path: &str) -> Option<String> {
        let name = path.rsplit('/').next().unwrap_or("");
        let listed = path.starts_with("pool/")
            || (path.starts_with("dists/")
                && !matches!(name, "Release" | "InRelease" | "Release.gpg"));
        (listed && self.in_path(path).is_none()).then(|| super::declared::canonical(path))
    }

    /// Release files, Packages indexes, and by-hash copies (whose name does
    /// not say what they are: sniffed once decompressed).
    fn declares(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or("");
        path.starts_with("dists/")
            && (matches!(name, "Release" | "InRelease")
                || name.starts_with("Packages")
                || path.contains("/by-hash/"))
    }

    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        learn(document, body)
    }
}

/// At most one declaration is kept per this many bytes of
/// `max_learned_size` (a real `Packages` has about one per 1.5 KiB: 1 GiB
/// keeps up to a million, over fifteen times Debian's largest).
const BYTES_PER_DECLARATION: u64 = 1024;

/// What `Release`, `InRelease` or a `Packages` index (plain, `.gz` or
/// `.xz`, or a `by-hash` copy) declares, read as a bounded stream
/// (`kind::unpack`). Past a bound, learning stops with a warning naming the
/// document, and what was read before it is kept.
fn learn(document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
    let path = document.path;
    let most = usize::try_from(document.max_unpacked / BYTES_PER_DECLARATION).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    let read = Unpacked::new(body, document.max_unpacked)
        .and_then(|unpacked| declarations(path, unpacked, most, &mut out));
    if let Err(stop) = read {
        tracing::warn!(
            document = path,
            %stop,
            learned = out.len(),
            "stopped learning the digests this document declares; it is served as sent"
        );
    }
    out
}

/// Why learning a document stops.
fn too_many(most: usize) -> Stopped {
    Stopped::Broken(format!(
        "declares more than {most} digests (one per {BYTES_PER_DECLARATION} bytes of max_learned_size)"
    ))
}

fn declarations(
    path: &str,
    mut unpacked: Unpacked<'_>,
    most: usize,
    out: &mut Vec<(String, Declared)>,
) -> Result<(), Stopped> {
    let name = path.rsplit('/').next().unwrap_or("");
    let release = matches!(name, "Release" | "InRelease");
    let dir = &path[..path.len() - name.len()];
    let mut line = Vec::new();
    // Release: inside its `SHA256:` section. Packages: the paragraph's
    // `Filename:` and `SHA256:` so far.
    let mut in_sha256 = false;
    let (mut filename, mut sha256): (Option<String>, Option<Declared>) = (None, None);
    let mut first = true;
    loop {
        let more = unpacked.line(&mut line)?;
        if first && !release && !line.starts_with(b"Package:") {
            return Ok(());
        }
        first = false;
        let text = std::str::from_utf8(&line).unwrap_or("");
        if release {
            if let Some(item) = release_line(dir, text, &mut in_sha256) {
                out.push(item);
            }
        } else if text.is_empty() || !more {
            if let (Some(file), Some(declared)) = (filename.take(), sha256.take()) {
                out.push((file, declared));
            }
            (filename, sha256) = (None, None);
        } else if let Some((key, value)) = text.split_once(':') {
            match key {
                "Filename" => filename = Some(value.trim().to_string()),
                "SHA256" => sha256 = Declared::from_hex(Algo::Sha256, value.trim()),
                _ => {}
            }
        }
        if out.len() > most {
            out.truncate(most);
            return Err(too_many(most));
        }
        if !more {
            return Ok(());
        }
    }
}

/// One line of `Release`: its `SHA256:` section lists
/// ` <hex> <size> <path below the suite>`.
fn release_line(dir: &str, line: &str, in_sha256: &mut bool) -> Option<(String, Declared)> {
    if !line.starts_with(' ') {
        *in_sha256 = line.trim_end() == "SHA256:";
        return None;
    }
    if !*in_sha256 {
        return None;
    }
    let mut fields = line.split_whitespace();
    let (hex, _size, file) = (fields.next()?, fields.next()?, fields.next()?);
    Some((
        format!("{dir}{file}"),
        Declared::from_hex(Algo::Sha256, hex)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::conformance::{Class, Declares, Rows};

    const A: &str = "aa00000000000000000000000000000000000000000000000000000000000000";
    const B: &str = "bb00000000000000000000000000000000000000000000000000000000000000";
    const MIRRORS: &[&str] = &["http://deb.debian.org/debian"];

    fn packages() -> String {
        format!(
            "Package: hello\nFilename: pool/main/h/hello/hello_1_amd64.deb\nSHA256: {A}\n\nPackage: bye\nSHA256: {B}\nFilename: pool/main/b/bye/bye_1_all.deb\n"
        )
    }

    fn sha256(hex: &str) -> String {
        format!("sha256:{hex}")
    }

    pub(super) fn rows() -> Rows {
        let release = format!(
            "Origin: Debian\nMD5Sum:\n 00 1 main/binary-amd64/Packages\nSHA256:\n {A} 123 main/binary-amd64/Packages\n {B} 45 main/binary-amd64/Packages.gz\n"
        );
        Rows {
            paths: vec![
                ("dists/bookworm/InRelease", Class::Mutable),
                (
                    "dists/bookworm/main/binary-amd64/by-hash/SHA256/abc",
                    Class::Immutable,
                ),
                ("pool/main/h/hello/hello_2.10-3_amd64.deb", Class::Immutable),
            ],
            keys: vec![
                ("dists/stable/InRelease", None),
                (
                    "dists/stable/main/binary-amd64/Packages",
                    Some("dists/stable/main/binary-amd64/Packages"),
                ),
                (
                    "pool/main/h/hello/hello_1_amd64.deb",
                    Some("pool/main/h/hello/hello_1_amd64.deb"),
                ),
            ],
            declares: vec![
                Declares {
                    mirrors: MIRRORS,
                    files: &[],
                    path: "dists/stable/InRelease",
                    body: release.into_bytes(),
                    declared: vec![
                        ("dists/stable/main/binary-amd64/Packages".into(), sha256(A)),
                        (
                            "dists/stable/main/binary-amd64/Packages.gz".into(),
                            sha256(B),
                        ),
                    ],
                },
                Declares {
                    mirrors: MIRRORS,
                    files: &[],
                    path: "dists/stable/main/binary-amd64/Packages",
                    body: packages().into_bytes(),
                    declared: vec![
                        ("pool/main/h/hello/hello_1_amd64.deb".into(), sha256(A)),
                        ("pool/main/b/bye/bye_1_all.deb".into(), sha256(B)),
                    ],
                },
            ],
            ..Rows::default()
        }
    }

    #[test]
    fn packages_declare_whether_plain_gzip_or_xz() {
        let packages = packages();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, packages.as_bytes()).unwrap();
        let gz = gz.finish().unwrap();
        let mut xz = Vec::new();
        std::io::Read::read_to_end(
            &mut liblzma::read::XzEncoder::new(packages.as_bytes(), 1),
            &mut xz,
        )
        .unwrap();
        let document = Document::new("r", &[], &[], "dists/stable/main/binary-amd64/Packages.gz");
        for body in [packages.as_bytes(), &gz[..], &xz[..]] {
            let learned = learn(&document, body);
            let learned: Vec<(String, String)> = learned
                .into_iter()
                .map(|(k, d)| (k, d.to_string()))
                .collect();
            assert_eq!(
                learned,
                [
                    ("pool/main/h/hello/hello_1_amd64.deb".to_string(), sha256(A)),
                    ("pool/main/b/bye/bye_1_all.deb".to_string(), sha256(B)),
                ]
            );
        }
    }

    #[test]
    fn a_packages_bomb_stops_at_the_bound_and_keeps_what_came_before() {
        let xz = |text: &str| {
            let mut xz = Vec::new();
            std::io::Read::read_to_end(
                &mut liblzma::read::XzEncoder::new(text.as_bytes(), 1),
                &mut xz,
            )
            .unwrap();
            xz
        };
        let path = "dists/s/main/binary-amd64/Packages.xz";
        // Paragraphs of a real size (over 1 KiB each).
        let paragraph = format!(
            "Package: p\nFilename: pool/p.deb\nSHA256: {A}\nDescription: {}\n\n",
            "x".repeat(1100)
        );
        let body = xz(&paragraph.repeat(1000));
        assert_eq!(
            learn(&Document::new("r", &[], &[], path), &body).len(),
            1000
        );
        // Unpacked past the bound: what came before is kept.
        let small =
            Document::new("r", &[], &[], path).with_max_unpacked(paragraph.len() as u64 * 100 + 10);
        assert_eq!(learn(&small, &body).len(), 100);
        // Short paragraphs: more declarations than one per KiB of the bound.
        let short = format!("Package: p\nFilename: pool/p.deb\nSHA256: {A}\n\n");
        let few = Document::new("r", &[], &[], path).with_max_unpacked(20 * 1024);
        assert_eq!(learn(&few, &xz(&short.repeat(1000))).len(), 20);
    }

    #[test]
    fn by_hash_paths_declare_themselves() {
        let by_hash = format!("dists/stable/main/binary-amd64/by-hash/SHA256/{A}");
        assert_eq!(Apt.in_path(&by_hash), Declared::from_hex(Algo::Sha256, A));
        assert_eq!(Apt.artifact_key(&by_hash), None);
        assert!(Apt.declares(&by_hash));
    }
}
