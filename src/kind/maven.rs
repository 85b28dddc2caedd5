//! maven: a Maven 2 repository layout (`group/path/artifact/version/file`),
//! as Maven Central, Google's Maven repository, the Gradle plugin portal and
//! company repositories serve it. Release files (`a-1.0[-classifier].ext`)
//! and timestamped snapshot files (`a-1.0-20240101.123456-3.jar`) are
//! immutable; `maven-metadata.xml` (group, artifact and snapshot level),
//! literal `-SNAPSHOT` files and `archetype-catalog.xml` are mutable. A
//! file's `.sha512`/`.sha256`/`.sha1`/`.md5` sidecar is its declared digest
//! (the strongest the mirror has, fetched by the proxy before it accepts
//! the file); Gradle module metadata (`.module`) declares the digests of
//! the files it lists. Sidecars are answered from the bytes the proxy
//! serves. Packages are `group:artifact`, versions ordered as Maven's
//! `ComparableVersion` does, rules in Maven's range syntax (`[1.0,2.0)`);
//! a version's publish time is its `.pom`'s `Last-Modified`; artifact-level
//! `maven-metadata.xml` is filtered of refused versions, `<latest>` and
//! `<release>` recomputed.

use std::collections::HashMap;
use std::str::FromStr as _;

use axum::http::HeaderMap;
use mvn_version::ComparableVersion;
use quick_xml::events::{BytesText, Event};

use super::declared::{canonical, Algo, Declared, Document};
use super::guard::{Filtered, Judge, VersionSpec};
use super::interval;
use super::package::{self, Artifact};
use super::{standard_refusal, Digests, Ecosystem, Packages, Plan, TimeKey, TimeSource};

pub struct Maven;

/// Sidecar suffixes, strongest first.
const CHECKSUMS: [(&str, Algo); 4] = [
    (".sha512", Algo::Sha512),
    (".sha256", Algo::Sha256),
    (".sha1", Algo::Sha1),
    (".md5", Algo::Md5),
];

/// The indexes Maven keeps beside the files: mutable.
const INDEXES: [&str; 2] = ["maven-metadata.xml", "archetype-catalog.xml"];

/// `path` without its checksum suffix, and the checksum's function.
fn split_checksum(path: &str) -> Option<(&str, Algo)> {
    CHECKSUMS
        .iter()
        .find_map(|(suffix, algo)| Some((path.strip_suffix(suffix)?, *algo)))
}

/// What a file below a version directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Build {
    /// `a-1.0.jar` under `1.0/`.
    Release,
    /// `a-1.0-20240101.123456-3.jar` under `1.0-SNAPSHOT/`.
    Timestamped,
    /// `a-1.0-SNAPSHOT.jar`: the newest snapshot build, changing.
    LiteralSnapshot,
}

/// A file of one version of one artifact.
struct Coordinates<'a> {
    /// The group's directories (`org/apache/commons`).
    group: &'a str,
    artifact: &'a str,
    /// The version directory (`1.0`, `1.0-SNAPSHOT`).
    version: &'a str,
    file: &'a str,
    build: Build,
}

impl Coordinates<'_> {
    fn package(&self) -> String {
        format!("{}:{}", self.group.replace('/', "."), self.artifact)
    }
}

fn coordinates(path: &str) -> Option<Coordinates<'_>> {
    // Asked on every request of a maven remote: split from the end, no
    // allocation.
    let mut parts = path.rsplitn(4, '/');
    let (file, version, artifact, group) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if [file, version, artifact].iter().any(|s| s.is_empty()) || group.split('/').any(str::is_empty)
    {
        return None;
    }
    let rest = file.strip_prefix(artifact)?.strip_prefix('-')?;
    let follows = |rest: &str, prefix: &str| {
        rest.strip_prefix(prefix)
            .is_some_and(|after| after.starts_with(['.', '-']))
    };
    let build = match version.strip_suffix("-SNAPSHOT") {
        Some(_) if follows(rest, version) => Build::LiteralSnapshot,
        Some(base) => {
            let stamp = rest.strip_prefix(base)?.strip_prefix('-')?;
            is_timestamp(stamp).then_some(Build::Timestamped)?
        }
        None if follows(rest, version) => Build::Release,
        None => return None,
    };
    Some(Coordinates {
        group,
        artifact,
        version,
        file,
        build,
    })
}

/// Whether `text` starts with a snapshot build's `yyyyMMdd.HHmmss-N`.
fn is_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        b.get(range)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
    };
    if !(digits(0..8) && b.get(8) == Some(&b'.') && digits(9..15) && b.get(15) == Some(&b'-')) {
        return false;
    }
    let build = b[16..].iter().take_while(|c| c.is_ascii_digit()).count();
    build > 0 && matches!(b.get(16 + build), None | Some(b'.') | Some(b'-'))
}

fn is_index(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or("");
    INDEXES.contains(&name)
}

impl Ecosystem for Maven {
    fn name(&self) -> &'static str {
        "maven"
    }

    /// Release and timestamped snapshot files (and their sidecars)
    /// immutable; a sidecar answered from its file; snapshot or release by
    /// the version, for `version_policy`.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        Plan {
            immutable: is_immutable(path),
            checksum_of: checksum_of(path),
            snapshot: is_snapshot(path),
            ..Plan::default()
        }
    }

    fn refuses_key(&self, key: &str) -> Option<String> {
        match key {
            "version_policy" => None,
            _ => standard_refusal(self.name(), self.digests(), self.packages(), key),
        }
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

/// Release and timestamped snapshot files, and their sidecars.
fn is_immutable(path: &str) -> bool {
    let base = split_checksum(path).map_or(path, |(base, _)| base);
    !is_index(base) && coordinates(base).is_some_and(|c| c.build != Build::LiteralSnapshot)
}

/// A sidecar (`x.jar.sha1`): the file it is the checksum of, and the function.
fn checksum_of(path: &str) -> Option<(&str, Algo)> {
    split_checksum(path).filter(|(base, _)| !base.is_empty())
}

/// Whether `path` is of a snapshot version, of a release, or of neither
/// (the artifact's `maven-metadata.xml`, of all versions).
fn is_snapshot(path: &str) -> Option<bool> {
    let base = split_checksum(path).map_or(path, |(base, _)| base);
    if is_index(base) {
        // Snapshot-level metadata sits in the version's directory.
        let dir = base.rsplit('/').nth(1)?;
        return dir.ends_with("-SNAPSHOT").then_some(true);
    }
    coordinates(base).map(|c| c.version.ends_with("-SNAPSHOT"))
}

impl Digests for Maven {
    /// Immutable files other than checksums, under their own path.
    fn artifact_key(&self, path: &str) -> Option<String> {
        (split_checksum(path).is_none() && is_immutable(path)).then(|| canonical(path))
    }

    /// `.sha512` (published beside `.sha256` where a repository has them)
    /// and `.sha1` (which every file has) first, then `.sha256` and `.md5`.
    fn declared_by(&self, path: &str) -> Vec<String> {
        if self.artifact_key(path).is_none() {
            return Vec::new();
        }
        [".sha512", ".sha1", ".sha256", ".md5"]
            .iter()
            .map(|suffix| format!("{path}{suffix}"))
            .collect()
    }

    /// Gradle module metadata (sidecars are read by the fill that needs
    /// them, through `declared_by`).
    fn declares(&self, path: &str) -> bool {
        path.ends_with(".module") && is_immutable(path)
    }

    /// A sidecar: its first token, for the file beside it. A `.module`: the
    /// strongest digest of each file it lists (`url` relative to it).
    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        if let Some((base, algo)) = split_checksum(document.path) {
            let text = String::from_utf8_lossy(body);
            let token = text.split_whitespace().next().unwrap_or("");
            return Declared::from_hex(algo, &token.to_ascii_lowercase())
                .map(|d| vec![(base.to_string(), d)])
                .unwrap_or_default();
        }
        module(document.path, body)
    }
}

/// The files a Gradle module lists, with their strongest digest.
fn module(path: &str, body: &[u8]) -> Vec<(String, Declared)> {
    #[derive(serde::Deserialize)]
    struct Module {
        #[serde(default)]
        variants: Vec<Variant>,
    }
    #[derive(serde::Deserialize)]
    struct Variant {
        #[serde(default)]
        files: Vec<File>,
    }
    #[derive(serde::Deserialize)]
    struct File {
        url: String,
        sha512: Option<String>,
        sha256: Option<String>,
        sha1: Option<String>,
        md5: Option<String>,
    }
    let Ok(module) = serde_json::from_slice::<Module>(body) else {
        return Vec::new();
    };
    let dir = &path[..path.rfind('/').map_or(0, |at| at + 1)];
    let mut out = Vec::new();
    for file in module.variants.into_iter().flat_map(|v| v.files) {
        if file.url.contains("..") || file.url.starts_with('/') || file.url.contains("://") {
            continue;
        }
        let strongest = [
            (Algo::Sha512, &file.sha512),
            (Algo::Sha256, &file.sha256),
            (Algo::Sha1, &file.sha1),
            (Algo::Md5, &file.md5),
        ]
        .into_iter()
        .find_map(|(algo, hex)| Declared::from_hex(algo, hex.as_deref()?));
        if let Some(declared) = strongest {
            out.push((format!("{dir}{}", file.url), declared));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

impl Packages for Maven {
    fn osv_ecosystem(&self) -> Option<&'static str> {
        Some("Maven")
    }

    fn compare_versions(&self, a: &str, b: &str) -> Option<std::cmp::Ordering> {
        Some(version(a).cmp(&version(b)))
    }

    /// Maven ranges (`[1.0,2.0)`, `(,1.0],[1.2,)`, `[1.5]`); a bare version
    /// is exactly that version.
    fn parse_versions(&self, text: &str) -> Result<VersionSpec, String> {
        interval::parse(text, version)
            .map(VersionSpec::new)
            .map_err(|e| format!("{text:?} is not a Maven version range: {e}"))
    }

    /// `group:artifact` and the version directory.
    fn artifact(&self, path: &str) -> Option<Artifact> {
        let base = split_checksum(path).map_or(path, |(base, _)| base);
        let c = coordinates(base)?;
        Some(Artifact {
            name: c.package(),
            version: c.version.to_string(),
            file: package::file_name(c.file)?,
        })
    }

    /// Artifact-level `maven-metadata.xml`: `group/…/artifact/maven-metadata.xml`.
    fn document(&self, path: &str) -> Option<String> {
        let dir = path.strip_suffix("/maven-metadata.xml")?;
        let (group, artifact) = dir.rsplit_once('/')?;
        let valid = !group.is_empty() && !artifact.is_empty() && !artifact.ends_with("-SNAPSHOT");
        valid.then(|| format!("{}:{artifact}", group.replace('/', ".")))
    }

    fn time_source(&self, artifact: &Artifact) -> Option<TimeSource> {
        let (group, name) = artifact.name.split_once(':')?;
        let v = &artifact.version;
        Some(TimeSource {
            document: format!("{}/{name}/{v}/{name}-{v}.pom", group.replace('.', "/")),
            suffix: "",
            key: TimeKey::LastModified,
        })
    }

    fn dated_versions(&self, name: &str, body: &[u8]) -> Vec<Artifact> {
        let mut versions = metadata_versions(body);
        versions.sort_by_cached_key(|v| std::cmp::Reverse(version(v)));
        versions
            .into_iter()
            .map(|version| Artifact {
                name: name.to_string(),
                file: String::new(),
                version,
            })
            .collect()
    }

    fn filter(
        &self,
        judge: &Judge,
        name: &str,
        body: &[u8],
        times: &HashMap<String, i64>,
        _suffix: &str,
    ) -> Filtered {
        filter_metadata(judge, name, body, times)
    }

    /// mvn and Gradle print a failed transfer's status line, not its body.
    fn reason_in_status_line(&self) -> bool {
        true
    }
}

fn version(text: &str) -> ComparableVersion {
    ComparableVersion::from_str(text).unwrap_or_else(|never| match never {})
}

/// The `<versioning><versions><version>`s of a `maven-metadata.xml`.
fn metadata_versions(body: &[u8]) -> Vec<String> {
    let mut reader = quick_xml::Reader::from_reader(body);
    let (mut buf, mut path, mut out) = (Vec::new(), Vec::<Vec<u8>>::new(), Vec::new());
    loop {
        match reader.read_event_into(&mut buf) {
            Ok(Event::Start(e)) => path.push(e.name().as_ref().to_vec()),
            Ok(Event::End(_)) => {
                path.pop();
            }
            Ok(Event::Text(t)) if in_versions(&path) => {
                out.push(String::from_utf8_lossy(&t).trim().to_string())
            }
            Ok(Event::Eof) | Err(_) => break,
            Ok(_) => {}
        }
        buf.clear();
    }
    out
}

fn in_versions(path: &[Vec<u8>]) -> bool {
    path.len() == 4 && path[1] == b"versioning" && path[2] == b"versions" && path[3] == b"version"
}

/// The metadata without the versions `judge` refuses, `<latest>` and
/// `<release>` recomputed from the versions left.
fn filter_metadata(
    judge: &Judge,
    name: &str,
    body: &[u8],
    times: &HashMap<String, i64>,
) -> Filtered {
    let versions = metadata_versions(body);
    let refused: Vec<(&String, String)> = versions
        .iter()
        .filter_map(|v| Some((v, judge.refusal(name, v, times.get(v).copied())?)))
        .collect();
    if refused.is_empty() {
        return Filtered::Unchanged;
    }
    let left: Vec<&String> = versions
        .iter()
        .filter(|v| !refused.iter().any(|(r, _)| r == v))
        .collect();
    if left.is_empty() {
        let newest = refused.iter().max_by_key(|(v, _)| version(v));
        return Filtered::Refused(newest.map(|(_, r)| r.clone()).unwrap_or_default());
    }
    let latest = left.iter().max_by_key(|v| version(v)).map(|v| v.as_str());
    let release = left
        .iter()
        .filter(|v| !v.ends_with("-SNAPSHOT"))
        .max_by_key(|v| version(v))
        .map(|v| v.as_str());
    match rewrite_metadata(body, &left, latest, release) {
        Some(out) => Filtered::Changed(out),
        None => Filtered::Unchanged,
    }
}

/// `body` with only `keep` in `<versions>` and `<latest>`/`<release>` set
/// (dropped when there is none); the whitespace before a dropped element
/// goes with it.
fn rewrite_metadata(
    body: &[u8],
    keep: &[&String],
    latest: Option<&str>,
    release: Option<&str>,
) -> Option<Vec<u8>> {
    let mut reader = quick_xml::Reader::from_reader(body);
    let mut writer = quick_xml::Writer::new(Vec::with_capacity(body.len()));
    let (mut buf, mut path) = (Vec::new(), Vec::<Vec<u8>>::new());
    // Whitespace held until it is known whether the element after it stays.
    let mut pending: Vec<Event<'static>> = Vec::new();
    // An element being read whole before it is kept, replaced or dropped.
    let mut element: Option<(Vec<Event<'static>>, String)> = None;
    loop {
        let event = reader.read_event_into(&mut buf).ok()?.into_owned();
        buf.clear();
        if matches!(event, Event::Eof) {
            break;
        }
        if let Some((events, text)) = &mut element {
            if let Event::Text(t) = &event {
                text.push_str(&String::from_utf8_lossy(t));
            }
            let end = matches!(event, Event::End(_));
            events.push(event);
            if !end {
                continue;
            }
            let name = path.pop().unwrap_or_default();
            let (events, text) = element.take().unwrap_or_default();
            let replacement = match name.as_slice() {
                b"version" => keep.iter().any(|k| **k == text.trim()).then_some(None),
                b"latest" => latest.map(Some),
                _ => release.map(Some),
            };
            match replacement {
                None => pending.clear(),
                Some(value) => {
                    for e in pending.drain(..) {
                        writer.write_event(e).ok()?;
                    }
                    match value {
                        None => {
                            for e in events {
                                writer.write_event(e).ok()?;
                            }
                        }
                        Some(value) => {
                            let (start, end) = (events.first()?.clone(), events.last()?.clone());
                            writer.write_event(start).ok()?;
                            writer
                                .write_event(Event::Text(BytesText::new(value)))
                                .ok()?;
                            writer.write_event(end).ok()?;
                        }
                    }
                }
            }
            continue;
        }
        match &event {
            Event::Start(e) => {
                path.push(e.name().as_ref().to_vec());
                if replaceable(&path) {
                    element = Some((vec![event], String::new()));
                    continue;
                }
            }
            Event::End(_) => {
                path.pop();
            }
            Event::Text(t) if t.iter().all(u8::is_ascii_whitespace) => {
                pending.push(event);
                continue;
            }
            _ => {}
        }
        for e in pending.drain(..) {
            writer.write_event(e).ok()?;
        }
        writer.write_event(event).ok()?;
    }
    for e in pending {
        writer.write_event(e).ok()?;
    }
    Some(writer.into_inner())
}

/// The elements the filter keeps, replaces or drops: each `<version>` of
/// `<versions>`, `<latest>` and `<release>`.
fn replaceable(path: &[Vec<u8>]) -> bool {
    in_versions(path)
        || (path.len() == 3
            && path[1] == b"versioning"
            && (path[2] == b"latest" || path[2] == b"release"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::conformance::{check_rules, guard, Class, Declares, Expect, Filters, Rows};

    const G: &str = "org/example/lib";

    const METADATA: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>
<metadata>
  <groupId>org.example</groupId>
  <artifactId>lib</artifactId>
  <versioning>
    <latest>2.0-SNAPSHOT</latest>
    <release>1.1</release>
    <versions>
      <version>1.0</version>
      <version>1.1</version>
      <version>2.0-SNAPSHOT</version>
    </versions>
    <lastUpdated>20240101000000</lastUpdated>
  </versioning>
</metadata>
";

    pub(super) fn rows() -> Rows {
        let sha1 = "0123456789abcdef0123456789abcdef01234567";
        let module = serde_json::json!({"formatVersion": "1.1", "variants": [
            {"name": "apiElements", "files": [{"name": "lib-1.0.jar", "url": "lib-1.0.jar", "size": 3,
              "sha512": "ab".repeat(64), "sha256": "cd".repeat(32), "sha1": sha1, "md5": "ef".repeat(16)}]},
            {"name": "runtimeElements", "files": [{"name": "lib-1.0.jar", "url": "lib-1.0.jar", "sha1": sha1},
              {"name": "evil", "url": "../../other/x.jar", "sha1": sha1}]},
        ]});
        Rows {
            paths: vec![
                ("org/example/lib/1.0/lib-1.0.jar", Class::Immutable),
                ("org/example/lib/1.0/lib-1.0.pom", Class::Immutable),
                ("org/example/lib/1.0/lib-1.0-sources.jar", Class::Immutable),
                ("org/example/lib/1.0/lib-1.0.jar.sha1", Class::Immutable),
                ("org/example/lib/1.0/lib-1.0.module", Class::Immutable),
                ("org/example/lib/1.0/lib-1.0.jar.asc", Class::Immutable),
                (
                    "org/example/lib/2.0-SNAPSHOT/lib-2.0-20240101.123456-3.jar",
                    Class::Immutable,
                ),
                (
                    "org/example/lib/2.0-SNAPSHOT/lib-2.0-20240101.123456-3-tests.jar",
                    Class::Immutable,
                ),
                (
                    "org/example/lib/2.0-SNAPSHOT/lib-2.0-SNAPSHOT.jar",
                    Class::Mutable,
                ),
                (
                    "org/example/lib/2.0-SNAPSHOT/maven-metadata.xml",
                    Class::Mutable,
                ),
                ("org/example/lib/maven-metadata.xml", Class::Mutable),
                ("org/example/lib/maven-metadata.xml.sha1", Class::Mutable),
                (
                    "org/apache/maven/plugins/maven-metadata.xml",
                    Class::Mutable,
                ),
                ("archetype-catalog.xml", Class::Mutable),
                ("org/example/lib/1.0/other-1.0.jar", Class::Mutable),
                ("lib-1.0.jar", Class::Mutable),
            ],
            artifacts: vec![
                (
                    "org/example/lib/1.0/lib-1.0.jar",
                    Some(("org.example:lib", "1.0")),
                ),
                (
                    "org/example/lib/1.0/lib-1.0.jar.sha1",
                    Some(("org.example:lib", "1.0")),
                ),
                (
                    "org/example/lib/2.0-SNAPSHOT/lib-2.0-20240101.123456-3.jar",
                    Some(("org.example:lib", "2.0-SNAPSHOT")),
                ),
                ("org/example/lib/maven-metadata.xml", None),
            ],
            documents: vec![
                (
                    "org/example/lib/maven-metadata.xml",
                    Some("org.example:lib"),
                ),
                ("org/example/lib/2.0-SNAPSHOT/maven-metadata.xml", None),
                ("org/example/lib/1.0/lib-1.0.pom", None),
            ],
            keys: vec![
                (
                    "org/example/lib/1.0/lib-1.0.jar",
                    Some("org/example/lib/1.0/lib-1.0.jar"),
                ),
                ("org/example/lib/1.0/lib-1.0.jar.sha1", None),
                ("org/example/lib/maven-metadata.xml", None),
                ("org/example/lib/2.0-SNAPSHOT/lib-2.0-SNAPSHOT.jar", None),
            ],
            declares: vec![Declares {
                mirrors: &["https://repo.maven.apache.org/maven2"],
                files: &[],
                path: "org/example/lib/1.0/lib-1.0.module",
                body: module.to_string().into_bytes(),
                declared: vec![(
                    format!("{G}/1.0/lib-1.0.jar"),
                    format!("sha512:{}", "ab".repeat(64)),
                )],
            }],
            filters: vec![Filters {
                deny: &["org.example:lib@[1.1,)"],
                name: "org.example:lib",
                suffix: "",
                body: METADATA.as_bytes().to_vec(),
                expected: Expect::Changed("<release>1.0</release>", "1.1"),
            }],
            ..Rows::default()
        }
    }

    #[test]
    fn sidecars_name_their_file_and_declare_its_first_token() {
        assert_eq!(
            checksum_of("a/b/1.0/b-1.0.jar.sha256"),
            Some(("a/b/1.0/b-1.0.jar", Algo::Sha256))
        );
        assert_eq!(checksum_of("a/b/1.0/b-1.0.jar"), None);
        let mirrors = [url::Url::parse("https://repo.example/maven2").unwrap()];
        let sidecar = "a/b/1.0/b-1.0.jar.sha1";
        let document = Document::new("r", &mirrors, &[], sidecar);
        let learned = Maven.learn(
            &document,
            b"0123456789ABCDEF0123456789abcdef01234567  b-1.0.jar\n",
        );
        assert_eq!(learned.len(), 1);
        assert_eq!(learned[0].0, "a/b/1.0/b-1.0.jar");
        assert_eq!(learned[0].1.algo(), Algo::Sha1);
        assert!(Maven.learn(&document, b"not hex").is_empty());
        assert_eq!(
            Maven.declared_by("a/b/1.0/b-1.0.jar"),
            [
                "a/b/1.0/b-1.0.jar.sha512",
                "a/b/1.0/b-1.0.jar.sha1",
                "a/b/1.0/b-1.0.jar.sha256",
                "a/b/1.0/b-1.0.jar.md5"
            ]
        );
        assert!(Maven.declared_by("a/b/maven-metadata.xml").is_empty());
    }

    #[test]
    fn snapshots_and_releases_are_told_apart() {
        assert_eq!(is_snapshot("a/b/1.0/b-1.0.jar"), Some(false));
        assert_eq!(is_snapshot("a/b/1.0/b-1.0.jar.sha1"), Some(false));
        assert_eq!(
            is_snapshot("a/b/1.0-SNAPSHOT/b-1.0-SNAPSHOT.pom"),
            Some(true)
        );
        assert_eq!(
            is_snapshot("a/b/1.0-SNAPSHOT/b-1.0-20240101.123456-1.jar"),
            Some(true)
        );
        assert_eq!(
            is_snapshot("a/b/1.0-SNAPSHOT/maven-metadata.xml"),
            Some(true)
        );
        assert_eq!(is_snapshot("a/b/maven-metadata.xml"), None);
        assert!(crate::kind::VersionPolicy::Releases.allows(None));
        assert!(!crate::kind::VersionPolicy::Releases.allows(Some(true)));
        assert!(!crate::kind::VersionPolicy::Snapshots.allows(Some(false)));
    }

    #[test]
    fn rules_read_maven_ranges() {
        check_rules(
            &Maven,
            &[
                ("org.example:lib@[1.0,2.0)", "org.example:lib", "1.5", true),
                ("org.example:lib@[1.0,2.0)", "org.example:lib", "2.0", false),
                (
                    "org.example:lib@[1.0,2.0)",
                    "org.example:lib",
                    "2.0-alpha-1",
                    true,
                ),
                ("org.example:lib@(,1.0]", "org.example:lib", "1.0", true),
                ("org.example:lib@(,1.0]", "org.example:lib", "1.0.1", false),
                ("org.example:lib@[1.2]", "org.example:lib", "1.2.0", true),
                ("org.example:lib@1.2", "org.example:lib", "1.3", false),
                (
                    "org.example:lib@(,1.0],[1.2,)",
                    "org.example:lib",
                    "1.1",
                    false,
                ),
                (
                    "org.example:lib@(,1.0],[1.2,)",
                    "org.example:lib",
                    "1.5",
                    true,
                ),
                ("org.example:*", "org.example:other", "9", true),
            ],
            ("org.example:lib@[1.0,2.0", "Maven version range"),
        );
        for bad in ["[1,2,3]", "1.0,2.0", "[1.0,2.0),"] {
            assert!(Maven.parse_versions(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn metadata_loses_refused_versions_and_recomputes_latest_and_release() {
        let g = guard("maven", None, &["org.example:lib@2.0-SNAPSHOT"]);
        let judge = Judge::new(&g, &Maven, 0);
        let Filtered::Changed(out) = Maven.filter(
            &judge,
            "org.example:lib",
            METADATA.as_bytes(),
            &HashMap::new(),
            "",
        ) else {
            panic!("not changed")
        };
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("<latest>1.1</latest>"), "{out}");
        assert!(out.contains("<release>1.1</release>"), "{out}");
        assert!(!out.contains("2.0-SNAPSHOT"), "{out}");
        assert!(
            out.contains(
                "      <version>1.0</version>\n      <version>1.1</version>\n    </versions>"
            ),
            "{out}"
        );
        assert_eq!(metadata_versions(&out.into_bytes()), ["1.0", "1.1"]);
        // Every version refused: the refusal, naming the newest.
        let g = guard("maven", None, &["org.example:lib"]);
        let judge = Judge::new(&g, &Maven, 0);
        match Maven.filter(
            &judge,
            "org.example:lib",
            METADATA.as_bytes(),
            &HashMap::new(),
            "",
        ) {
            Filtered::Refused(reason) => assert!(reason.contains("2.0-SNAPSHOT"), "{reason}"),
            other => panic!("{other:?}"),
        }
        // Only snapshots left: no release.
        let g = guard("maven", None, &["org.example:lib@[1.0,1.1]"]);
        let judge = Judge::new(&g, &Maven, 0);
        let Filtered::Changed(out) = Maven.filter(
            &judge,
            "org.example:lib",
            METADATA.as_bytes(),
            &HashMap::new(),
            "",
        ) else {
            panic!("not changed")
        };
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains("<release>"), "{out}");
        assert!(out.contains("<latest>2.0-SNAPSHOT</latest>"), "{out}");
    }

    #[test]
    fn versions_are_dated_newest_first_by_their_pom() {
        let dated = Maven.dated_versions("org.example:lib", METADATA.as_bytes());
        let versions: Vec<&str> = dated.iter().map(|a| a.version.as_str()).collect();
        assert_eq!(versions, ["2.0-SNAPSHOT", "1.1", "1.0"]);
        let source = Maven.time_source(&dated[1]).unwrap();
        assert_eq!(source.document, "org/example/lib/1.1/lib-1.1.pom");
        assert_eq!(source.key, TimeKey::LastModified);
    }
}
