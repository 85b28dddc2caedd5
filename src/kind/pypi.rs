//! pypi: the simple index (PEP 503 HTML and PEP 691 JSON, two variants by
//! `Accept`) and the JSON API (`pypi/{project}/json`), rewritten to point
//! through the proxy at the files host (`~files/`, files.pythonhosted.org by
//! default); wheels, sdists and `.metadata` files immutable; `#sha256=`
//! fragments, PEP 691 `hashes` and the JSON API's `digests` as declared
//! digests; PEP 503 names, PEP 440 specifiers, PEP 700 upload times; pages
//! filtered of refused files. pip shows a refusal only by its status line.

use std::collections::HashMap;

use axum::http::HeaderMap;
use serde_json::Value;

use super::declared::{Algo, Declared, Document};
use super::guard::{parse_time, Filtered, Judge, VersionSet, VersionSpec};
use super::package::{self, Artifact};
use super::{
    Digests, Ecosystem, Packages, Plan, Rewritten, TimeKey, TimeSource, TimesFrom, Variant,
    FILES_PREFIX,
};

pub struct Pypi;

const HTML: Variant = Variant {
    suffix: "html",
    accept: "application/vnd.pypi.simple.v1+html, text/html;q=0.9",
};
const JSON: Variant = Variant {
    suffix: "json",
    accept: "application/vnd.pypi.simple.v1+json",
};

impl Ecosystem for Pypi {
    fn name(&self) -> &'static str {
        "pypi"
    }

    /// Wheels, sdists and `.metadata` files immutable; the simple pages
    /// (HTML or JSON by `Accept`) and the JSON API rewritten.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        Plan {
            immutable: is_immutable(path),
            document: Rewritten::when(is_document(path)),
            variants: if path.starts_with("simple/") {
                &[HTML, JSON]
            } else {
                &[]
            },
            ..Plan::default()
        }
    }

    fn default_files(&self) -> &'static [&'static str] {
        &["https://files.pythonhosted.org"]
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
    path.starts_with("packages/")
        || [".whl", ".tar.gz", ".zip", ".tar.bz2", ".egg", ".metadata"]
            .iter()
            .any(|ext| path.ends_with(ext))
}

/// The simple pages, and the JSON API (`pypi/{project}/json`,
/// `pypi/{project}/{version}/json`), whose `urls` name the files host.
fn is_document(path: &str) -> bool {
    path == "simple/"
        || path.starts_with("simple/")
        || (path.starts_with("pypi/") && path.ends_with("/json"))
}

impl Digests for Pypi {
    /// Files, and their PEP 658 `.metadata` files (which a page declares
    /// with `data-core-metadata`, PEP 691 with `core-metadata`).
    fn artifact_key(&self, path: &str) -> Option<String> {
        (path.starts_with(FILES_PREFIX) || is_immutable(path))
            .then(|| super::declared::canonical(path))
    }

    fn declares(&self, path: &str) -> bool {
        is_document(path)
    }

    fn learn(&self, document: &Document<'_>, body: &[u8]) -> Vec<(String, Declared)> {
        match serde_json::from_slice::<Value>(body) {
            Ok(json) => learn_json(&json, document),
            Err(_) => learn_html(&String::from_utf8_lossy(body), document),
        }
    }
}

impl Packages for Pypi {
    fn osv_ecosystem(&self) -> Option<&'static str> {
        Some("PyPI")
    }

    fn compare_versions(&self, a: &str, b: &str) -> Option<std::cmp::Ordering> {
        Some(
            a.parse::<pep440_rs::Version>()
                .ok()?
                .cmp(&b.parse::<pep440_rs::Version>().ok()?),
        )
    }

    /// PEP 503: lower case, runs of `-`, `_`, `.` as one `-`.
    fn normalise(&self, name: &str) -> String {
        let mut out = String::with_capacity(name.len());
        for c in name.chars() {
            if matches!(c, '-' | '_' | '.') {
                if !out.ends_with('-') {
                    out.push('-');
                }
            } else {
                out.push(c.to_ascii_lowercase());
            }
        }
        out
    }

    /// File names spell the project their own way (`mc_alpha`).
    fn shown_name<'a>(&self, _spelt: &'a str, normalised: &'a str) -> &'a str {
        normalised
    }

    /// PEP 440 specifiers (`>=2,<3`, `==1.0.*`; a bare `1.0` is `==1.0`).
    fn parse_versions(&self, text: &str) -> Result<VersionSpec, String> {
        let text = if text.parse::<pep440_rs::Version>().is_ok() {
            format!("=={text}")
        } else {
            text.to_string()
        };
        text.parse::<pep440_rs::VersionSpecifiers>()
            .map(|s| VersionSpec::new(Specifiers(s)))
            .map_err(|e| format!("{text:?} is not a PEP 440 version specifier: {e}"))
    }

    fn artifact(&self, path: &str) -> Option<Artifact> {
        file(package::file_name(path)?)
    }

    /// A simple page (`simple/{project}/`), or the JSON API's project page
    /// (`pypi/{project}/json`).
    fn document(&self, path: &str) -> Option<String> {
        let project = match path.strip_prefix("simple/") {
            Some(rest) => rest.strip_suffix('/')?,
            None => path.strip_prefix("pypi/")?.strip_suffix("/json")?,
        };
        (!project.is_empty() && !project.contains('/')).then(|| project.to_string())
    }

    /// PEP 700 `upload-time`, by file name, from a PEP 691 page.
    fn publish_times(&self, body: &[u8]) -> HashMap<String, i64> {
        let mut times = HashMap::new();
        if let Ok(doc) = serde_json::from_slice::<serde_json::Value>(body) {
            for file in doc["files"].as_array().into_iter().flatten() {
                let at = file["upload-time"].as_str().and_then(parse_time);
                if let (Some(name), Some(ms)) = (file["filename"].as_str(), at) {
                    times.insert(name.to_string(), ms);
                }
            }
        }
        times
    }

    fn time_source(&self, artifact: &Artifact) -> Option<TimeSource> {
        Some(TimeSource {
            document: page_path(&self.normalise(&artifact.name)),
            suffix: JSON.suffix,
            key: TimeKey::Listed(artifact.file.clone()),
        })
    }

    /// An HTML page has no upload times: the JSON page's.
    fn times_from(&self, _name: &str, suffix: &str) -> Option<TimesFrom> {
        (suffix == HTML.suffix).then_some(TimesFrom::Variant(JSON.suffix))
    }

    /// Refused files go (HTML: their anchors); when nothing would be left
    /// the page is served as it is, because pip hides a failed index page
    /// unless run with `-v` (and skips yanked files unless pinned with
    /// `==`), but prints the 403 of a download with its reason phrase.
    fn filter(
        &self,
        judge: &Judge,
        name: &str,
        body: &[u8],
        times: &HashMap<String, i64>,
        suffix: &str,
    ) -> Filtered {
        if suffix == HTML.suffix {
            match std::str::from_utf8(body) {
                Ok(text) => filter_html(judge, name, text, times),
                Err(_) => Filtered::Unchanged,
            }
        } else if suffix == JSON.suffix {
            filter_json(judge, name, body)
        } else {
            filter_api(judge, name, body)
        }
    }

    fn reason_in_status_line(&self) -> bool {
        true
    }
}

struct Specifiers(pep440_rs::VersionSpecifiers);

impl VersionSet for Specifiers {
    fn contains(&self, version: &str) -> bool {
        version
            .parse::<pep440_rs::Version>()
            .is_ok_and(|v| self.0.contains(&v))
    }
}

/// A pypi project's simple page (PEP 503 name).
pub fn page_path(normalised_name: &str) -> String {
    format!("simple/{normalised_name}/")
}

/// Wheels (`{name}-{version}(-{build})?-{py}-{abi}-{platform}.whl`) and
/// sdists (`{name}-{version}.tar.gz`, `.zip`, …). Not `.metadata` files:
/// those describe a file, and pip reads them before choosing it.
fn file(file: String) -> Option<Artifact> {
    if let Some(stem) = file.strip_suffix(".whl") {
        let mut parts = stem.split('-');
        let (name, version) = (parts.next()?, parts.next()?);
        return (parts.count() >= 3).then(|| Artifact {
            name: name.to_string(),
            version: version.to_string(),
            file: file.clone(),
        });
    }
    let stem = [".tar.gz", ".zip", ".tar.bz2", ".tgz", ".egg"]
        .iter()
        .find_map(|ext| file.strip_suffix(ext))?;
    // The version is after the last `-` that a digit follows (old sdists
    // keep dashes in the name: `python-dateutil-2.8.2.tar.gz`).
    let at = stem
        .match_indices('-')
        .map(|(at, _)| at)
        .rfind(|&at| stem[at + 1..].starts_with(|c: char| c.is_ascii_digit()))?;
    Some(Artifact {
        name: stem[..at].to_string(),
        version: stem[at + 1..].to_string(),
        file: file.clone(),
    })
}

/// Each anchor's `#sha256=` for its file, and its PEP 714
/// `data-core-metadata` (or PEP 658 `data-dist-info-metadata`) `sha256=`
/// for the file's `.metadata`.
fn learn_html(html: &str, document: &Document<'_>) -> Vec<(String, Declared)> {
    let mut out = Vec::new();
    for tag in html.split("<a").skip(1) {
        let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
        let Some(href) = attribute(tag, "href") else {
            continue;
        };
        let href = href.replace("&amp;", "&");
        let (link, fragment) = href.split_once('#').unwrap_or((&href, ""));
        let Some(path) = document.path_of(link) else {
            continue;
        };
        let sha256 = |value: &str| Declared::from_hex(Algo::Sha256, value.strip_prefix("sha256=")?);
        let metadata = attribute(tag, "data-core-metadata")
            .or_else(|| attribute(tag, "data-dist-info-metadata"))
            .and_then(sha256);
        if let Some(declared) = metadata {
            out.push((format!("{path}.metadata"), declared));
        }
        if let Some(declared) = sha256(fragment) {
            out.push((path, declared));
        }
    }
    out
}

/// The value of the attribute `name` of an HTML tag's text, quoted with
/// `"` or `'`.
fn attribute<'t>(tag: &'t str, name: &str) -> Option<&'t str> {
    let mut rest = tag;
    loop {
        let at = rest.find(name)?;
        let before = rest[..at].chars().next_back();
        rest = &rest[at + name.len()..];
        if !before.is_some_and(char::is_whitespace) {
            continue;
        }
        let Some(value) = rest.strip_prefix('=') else {
            continue;
        };
        let quote = value.chars().next().filter(|c| *c == '"' || *c == '\'')?;
        let value = &value[1..];
        return value.find(quote).map(|end| &value[..end]);
    }
}

fn learn_json(json: &serde_json::Value, document: &Document<'_>) -> Vec<(String, Declared)> {
    // PEP 691 (`files[].hashes`) and the JSON API (`urls[].digests`,
    // `releases.*[].digests`).
    let files = json["files"].as_array().into_iter().flatten();
    let urls = json["urls"].as_array().into_iter().flatten();
    let releases = json["releases"]
        .as_object()
        .into_iter()
        .flat_map(|r| r.values())
        .filter_map(|v| v.as_array())
        .flatten();
    files
        .chain(urls)
        .chain(releases)
        .flat_map(|file| {
            let path = file["url"].as_str().and_then(|url| document.path_of(url));
            let sha256 = |hashes: Option<&Value>| {
                Declared::from_hex(Algo::Sha256, hashes?.get("sha256")?.as_str()?)
            };
            let hashes = file.get("hashes").or_else(|| file.get("digests"));
            // PEP 691's `core-metadata` (`dist-info-metadata` before PEP 714):
            // `{"sha256": …}` for the file's `.metadata`, or just `true`.
            let metadata = file
                .get("core-metadata")
                .or_else(|| file.get("dist-info-metadata"));
            let own = path.clone().zip(sha256(hashes));
            let of_metadata = path.map(|p| format!("{p}.metadata")).zip(sha256(metadata));
            own.into_iter().chain(of_metadata)
        })
        .collect()
}

/// PEP 691 pages: refused files go; a file the quarantine refuses stays,
/// marked yanked (PEP 592) with the reason, so pip passes over it for a
/// range and picks it only for an exact `==` pin, prints the reason and
/// gets the download's 403.
fn filter_json(judge: &Judge, name: &str, body: &[u8]) -> Filtered {
    let Ok(mut doc) = serde_json::from_slice::<Value>(body) else {
        return Filtered::Unchanged;
    };
    let Some(files) = doc.get_mut("files").and_then(Value::as_array_mut) else {
        return Filtered::Unchanged;
    };
    let mut verdicts = Vec::with_capacity(files.len());
    for file in files.iter() {
        let artifact = file["filename"].as_str().and_then(|f| Pypi.artifact(f));
        let published = file["upload-time"].as_str().and_then(parse_time);
        verdicts.push(artifact.and_then(|a| judge.verdict(name, &a.version, published)));
    }
    let n_refused = verdicts.iter().filter(|v| v.is_some()).count();
    if n_refused == 0 {
        return Filtered::Unchanged;
    }
    if n_refused == verdicts.len() {
        // Nothing left: the download's 403 tells pip why.
        return Filtered::Unchanged;
    }
    for (file, verdict) in files.iter_mut().zip(&verdicts) {
        if let Some((reason, Some(_))) = verdict {
            file["yanked"] = Value::String(reason.clone());
        }
    }
    let mut verdict = verdicts.iter();
    files.retain(|_| {
        verdict
            .next()
            .is_some_and(|v| v.as_ref().is_none_or(|(_, advisory)| advisory.is_some()))
    });
    // API 1.1's `versions`: only those with a file left.
    let left: Vec<String> = files
        .iter()
        .filter_map(|f| f["filename"].as_str())
        .filter_map(|f| Pypi.artifact(f))
        .map(|a| a.version)
        .collect();
    if let Some(versions) = doc.get_mut("versions").and_then(Value::as_array_mut) {
        versions.retain(|v| v.as_str().is_some_and(|v| left.iter().any(|l| l == v)));
    }
    Filtered::Changed(serde_json::to_vec(&doc).unwrap_or_else(|_| body.to_vec()))
}

/// The JSON API's project page (`pypi/{project}/json`): the refused
/// versions out of `releases` (each dated by its earliest file's
/// `upload_time_iso_8601`), and `urls` emptied when the version `info`
/// describes is refused (its files are).
fn filter_api(judge: &Judge, name: &str, body: &[u8]) -> Filtered {
    let Ok(mut doc) = serde_json::from_slice::<Value>(body) else {
        return Filtered::Unchanged;
    };
    let refused = |version: &str, files: &Value| {
        let published = files
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["upload_time_iso_8601"].as_str().and_then(parse_time))
            .min();
        judge.refusal(name, version, published).is_some()
    };
    let mut changed = false;
    if let Some(releases) = doc.get_mut("releases").and_then(Value::as_object_mut) {
        let before = releases.len();
        releases.retain(|version, files| !refused(version, files));
        changed = releases.len() != before;
    }
    let current = doc["info"]["version"].as_str().map(str::to_string);
    if current.is_some_and(|version| refused(&version, &doc["urls"])) {
        doc["urls"] = Value::Array(Vec::new());
        changed = true;
    }
    if !changed {
        return Filtered::Unchanged;
    }
    Filtered::Changed(serde_json::to_vec(&doc).unwrap_or_else(|_| body.to_vec()))
}

/// One `<a …>…</a>` of a simple page: its byte range and the file it links.
struct Anchor {
    start: usize,
    /// Just after `</a>` (and a `<br/>` right behind it).
    end: usize,
    file: String,
}

fn anchors(text: &str) -> Vec<Anchor> {
    let lower = text.to_ascii_lowercase();
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = lower[at..].find("<a ") {
        let start = at + offset;
        let Some(close) = lower[start..].find("</a>") else {
            break;
        };
        let mut end = start + close + "</a>".len();
        for br in ["<br/>", "<br />", "<br>"] {
            if lower[end..].starts_with(br) {
                end += br.len();
                break;
            }
        }
        let tag_end = lower[start..end].find('>').map_or(end, |e| start + e);
        let href = lower[start..tag_end].find("href=").and_then(|h| {
            let value = &text[start + h + 5..tag_end];
            let quote = value.chars().next().filter(|c| *c == '"' || *c == '\'')?;
            value[1..].split(quote).next()
        });
        if let Some(href) = href {
            let path = href.split(['#', '?']).next().unwrap_or_default();
            let file = path.rsplit('/').next().unwrap_or_default();
            found.push(Anchor {
                start,
                end,
                file: percent_encoding::percent_decode_str(file)
                    .decode_utf8_lossy()
                    .into_owned(),
            });
        }
        at = end;
    }
    found
}

/// Simple pages: the anchors of refused files go; a file the quarantine
/// refuses keeps its anchor, marked `data-yanked` with the reason (as
/// [`filter_json`] marks it).
fn filter_html(judge: &Judge, name: &str, text: &str, times: &HashMap<String, i64>) -> Filtered {
    let all = anchors(text);
    let verdicts: Vec<(Anchor, Option<(String, bool)>)> = all
        .into_iter()
        .map(|a| {
            let verdict = Pypi.artifact(&a.file).and_then(|f| {
                let verdict = judge.verdict(name, &f.version, times.get(&a.file).copied());
                verdict.map(|(reason, advisory)| (reason, advisory.is_some()))
            });
            (a, verdict)
        })
        .collect();
    let n_refused = verdicts.iter().filter(|(_, v)| v.is_some()).count();
    if n_refused == 0 || n_refused == verdicts.len() {
        // Nothing refused, or nothing left: the download's 403 tells pip why.
        return Filtered::Unchanged;
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (anchor, verdict) in &verdicts {
        match verdict {
            Some((reason, true)) => {
                let open = anchor.start + "<a".len();
                out.push_str(&text[at..open]);
                out.push_str(&format!(" data-yanked=\"{}\"", attribute_value(reason)));
                at = open;
            }
            Some((_, false)) => {
                out.push_str(&text[at..anchor.start]);
                at = anchor.end;
            }
            None => {}
        }
    }
    out.push_str(&text[at..]);
    Filtered::Changed(out.into_bytes())
}

/// `text` as an HTML attribute value between double quotes.
fn attribute_value(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::conformance::{
        changed_json, check_rules, guard, iso, Class, Declares, Expect, Filters, Rewritten, Rows,
        DAY, NOW,
    };
    use serde_json::json;

    const A: &str = "aa00000000000000000000000000000000000000000000000000000000000000";
    const B: &str = "bb00000000000000000000000000000000000000000000000000000000000000";
    const FILES: &[&str] = &["https://files.pythonhosted.org"];

    pub(super) fn rows() -> Rows {
        let html = format!(
            r#"<a href="https://files.pythonhosted.org/packages/ab/six-1.0-py3-none-any.whl#sha256={A}">six</a>
<a href='../../packages/x/six-1.0.tar.gz#sha256={B}'>rel</a>
<a href="https://evil.example/six.whl#sha256={A}">evil</a>
<a href="https://files.pythonhosted.org/packages/no-hash.whl">none</a>"#
        );
        let json = json!({"files": [
            {"url": "https://files.pythonhosted.org/packages/ab/six.whl", "hashes": {"sha256": A}},
            {"url": "https://files.pythonhosted.org/packages/ab/six.zip", "hashes": {}},
        ]});
        let api = json!({"urls": [], "releases": {"1.0": [
            {"url": "https://files.pythonhosted.org/packages/cd/six.whl", "digests": {"sha256": B}}
        ]}});
        let declares = |path, body: String, declared: &[(&str, &str)]| Declares {
            mirrors: &["https://pypi.org"],
            files: FILES,
            path,
            body: body.into_bytes(),
            declared: declared
                .iter()
                .map(|(k, d)| (k.to_string(), format!("sha256:{d}")))
                .collect(),
        };
        Rows {
            paths: vec![
                ("simple/six/", Class::Document),
                ("~files/packages/ab/cd/six-1.16.0-py2.py3-none-any.whl", Class::Immutable),
                ("~files/packages/ab/six.whl.metadata", Class::Immutable),
                ("packages/ab/six-1.0.tar.gz", Class::Immutable),
                ("pypi/six/json", Class::Document),
                ("pypi/six/1.16.0/json", Class::Document),
            ],
            variants: vec![
                ("simple/six/", "", Some("html")),
                ("simple/six/", "text/html", Some("html")),
                ("simple/six/", "application/vnd.pypi.simple.v1+json", Some("json")),
                ("~files/packages/six.whl", "", None),
                ("pypi/six/json", "application/json", None),
            ],
            artifacts: vec![
                (
                    "~files/packages/ab/cd/Mc_Alpha-1.0-py3-none-any.whl",
                    Some(("Mc_Alpha", "1.0")),
                ),
                (
                    "~files/packages/x/pkg-2.0-1-cp311-cp311-linux_x86_64.whl",
                    Some(("pkg", "2.0")),
                ),
                ("packages/python-dateutil-2.8.2.tar.gz", Some(("python-dateutil", "2.8.2"))),
                ("packages/mc_alpha-1.0.zip", Some(("mc_alpha", "1.0"))),
                ("packages/mc_alpha-1.0-py3-none-any.whl.metadata", None),
                ("simple/mc-alpha/", None),
            ],
            documents: vec![
                ("simple/mc-alpha/", Some("mc-alpha")),
                ("simple/", None),
                ("pypi/six/json", Some("six")),
            ],
            keys: vec![
                ("~files/packages/t-2.0%2Bcpu.whl", Some("~files/packages/t-2.0+cpu.whl")),
                ("~files/packages/t-2.0+cpu.whl", Some("~files/packages/t-2.0+cpu.whl")),
                (
                    "~files/packages/ab/six.whl.metadata",
                    Some("~files/packages/ab/six.whl.metadata"),
                ),
                ("simple/six/", None),
            ],
            declares: vec![
                declares(
                    "simple/six/",
                    html,
                    &[
                        ("~files/packages/ab/six-1.0-py3-none-any.whl", A),
                        ("packages/x/six-1.0.tar.gz", B),
                    ],
                ),
                declares(
                    "simple/six/",
                    json.to_string(),
                    &[("~files/packages/ab/six.whl", A)],
                ),
                declares("pypi/six/json", api.to_string(), &[("~files/packages/cd/six.whl", B)]),
            ],
            rewrites: vec![Rewritten {
                mirrors: &["https://pypi.org"],
                files: FILES,
                path: "simple/six/",
                body: r#"<a href="https://files.pythonhosted.org/packages/a/six.whl#sha256=ab" data-dist-info-metadata="sha256=cd">six</a> <a href="https://files.pythonhosted.org.evil.com/x">evil</a>"#,
                expected: r#"<a href="http://proxy/r/~files/packages/a/six.whl#sha256=ab" data-dist-info-metadata="sha256=cd">six</a> <a href="https://files.pythonhosted.org.evil.com/x">evil</a>"#,
            }],
            filters: vec![Filters {
                deny: &["six@1.1"],
                name: "six",
                suffix: "html",
                body: b"<a href=\"http://f/six-1.0.tar.gz\">a</a><br/>\n<a href=\"http://f/six-1.1.tar.gz\">b</a><br/>\n".to_vec(),
                expected: Expect::Changed("six-1.0.tar.gz", "six-1.1.tar.gz"),
            }],
        }
    }

    #[test]
    fn pypi_pages_lose_refused_files_unless_none_would_be_left() {
        let g = guard("pypi", Some(7), &["mc-bad"]);
        let judge = Judge::new(&g, &Pypi, NOW);
        let page = json!({"meta": {"api-version": "1.1"}, "name": "mc-alpha", "versions": ["1.0", "1.1"], "files": [
            {"filename": "mc_alpha-1.0-py3-none-any.whl", "upload-time": iso(NOW - 60 * DAY)},
            {"filename": "mc_alpha-1.1-py3-none-any.whl", "upload-time": iso(NOW - DAY)},
            {"filename": "mc_alpha-1.1.tar.gz", "upload-time": iso(NOW - DAY)},
        ]});
        let body = serde_json::to_vec(&page).unwrap();
        let doc = changed_json(Pypi.filter(&judge, "mc-alpha", &body, &HashMap::new(), "json"));
        assert_eq!(doc["files"].as_array().unwrap().len(), 1);
        assert_eq!(doc["versions"], json!(["1.0"]));

        let html = "<html><body><a href=\"http://f/p/mc_alpha-1.0-py3-none-any.whl#sha256=aa\">a</a><br/>\n\
                    <A HREF='http://f/p/mc_alpha-1.1-py3-none-any.whl#sha256=bb' data-requires-python=\"&gt;=3\">b</a><br/>\n</body></html>";
        let times = Pypi.publish_times(&body);
        let Filtered::Changed(out) =
            Pypi.filter(&judge, "mc-alpha", html.as_bytes(), &times, "html")
        else {
            panic!()
        };
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains("mc_alpha-1.0-py3") && !out.contains("mc_alpha-1.1"),
            "{out}"
        );

        // Nothing would be left: the page as it is, and the download's 403 says why.
        let bad = json!({"name": "mc-bad", "files": [{"filename": "mc_bad-1.0.tar.gz"}]});
        let bad = serde_json::to_vec(&bad).unwrap();
        assert_eq!(
            Pypi.filter(&judge, "mc-bad", &bad, &HashMap::new(), "json"),
            Filtered::Unchanged
        );
        let html = "<a href=\"http://f/mc_bad-1.0.tar.gz\">x</a>";
        assert_eq!(
            Pypi.filter(&judge, "mc-bad", html.as_bytes(), &HashMap::new(), "html"),
            Filtered::Unchanged
        );
        assert!(judge.refusal("mc-bad", "1.0", None).is_some());
    }

    #[test]
    fn publish_times_come_from_pep_700_upload_times() {
        let pypi = br#"{"files": [{"filename": "a-1.0.tar.gz", "upload-time": "2020-01-02T00:00:00.123456Z"}, {"filename": "a-0.9.tar.gz"}]}"#;
        let times = Pypi.publish_times(pypi);
        assert_eq!(times.len(), 1);
        assert_eq!(
            times["a-1.0.tar.gz"],
            parse_time("2020-01-02T00:00:00.123Z").unwrap()
        );
        assert!(Pypi.publish_times(b"<html>not json</html>").is_empty());
        assert_eq!(page_path("mc-alpha"), "simple/mc-alpha/");
    }

    #[test]
    fn rules_read_pep_440_specifiers() {
        check_rules(
            &Pypi,
            &[
                ("Requests@>=2,<3", "requests", "2.31.0", true),
                ("requests@>=2,<3", "requests", "3.0", false),
                ("zope.interface@5.0", "zope-interface", "5.0.0", true),
                ("mc_*", "mc-alpha", "1.0", true),
            ],
            ("requests@>>2", "PEP 440"),
        );
    }
}
