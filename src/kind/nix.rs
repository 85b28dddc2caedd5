//! nix: a Nix binary cache as `nix-store --realise`, `nix copy --from` and
//! every substituter read it (`nix-cache-info`, `{hash}.narinfo`, the NARs
//! the narinfos' `URL:` name under `nar/`, `{hash}.ls` listings, `log/{drv}`
//! build logs). A NAR file is immutable and checked against the `FileHash`
//! (and `FileSize`) its narinfo declares, or its `NarHash` and `NarSize`
//! when it is stored uncompressed; a narinfo is revalidated (another build
//! of the same input-addressed path may replace it) and served as the
//! mirror wrote it, its `Sig:` lines untouched for the client to verify
//! against its own trusted keys, an absolute `URL:` on the remote's hosts
//! re-pointed at the proxy. A compressed NAR's `NarHash` is the client's to
//! check after it decompresses (Nix does, before it adds the path to its
//! store). Several caches are mirrors of one remote: a narinfo one lacks is
//! asked of the next, and one none has is remembered for `negative_ttl`.

use axum::http::HeaderMap;

use super::declared::{canonical, Algo, Declared, Document};
use super::{Digests, Ecosystem, Plan, Rewritten};

pub struct Nix;

/// The digits of Nix's base-32, in value order (no `e`, `o`, `u`, `t`).
const BASE32: &[u8; 32] = b"0123456789abcdfghijklmnpqrsvwxyz";

/// `{hash}.narinfo` at the cache's root: the 32 base-32 digits of a store
/// path's hash part.
fn is_narinfo(path: &str) -> bool {
    path.strip_suffix(".narinfo")
        .is_some_and(|hash| hash.len() == 32 && hash.bytes().all(|b| BASE32.contains(&b)))
}

/// A NAR file, compressed or not: `nar/{file}.nar[.xz|.zst|.bz2|.br|…]`.
fn is_nar(path: &str) -> bool {
    path.strip_prefix("nar/")
        .is_some_and(|file| !file.contains('/') && file.contains(".nar"))
}

/// A hash as Nix writes one: `sha256:` and base-32 (52 digits), base-16 or
/// base-64, or the SRI form `sha256-{base64}`.
pub fn parse_hash(text: &str) -> Option<Declared> {
    let text = text.trim();
    let (algo, digits, sri) = match text.split_once(':') {
        Some((algo, digits)) => (algo, digits, false),
        None => {
            let (algo, digits) = text.split_once('-')?;
            (algo, digits, true)
        }
    };
    let algo = Algo::parse(algo)?;
    let size = algo.len();
    let bytes = if sri || digits.len() == size.div_ceil(3) * 4 {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(digits)
            .ok()?
    } else if digits.len() == size * 2 {
        hex::decode(digits).ok()?
    } else {
        from_base32(digits, size)?
    };
    Declared::new(algo, bytes)
}

/// Nix's base-32 (`libutil/hash.cc`): the last digit holds the lowest five
/// bits of the first byte, and so on; `size` bytes are `(8 size - 1) / 5 + 1`
/// digits, and the bits past the last byte must be zero.
fn from_base32(digits: &str, size: usize) -> Option<Vec<u8>> {
    if digits.len() != (size * 8 - 1) / 5 + 1 {
        return None;
    }
    let mut bytes = vec![0u8; size];
    for (at, c) in digits.bytes().rev().enumerate() {
        let value = BASE32.iter().position(|&d| d == c)? as u16;
        let (byte, shift) = (at * 5 / 8, at * 5 % 8);
        let spread = value << shift;
        bytes[byte] |= spread as u8;
        match bytes.get_mut(byte + 1) {
            Some(next) => *next |= (spread >> 8) as u8,
            None if spread >> 8 != 0 => return None,
            None => {}
        }
    }
    Some(bytes)
}

/// The fields of a narinfo the proxy reads: `URL`, `Compression`,
/// `FileHash`, `FileSize`, `NarHash`, `NarSize`.
#[derive(Default)]
struct NarInfo<'a> {
    url: Option<&'a str>,
    compression: Option<&'a str>,
    file_hash: Option<&'a str>,
    file_size: Option<&'a str>,
    nar_hash: Option<&'a str>,
    nar_size: Option<&'a str>,
}

impl<'a> NarInfo<'a> {
    fn parse(text: &'a str) -> NarInfo<'a> {
        let mut info = NarInfo::default();
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key {
                "URL" => info.url = Some(value),
                "Compression" => info.compression = Some(value),
                "FileHash" => info.file_hash = Some(value),
                "FileSize" => info.file_size = Some(value),
                "NarHash" => info.nar_hash = Some(value),
                "NarSize" => info.nar_size = Some(value),
                _ => {}
            }
        }
        info
    }

    /// The digest (and length) the file at `URL` must have: its `FileHash`,
    /// else, stored uncompressed, its `NarHash` (the same bytes).
    fn file_digest(&self) -> Option<Declared> {
        let size = |text: Option<&str>| text.and_then(|s| s.parse().ok());
        if let Some(hash) = self.file_hash {
            return Some(parse_hash(hash)?.with_size(size(self.file_size)));
        }
        let uncompressed = matches!(self.compression, None | Some("none" | ""));
        uncompressed
            .then(|| Some(parse_hash(self.nar_hash?)?.with_size(size(self.nar_size))))
            .flatten()
    }
}

impl Ecosystem for Nix {
    fn name(&self) -> &'static str {
        "nix"
    }

    /// NARs immutable (named by their own hash); narinfos are documents
    /// (an absolute `URL:` on the remote's hosts is re-pointed at the
    /// proxy); `nix-cache-info`, listings and logs revalidated.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        Plan {
            immutable: is_nar(path),
            document: Rewritten::when(is_narinfo(path)),
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

impl Digests for Nix {
    fn artifact_key(&self, path: &str) -> Option<String> {
        is_nar(path).then(|| canonical(path))
    }

    fn declares(&self, path: &str) -> bool {
        is_narinfo(path)
    }

    /// The NAR file the narinfo's `URL:` names, with its `FileHash` and
    /// `FileSize` (or `NarHash` and `NarSize` when uncompressed).
    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        let Ok(text) = std::str::from_utf8(body) else {
            return Vec::new();
        };
        let info = NarInfo::parse(text);
        let found = info
            .url
            .and_then(|url| document.path_of(url))
            .zip(info.file_digest());
        found.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::conformance::{Class, Declares, Rewritten, Rows};

    /// sha256 of the empty string, and as `nix-hash --type sha256
    /// --to-base32` writes it.
    const EMPTY_HEX: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    const EMPTY_BASE32: &str = "0mdqa9w1p6cmli6976v4wi0sw9r4p5prkj7lzfd1877wk11c9c73";
    const MIRRORS: &[&str] = &["https://cache.example.org"];

    fn narinfo(url: &str) -> String {
        format!(
            "StorePath: /nix/store/7d5zv3wnhms0f0dh1bq54j3z5mf3hjlp-hello-2.12\nURL: {url}\nCompression: xz\nFileHash: sha256:{EMPTY_BASE32}\nFileSize: 41\nNarHash: sha256:{EMPTY_HEX}\nNarSize: 120\nReferences: 7d5zv3wnhms0f0dh1bq54j3z5mf3hjlp-hello-2.12\nSig: cache.example.org-1:c2lnbmF0dXJl\n"
        )
    }

    pub(super) fn rows() -> Rows {
        let nar = format!("nar/{EMPTY_BASE32}.nar.xz");
        Rows {
            paths: vec![
                ("nix-cache-info", Class::Mutable),
                ("7d5zv3wnhms0f0dh1bq54j3z5mf3hjlp.narinfo", Class::Document),
                ("nar/0abc.nar.xz", Class::Immutable),
                ("nar/0abc.nar.zst", Class::Immutable),
                ("nar/0abc.nar", Class::Immutable),
                ("7d5zv3wnhms0f0dh1bq54j3z5mf3hjlp.ls", Class::Mutable),
                (
                    "log/7d5zv3wnhms0f0dh1bq54j3z5mf3hjlp-hello.drv",
                    Class::Mutable,
                ),
                // Not a store path's hash part: not a narinfo.
                ("etc.narinfo", Class::Mutable),
            ],
            keys: vec![
                ("nar/0abc.nar.xz", Some("nar/0abc.nar.xz")),
                ("7d5zv3wnhms0f0dh1bq54j3z5mf3hjlp.narinfo", None),
                ("nix-cache-info", None),
            ],
            declares: vec![
                Declares {
                    mirrors: MIRRORS,
                    files: &[],
                    path: "7d5zv3wnhms0f0dh1bq54j3z5mf3hjlp.narinfo",
                    body: narinfo(&nar).into_bytes(),
                    declared: vec![(nar.clone(), format!("sha256:{EMPTY_HEX} (41 bytes)"))],
                },
                // An absolute URL on the remote's host is the same file.
                Declares {
                    mirrors: MIRRORS,
                    files: &[],
                    path: "0000000000000000000000000000000a.narinfo",
                    body: narinfo(&format!("https://cache.example.org/{nar}")).into_bytes(),
                    declared: vec![(nar.clone(), format!("sha256:{EMPTY_HEX} (41 bytes)"))],
                },
            ],
            rewrites: vec![Rewritten {
                mirrors: MIRRORS,
                files: &[],
                path: "0000000000000000000000000000000a.narinfo",
                body: "URL: https://cache.example.org/nar/x.nar.xz\nSig: k-1:httpS/http+x==\n",
                expected: "URL: http://proxy/r/nar/x.nar.xz\nSig: k-1:httpS/http+x==\n",
            }],
            ..Rows::default()
        }
    }

    #[test]
    fn hashes_parse_in_every_spelling_nix_writes() {
        let expected = Declared::from_hex(Algo::Sha256, EMPTY_HEX).unwrap();
        for text in [
            format!("sha256:{EMPTY_BASE32}"),
            format!("sha256:{EMPTY_HEX}"),
            "sha256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=".to_string(),
            "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=".to_string(),
        ] {
            assert_eq!(parse_hash(&text), Some(expected.clone()), "{text}");
        }
        // A digit outside the alphabet, a wrong length, bits past the end.
        for bad in [
            format!("sha256:{}", EMPTY_BASE32.replace('0', "e")),
            format!("sha256:{}", &EMPTY_BASE32[1..]),
            format!("sha256:z{}", &EMPTY_BASE32[1..]),
            "md4:00".to_string(),
        ] {
            assert_eq!(parse_hash(&bad), None, "{bad}");
        }
    }

    #[test]
    fn an_uncompressed_nar_is_declared_by_its_nar_hash_and_another_by_nothing_else() {
        let mirrors = [url::Url::parse(MIRRORS[0]).unwrap()];
        let document = Document::new("r", &mirrors, &[], "a.narinfo");
        let plain =
            format!("URL: nar/x.nar\nCompression: none\nNarHash: sha256:{EMPTY_HEX}\nNarSize: 0\n");
        let learned = Nix.learn(&document, plain.as_bytes());
        assert_eq!(learned[0].0, "nar/x.nar");
        assert_eq!(
            learned[0].1.to_string(),
            format!("sha256:{EMPTY_HEX} (0 bytes)")
        );
        let xz = format!("URL: nar/x.nar.xz\nCompression: xz\nNarHash: sha256:{EMPTY_HEX}\n");
        assert!(Nix.learn(&document, xz.as_bytes()).is_empty());
    }
}
