//! rubygems: a gem server in rubygems.org's layout. `.gem` files
//! (`gems/<name>-<version>[-<platform>].gem`) and quick gemspecs
//! (`quick/Marshal.4.8/*.gemspec.rz`) are immutable; the compact index
//! (`versions`, `info/<gem>`, `names`) and the full index (`specs.4.8.gz`,
//! `latest_specs.4.8.gz`, `prerelease_specs.4.8.gz`) are mutable. Bundler
//! appends to its copies of the compact index with `Range: bytes=<size-1>-`
//! and keeps the result only when the ETag is the quoted MD5 of the whole
//! file, so those answer with that ETag (`md5_etag`), on a 206 too. Each
//! `info/<gem>` line's `checksum:` (sha256) is the declared digest of that
//! version's `.gem`. `HEAD /{remote}/`, gem 3.3's probe for the compact
//! index, answers 200 (`answers_root`). The dependency API
//! (`api/v1/dependencies`) is passed through. No `Packages` yet: `deny`,
//! `allow` and `min_release_age` are refused by `check`.

use super::declared::{canonical, Algo, Declared, Document};
use super::{Digests, Ecosystem, PassThrough};

pub struct Rubygems;

/// The compact index documents.
fn is_compact_index(path: &str) -> bool {
    matches!(path, "versions" | "names")
        || path
            .strip_prefix("info/")
            .is_some_and(|gem| !gem.is_empty() && !gem.contains('/'))
}

/// `gems/<file>.gem`, one segment.
fn is_gem(path: &str) -> bool {
    path.strip_prefix("gems/")
        .and_then(|file| file.strip_suffix(".gem"))
        .is_some_and(|stem| !stem.is_empty() && !stem.contains('/'))
}

impl Ecosystem for Rubygems {
    fn name(&self) -> &'static str {
        "rubygems"
    }

    fn is_immutable(&self, path: &str) -> bool {
        is_gem(path)
            || path
                .strip_prefix("quick/Marshal.4.8/")
                .is_some_and(|f| f.ends_with(".gemspec.rz") && !f.contains('/'))
    }

    fn md5_etag(&self, path: &str) -> bool {
        is_compact_index(path)
    }

    fn answers_root(&self) -> bool {
        true
    }

    /// The dependency API, which Bundler asks when the compact index fails
    /// (rubygems.org answers it 404 today), and the gem metadata API.
    fn pass_through(&self, path: &str) -> Option<PassThrough> {
        path.starts_with("api/")
            .then_some(PassThrough { post: false })
    }

    fn digests(&self) -> Option<&dyn Digests> {
        Some(self)
    }

    #[cfg(test)]
    fn conformance(&self) -> super::conformance::Rows {
        tests::rows()
    }
}

impl Digests for Rubygems {
    fn artifact_key(&self, path: &str) -> Option<String> {
        is_gem(path).then(|| canonical(path))
    }

    fn declares(&self, path: &str) -> bool {
        path.starts_with("info/") && is_compact_index(path)
    }

    /// `<version>[-<platform>] <deps>|checksum:<sha256>,…` after the `---`
    /// line: the digest of `gems/<gem>-<version>[-<platform>].gem`.
    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        let Some(gem) = document.path.strip_prefix("info/") else {
            return Vec::new();
        };
        let text = String::from_utf8_lossy(body);
        text.lines()
            .filter(|line| *line != "---")
            .filter_map(|line| {
                let version = line.split(' ').next().filter(|v| !v.is_empty())?;
                let (_, requirements) = line.rsplit_once('|')?;
                let hex = requirements
                    .split(',')
                    .find_map(|r| r.trim().strip_prefix("checksum:"))?;
                let declared = Declared::from_hex(Algo::Sha256, hex)?;
                Some((canonical(&format!("gems/{gem}-{version}.gem")), declared))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::conformance::{Class, Declares, Rows};
    use super::*;

    pub(super) fn rows() -> Rows {
        let sum = "ab".repeat(32);
        let info = format!(
            "---\n1.0.0 |checksum:{sum}\n1.1.0 rake:>= 0,json:~> 2.0|checksum:{},ruby:>= 2.7\n\
             1.1.0-x86_64-linux |checksum:{}\n2.0.0 |ruby:>= 3.0\n",
            "cd".repeat(32),
            "ef".repeat(32)
        );
        Rows {
            paths: vec![
                ("gems/rack-3.0.0.gem", Class::Immutable),
                ("gems/nokogiri-1.16.0-x86_64-linux.gem", Class::Immutable),
                ("quick/Marshal.4.8/rack-3.0.0.gemspec.rz", Class::Immutable),
                ("versions", Class::Mutable),
                ("names", Class::Mutable),
                ("info/rack", Class::Mutable),
                ("specs.4.8.gz", Class::Mutable),
                ("latest_specs.4.8.gz", Class::Mutable),
                ("prerelease_specs.4.8.gz", Class::Mutable),
                ("api/v1/dependencies", Class::Pass { post: false }),
                ("gems/a/b.gem", Class::Mutable),
            ],
            keys: vec![
                ("gems/rack-3.0.0.gem", Some("gems/rack-3.0.0.gem")),
                ("quick/Marshal.4.8/rack-3.0.0.gemspec.rz", None),
                ("info/rack", None),
            ],
            declares: vec![Declares {
                mirrors: &["https://rubygems.org"],
                files: &[],
                path: "info/mc-alpha",
                body: info.into_bytes(),
                declared: vec![
                    ("gems/mc-alpha-1.0.0.gem".into(), format!("sha256:{sum}")),
                    (
                        "gems/mc-alpha-1.1.0.gem".into(),
                        format!("sha256:{}", "cd".repeat(32)),
                    ),
                    (
                        "gems/mc-alpha-1.1.0-x86_64-linux.gem".into(),
                        format!("sha256:{}", "ef".repeat(32)),
                    ),
                ],
            }],
            ..Rows::default()
        }
    }

    #[test]
    fn the_compact_index_has_md5_etags_and_the_root_answers() {
        for path in ["versions", "names", "info/rack"] {
            assert!(Rubygems.md5_etag(path), "{path}");
        }
        for path in ["info/", "info/a/b", "gems/rack-3.0.0.gem", "specs.4.8.gz"] {
            assert!(!Rubygems.md5_etag(path), "{path}");
        }
        assert!(Rubygems.answers_root());
        assert!(!super::super::generic::Generic.answers_root());
    }

    #[test]
    fn deny_and_allow_are_refused_without_packages() {
        assert!(Rubygems.refuses_key("deny").is_some());
        assert_eq!(Rubygems.refuses_key("require_declared_hash"), None);
    }
}
