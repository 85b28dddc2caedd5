//! rubygems: a gem server in rubygems.org's layout. `.gem` files
//! (`gems/<name>-<version>[-<platform>].gem`) and quick gemspecs
//! (`quick/Marshal.4.8/*.gemspec.rz`) are immutable; the compact index
//! (`versions`, `info/<gem>`, `names`) and the full index (`specs.4.8.gz`,
//! `latest_specs.4.8.gz`, `prerelease_specs.4.8.gz`) are mutable. Bundler
//! appends to its copies of the compact index with `Range: bytes=<size-1>-`
//! and keeps the result only when the ETag is the quoted MD5 of the whole
//! file, so those answer with that ETag (`Etag::WholeMd5`), on a 206 too. Each
//! `info/<gem>` line's `checksum:` (sha256) is the declared digest of that
//! version's `.gem`. `HEAD /{remote}/`, gem 3.3's probe for the compact
//! index, answers 200 (`answers_root`). The dependency API
//! (`api/v1/dependencies`) is passed through. Packages are gems (names as
//! spelt), rules in RubyGems requirement syntax (`~> 1.2`, `>= 1.0, < 2`);
//! publish times from a line's `created_at:` where the index gives one,
//! else from the versions API (`api/v1/versions/<gem>.json`, cached and
//! revalidated like the compact index);
//! `info/<gem>` is filtered of refused versions' lines (its MD5 ETag follows
//! the filtered bytes), and `versions` restated to match: a filtered gem's
//! lines list only the versions its `info` still serves, with that `info`'s
//! MD5 (`index_listing`, `restate_index`).

mod requirement;

use std::collections::HashMap;

use axum::http::HeaderMap;

use super::declared::{canonical, Algo, Declared, Document, Hashers};
use super::guard::{parse_time, Filtered, Judge, VersionSpec};
use super::package::{self, Artifact};
use super::{
    Digests, Ecosystem, Etag, Packages, PassThrough, Plan, TimeKey, TimeSource, TimesFrom,
};

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

    /// Gems and their quick specs immutable; the compact index validated
    /// by the MD5 of the body served; the dependency and metadata APIs
    /// passed through.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        Plan {
            immutable: is_immutable(path),
            etag: if is_compact_index(path) {
                Etag::WholeMd5
            } else {
                Etag::Sha256
            },
            pass_through: pass_through(path),
            ..Plan::default()
        }
    }

    fn answers_root(&self) -> bool {
        true
    }

    fn digests(&self) -> Option<&dyn Digests> {
        Some(self)
    }

    fn packages(&self) -> Option<&dyn Packages> {
        Some(self)
    }

    #[cfg(test)]
    fn conformance(&self) -> super::conformance::Rows {
        tests::rows()
    }
}

fn is_immutable(path: &str) -> bool {
    is_gem(path)
        || path
            .strip_prefix("quick/Marshal.4.8/")
            .is_some_and(|f| f.ends_with(".gemspec.rz") && !f.contains('/'))
}

/// The dependency API, which Bundler asks when the compact index fails
/// (rubygems.org answers it 404 today), and the gem metadata API.
/// The versions API (`api/v1/versions/<gem>.json`), where publish times
/// are read, is a cached, revalidated document instead.
fn pass_through(path: &str) -> Option<PassThrough> {
    (path.starts_with("api/") && versions_api_gem(path).is_none())
        .then_some(PassThrough { post: false })
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

/// An `info/<gem>` line: its version (with platform), and its requirements
/// part (after `|`).
fn info_line(line: &str) -> Option<(&str, &str)> {
    if line == "---" {
        return None;
    }
    let version = line.split(' ').next().filter(|v| !v.is_empty())?;
    Some((version, line.rsplit_once('|').map_or("", |(_, r)| r)))
}

/// The versions API path of `gem`, and the gem a path is the versions API of.
fn versions_api(gem: &str) -> String {
    format!("api/v1/versions/{gem}.json")
}

fn versions_api_gem(path: &str) -> Option<&str> {
    let gem = path
        .strip_prefix("api/v1/versions/")?
        .strip_suffix(".json")?;
    (!gem.is_empty() && !gem.contains('/')).then_some(gem)
}

/// The versions API's `[{"number", "platform", "created_at"}, …]`, by
/// version as `info` spells it (`1.1.0`, `1.1.0-x86_64-linux`).
fn api_times(body: &[u8]) -> HashMap<String, i64> {
    #[derive(serde::Deserialize)]
    struct Release {
        number: String,
        #[serde(default)]
        platform: Option<String>,
        created_at: Option<String>,
    }
    let Ok(releases) = serde_json::from_slice::<Vec<Release>>(body) else {
        return HashMap::new();
    };
    releases
        .into_iter()
        .filter_map(|r| {
            let at = parse_time(r.created_at.as_deref()?)?;
            let version = match r.platform.as_deref() {
                None | Some("ruby") | Some("") => r.number,
                Some(platform) => format!("{}-{platform}", r.number),
            };
            Some((version, at))
        })
        .collect()
}

/// The lines of `versions` after its `---`.
fn versions_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().skip_while(|line| *line != "---").skip(1)
}

/// A `versions` line: the gem, its versions (comma-separated), the MD5.
fn versions_line(line: &str) -> Option<(&str, &str, &str)> {
    let mut parts = line.split(' ');
    let (gem, versions, md5) = (parts.next()?, parts.next()?, parts.next()?);
    (parts.next().is_none() && !gem.is_empty()).then_some((gem, versions, md5))
}

/// A line's `created_at:` requirement, in unix ms.
fn created_at(requirements: &str) -> Option<i64> {
    requirements
        .split(',')
        .find_map(|r| r.trim().strip_prefix("created_at:"))
        .and_then(parse_time)
}

impl Packages for Rubygems {
    fn osv_ecosystem(&self) -> Option<&'static str> {
        Some("RubyGems")
    }

    fn parse_versions(&self, text: &str) -> Result<VersionSpec, String> {
        requirement::Requirement::parse(text).map(VersionSpec::new)
    }

    /// `gems/<name>-<version>[-<platform>].gem`: the version starts at the
    /// first `-` a digit follows.
    fn artifact(&self, path: &str) -> Option<Artifact> {
        if !is_gem(path) {
            return None;
        }
        let file = package::file_name(path)?;
        let stem = file.strip_suffix(".gem")?;
        let at = stem
            .match_indices('-')
            .map(|(at, _)| at)
            .find(|&at| stem[at + 1..].starts_with(|c: char| c.is_ascii_digit()))?;
        let rest = &stem[at + 1..];
        Some(Artifact {
            name: stem[..at].to_string(),
            version: rest.split('-').next()?.to_string(),
            file: rest.to_string(),
        })
    }

    fn document(&self, path: &str) -> Option<String> {
        let gem = path.strip_prefix("info/")?;
        (!gem.is_empty() && !gem.contains('/')).then(|| gem.to_string())
    }

    /// `versions`: after the `---` line, `<gem> <version>,<version>,… <md5
    /// of info/gem>` (a gem on several lines when versions were appended;
    /// `-<version>` a yank).
    fn index_listing(&self, path: &str, body: &[u8]) -> Option<Vec<(String, Vec<String>)>> {
        if path != "versions" {
            return None;
        }
        let text = String::from_utf8_lossy(body);
        Some(
            versions_lines(&text)
                .filter_map(versions_line)
                .map(|(gem, versions, _)| {
                    let versions = versions.split(',').map(|v| v.trim_start_matches('-'));
                    (gem.to_string(), versions.map(str::to_string).collect())
                })
                .collect(),
        )
    }

    fn document_of(&self, name: &str) -> Option<String> {
        Some(format!("info/{name}"))
    }

    /// A restated gem's lines list only the versions (and yanks of them)
    /// its filtered `info` serves, with that `info`'s MD5; a line left with
    /// none goes.
    fn restate_index(&self, body: Vec<u8>, restated: &HashMap<String, Option<Vec<u8>>>) -> Vec<u8> {
        let Ok(text) = std::str::from_utf8(&body) else {
            return body;
        };
        // Each restated gem's versions and MD5, from its info as served.
        let restated: HashMap<&str, (Vec<&str>, String)> = restated
            .iter()
            .map(|(gem, info)| {
                let info = info.as_deref().unwrap_or_default();
                let text = std::str::from_utf8(info).unwrap_or("");
                let versions = text.lines().filter_map(info_line).map(|(v, _)| v).collect();
                let mut md5 = Hashers::with(Some(Algo::Md5));
                md5.update(info);
                (gem.as_str(), (versions, md5.finish().1.hex()))
            })
            .collect();
        let mut out = String::with_capacity(text.len());
        let mut listing = false;
        for line in text.split_inclusive('\n') {
            let bare = line.trim_end_matches('\n');
            let entry = listing.then(|| versions_line(bare)).flatten();
            listing |= bare == "---";
            let Some((gem, versions, _)) = entry else {
                out.push_str(line);
                continue;
            };
            let Some((served, md5)) = restated.get(gem) else {
                out.push_str(line);
                continue;
            };
            let kept: Vec<&str> = versions
                .split(',')
                .filter(|v| served.contains(&v.trim_start_matches('-')))
                .collect();
            if !kept.is_empty() {
                out.push_str(&format!("{gem} {} {md5}\n", kept.join(",")));
            }
        }
        out.into_bytes()
    }

    /// By version with platform (`1.1.0-x86_64-linux`): an `info`'s
    /// `created_at:`, or the versions API's `created_at`.
    fn publish_times(&self, body: &[u8]) -> HashMap<String, i64> {
        if body.first() == Some(&b'[') {
            return api_times(body);
        }
        String::from_utf8_lossy(body)
            .lines()
            .filter_map(info_line)
            .filter_map(|(version, reqs)| Some((version.to_string(), created_at(reqs)?)))
            .collect()
    }

    /// The versions API (rubygems.org's `info` lines carry no `created_at:`).
    fn time_source(&self, artifact: &Artifact) -> Option<TimeSource> {
        Some(TimeSource {
            document: versions_api(&artifact.name),
            suffix: "",
            key: TimeKey::Listed(artifact.file.clone()),
        })
    }

    /// An `info` whose lines lack `created_at:` is dated by the versions API.
    fn times_from(&self, name: &str, _suffix: &str) -> Option<TimesFrom> {
        Some(TimesFrom::Document(versions_api(name)))
    }

    /// The refused versions' lines go (dated by their `created_at:`, else
    /// by `times`, the versions API's); an `info` with none left is the
    /// refusal.
    fn filter(
        &self,
        judge: &Judge,
        name: &str,
        body: &[u8],
        times: &HashMap<String, i64>,
        _suffix: &str,
    ) -> Filtered {
        let Ok(text) = std::str::from_utf8(body) else {
            return Filtered::Unchanged;
        };
        let (mut kept, mut versions, mut last) = (String::new(), 0, None);
        for line in text.split_inclusive('\n') {
            match info_line(line.trim_end_matches('\n')) {
                None => kept.push_str(line),
                Some((version, reqs)) => {
                    versions += 1;
                    let plain = version.split('-').next().unwrap_or(version);
                    let published = created_at(reqs).or_else(|| times.get(version).copied());
                    match judge.refusal(name, plain, published) {
                        Some(reason) => last = Some(reason),
                        None => kept.push_str(line),
                    }
                }
            }
        }
        match last {
            None => Filtered::Unchanged,
            Some(reason)
                if kept.lines().filter(|l| info_line(l).is_some()).count() == 0 && versions > 0 =>
            {
                Filtered::Refused(reason)
            }
            Some(_) => Filtered::Changed(kept.into_bytes()),
        }
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
                ("api/v1/versions/rack.json", Class::Mutable),
                ("gems/a/b.gem", Class::Mutable),
            ],
            artifacts: vec![
                ("gems/rack-3.0.0.gem", Some(("rack", "3.0.0"))),
                ("gems/net-http-0.4.1.gem", Some(("net-http", "0.4.1"))),
                (
                    "gems/nokogiri-1.16.0-x86_64-linux.gem",
                    Some(("nokogiri", "1.16.0")),
                ),
                ("info/rack", None),
            ],
            documents: vec![("info/rack", Some("rack")), ("versions", None)],
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
        let md5_etag = |path| Rubygems.plan(path, &HeaderMap::new()).etag == Etag::WholeMd5;
        for path in ["versions", "names", "info/rack"] {
            assert!(md5_etag(path), "{path}");
        }
        for path in ["info/", "info/a/b", "gems/rack-3.0.0.gem", "specs.4.8.gz"] {
            assert!(!md5_etag(path), "{path}");
        }
        assert!(Rubygems.answers_root());
        assert!(!super::super::generic::Generic.answers_root());
    }

    #[test]
    fn rules_read_rubygems_requirements_and_filter_info_lines() {
        use super::super::conformance::{check_rules, guard, iso, DAY, NOW};
        check_rules(
            &Rubygems,
            &[
                ("rack@~> 2.2", "rack", "2.2.8", true),
                ("rack@~> 2.2", "rack", "3.0.0", false),
                ("rack@>= 1.0, < 2", "rack", "1.5", true),
                ("ra*", "rails", "7.0.0", true),
            ],
            ("rack@~> x", "RubyGems requirement"),
        );
        let info = format!(
            "---\n1.0.0 |checksum:{a}\n2.0.0 |checksum:{a},created_at:{}\n3.0.0 |checksum:{a},created_at:{}\n",
            iso(NOW - 30 * DAY),
            iso(NOW - DAY),
            a = "ab".repeat(32)
        );
        let config = guard("rubygems", Some(7), &["mc-alpha@~> 1.0"]);
        let judge = Judge::new(&config, &Rubygems, NOW);
        let Filtered::Changed(out) =
            Rubygems.filter(&judge, "mc-alpha", info.as_bytes(), &HashMap::new(), "")
        else {
            panic!("not changed");
        };
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with("---\n2.0.0 "), "{out}");
        assert!(!out.contains("1.0.0") && !out.contains("3.0.0"), "{out}");
        let times = Rubygems.publish_times(info.as_bytes());
        assert_eq!(times.get("3.0.0"), Some(&(NOW - DAY)));
        // Without `created_at:`, the versions API dates the lines.
        let api = serde_json::json!([
            {"number": "2.0.0", "platform": "ruby", "created_at": iso(NOW - DAY)},
            {"number": "1.0.0", "platform": "x86_64-linux", "created_at": iso(NOW - 30 * DAY)}
        ]);
        let times = Rubygems.publish_times(api.to_string().as_bytes());
        assert_eq!(times.get("2.0.0"), Some(&(NOW - DAY)));
        assert_eq!(times.get("1.0.0-x86_64-linux"), Some(&(NOW - 30 * DAY)));
        let bare = format!(
            "---\n1.0.0 |checksum:{a}\n2.0.0 |checksum:{a}\n",
            a = "ab".repeat(32)
        );
        let config = guard("rubygems", Some(7), &[]);
        let judge = Judge::new(&config, &Rubygems, NOW);
        let Filtered::Changed(out) =
            Rubygems.filter(&judge, "mc-alpha", bare.as_bytes(), &times, "")
        else {
            panic!("not changed");
        };
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("---\n1.0.0 |checksum:{}\n", "ab".repeat(32))
        );
        assert_eq!(
            Rubygems.times_from("rack", ""),
            Some(TimesFrom::Document("api/v1/versions/rack.json".into()))
        );
        let config = guard("rubygems", None, &["mc-alpha"]);
        let judge = Judge::new(&config, &Rubygems, NOW);
        assert!(matches!(
            Rubygems.filter(&judge, "mc-alpha", info.as_bytes(), &HashMap::new(), ""),
            Filtered::Refused(_)
        ));
    }
}
