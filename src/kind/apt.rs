//! apt: a Debian archive. `pool/` files and `by-hash/` copies are immutable;
//! `dists/…/Release`, `InRelease` and `Packages` are mutable files (not
//! rewritten). `Release` declares the sha256 of the index files it lists,
//! `Packages` (plain, `.gz` or `.xz`) those of the pool files, and a
//! `by-hash/SHA256/<hex>` path declares its own.

use std::io::Read as _;

use super::declared::{Algo, Declared, Document};
use super::{Digests, Ecosystem};

pub struct Apt;

impl Ecosystem for Apt {
    fn name(&self) -> &'static str {
        "apt"
    }

    fn is_immutable(&self, path: &str) -> bool {
        path.starts_with("pool/") || (path.starts_with("dists/") && path.contains("/by-hash/"))
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
        learn(document.path, body)
    }
}

/// The largest decompressed `Packages.gz`/`.xz` read for declarations
/// (Debian's largest, main/amd64, is about 50 MB).
const MAX_APT_INDEX: u64 = 256 * 1024 * 1024;

fn learn(path: &str, body: &[u8]) -> Vec<(String, Declared)> {
    let mut inflated = Vec::new();
    let body = if body.starts_with(&[0x1f, 0x8b]) {
        let decoder = flate2::read::GzDecoder::new(body);
        if decoder
            .take(MAX_APT_INDEX)
            .read_to_end(&mut inflated)
            .is_err()
        {
            return Vec::new();
        }
        &inflated[..]
    } else if body.starts_with(b"\xfd7zXZ\0") {
        let mut input = std::io::BufReader::new(body);
        if lzma_rs::xz_decompress(&mut input, &mut Limited(&mut inflated)).is_err() {
            return Vec::new();
        }
        &inflated[..]
    } else {
        body
    };
    let Ok(text) = std::str::from_utf8(body) else {
        return Vec::new();
    };
    let name = path.rsplit('/').next().unwrap_or("");
    if matches!(name, "Release" | "InRelease") {
        let dir = &path[..path.len() - name.len()];
        apt_release(dir, text)
    } else if text.starts_with("Package:") {
        apt_packages(text)
    } else {
        Vec::new()
    }
}

/// A writer that refuses to grow past [`MAX_APT_INDEX`] (an xz bomb).
struct Limited<'a>(&'a mut Vec<u8>);

impl std::io::Write for Limited<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.0.len() as u64 + bytes.len() as u64 > MAX_APT_INDEX {
            return Err(std::io::ErrorKind::OutOfMemory.into());
        }
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `Release`'s `SHA256:` section: ` <hex> <size> <path below the suite>`.
fn apt_release(dir: &str, text: &str) -> Vec<(String, Declared)> {
    let mut out = Vec::new();
    let mut in_sha256 = false;
    for line in text.lines() {
        if !line.starts_with(' ') {
            in_sha256 = line.trim_end() == "SHA256:";
            continue;
        }
        if !in_sha256 {
            continue;
        }
        let mut fields = line.split_whitespace();
        if let (Some(hex), Some(_size), Some(file)) = (fields.next(), fields.next(), fields.next())
        {
            if let Some(declared) = Declared::from_hex(Algo::Sha256, hex) {
                out.push((format!("{dir}{file}"), declared));
            }
        }
    }
    out
}

/// `Packages` paragraphs: `Filename:` (below the archive root) and `SHA256:`.
fn apt_packages(text: &str) -> Vec<(String, Declared)> {
    text.split("\n\n")
        .filter_map(|paragraph| {
            let field = |name: &str| {
                paragraph.lines().find_map(|line| {
                    let (key, value) = line.split_once(':')?;
                    (key == name).then(|| value.trim())
                })
            };
            let declared = Declared::from_hex(Algo::Sha256, field("SHA256")?)?;
            Some((field("Filename")?.to_string(), declared))
        })
        .collect()
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
        lzma_rs::xz_compress(&mut packages.as_bytes(), &mut xz).unwrap();
        for body in [packages.as_bytes(), &gz[..], &xz[..]] {
            let learned = learn("dists/stable/main/binary-amd64/Packages.gz", body);
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
    fn by_hash_paths_declare_themselves() {
        let by_hash = format!("dists/stable/main/binary-amd64/by-hash/SHA256/{A}");
        assert_eq!(Apt.in_path(&by_hash), Declared::from_hex(Algo::Sha256, A));
        assert_eq!(Apt.artifact_key(&by_hash), None);
        assert!(Apt.declares(&by_hash));
    }
}
