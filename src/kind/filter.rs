//! Index documents with the refused versions taken out, at serve time (so a
//! config reload, or a release coming of age, needs no refetch): npm
//! packuments (full and abbreviated: `versions` and `time` entries go,
//! `dist-tags` move down to the newest version left), pypi simple pages (PEP
//! 691 JSON and HTML: the refused files go), cargo sparse index files (the
//! refused lines go).
//!
//! When nothing would be left, the client must still learn why: npm and
//! cargo get the refusal itself (a 403 whose reason they print), and a pypi
//! page is served as it is, because pip hides a failed index page unless
//! run with `-v` (and skips yanked files unless pinned with `==`), but
//! prints the 403 of a download with its reason phrase.

use std::collections::HashMap;

use serde_json::Value;

use super::guard::{parse_time, Judge};
use super::package;
use crate::config::RemoteKind;

/// What filtering did to a document.
#[derive(Debug, PartialEq, Eq)]
pub enum Filtered {
    /// Nothing refused: serve the bytes as they are.
    Unchanged,
    Changed(Vec<u8>),
    /// Every version refused: answer 403 with this reason.
    Refused(String),
}

/// Filters `body`, the document of package `name`. `times`: publish times
/// from the sibling document when `body` lacks them (npm's abbreviated
/// packument by version, a pypi HTML page by file name); `html`: a pypi
/// page in HTML rather than PEP 691 JSON.
pub fn filter(
    judge: &Judge,
    name: &str,
    body: &[u8],
    times: &HashMap<String, i64>,
    html: bool,
) -> Filtered {
    match judge.kind() {
        RemoteKind::Npm => npm(judge, name, body, times),
        RemoteKind::Pypi if html => match std::str::from_utf8(body) {
            Ok(text) => pypi_html(judge, name, text, times),
            Err(_) => Filtered::Unchanged,
        },
        RemoteKind::Pypi => pypi_json(judge, name, body),
        RemoteKind::Cargo => cargo(judge, body),
        _ => Filtered::Unchanged,
    }
}

fn npm(judge: &Judge, name: &str, body: &[u8], times: &HashMap<String, i64>) -> Filtered {
    let Ok(mut doc) = serde_json::from_slice::<Value>(body) else {
        return Filtered::Unchanged;
    };
    let own_times = doc.get("time").cloned().unwrap_or(Value::Null);
    let Some(versions) = doc.get_mut("versions").and_then(Value::as_object_mut) else {
        return Filtered::Unchanged;
    };
    let mut refused: Vec<(String, String)> = Vec::new();
    for version in versions.keys() {
        let published = own_times[version.as_str()]
            .as_str()
            .and_then(parse_time)
            .or_else(|| times.get(version).copied());
        if let Some(reason) = judge.refusal(name, version, published) {
            refused.push((version.clone(), reason));
        }
    }
    if refused.is_empty() {
        return Filtered::Unchanged;
    }
    if refused.len() == versions.len() {
        let latest = doc["dist-tags"]["latest"].as_str().unwrap_or_default();
        let reason = refused
            .iter()
            .find(|(v, _)| v == latest)
            .unwrap_or(&refused[0]);
        return Filtered::Refused(reason.1.clone());
    }
    for (version, _) in &refused {
        versions.remove(version);
    }
    let left: Vec<nodejs_semver::Version> = versions
        .keys()
        .filter_map(|v| nodejs_semver::Version::parse(v).ok())
        .collect();
    if let Some(time) = doc.get_mut("time").and_then(Value::as_object_mut) {
        for (version, _) in &refused {
            time.remove(version);
        }
    }
    if let Some(tags) = doc.get_mut("dist-tags").and_then(Value::as_object_mut) {
        let mut moved = serde_json::Map::new();
        for (tag, version) in tags.iter() {
            let Some(named) = version.as_str() else {
                continue;
            };
            if !refused.iter().any(|(v, _)| v == named) {
                moved.insert(tag.clone(), version.clone());
                continue;
            }
            // Down to the newest version left below the one it named
            // (never up): `latest` 1.1.0 refused → 1.0.0.
            let Ok(named) = nodejs_semver::Version::parse(named) else {
                continue;
            };
            let below = left.iter().filter(|v| **v < named);
            let stable = below.clone().filter(|v| !v.is_prerelease()).max();
            if let Some(v) = stable.or_else(|| below.max()) {
                moved.insert(tag.clone(), Value::String(v.to_string()));
            }
        }
        *tags = moved;
    }
    Filtered::Changed(serde_json::to_vec(&doc).unwrap_or_else(|_| body.to_vec()))
}

fn pypi_json(judge: &Judge, name: &str, body: &[u8]) -> Filtered {
    let Ok(mut doc) = serde_json::from_slice::<Value>(body) else {
        return Filtered::Unchanged;
    };
    let Some(files) = doc.get_mut("files").and_then(Value::as_array_mut) else {
        return Filtered::Unchanged;
    };
    let mut verdicts = Vec::with_capacity(files.len());
    for file in files.iter() {
        let artifact = file["filename"]
            .as_str()
            .and_then(|f| package::artifact(RemoteKind::Pypi, f));
        let published = file["upload-time"].as_str().and_then(parse_time);
        verdicts.push(artifact.and_then(|a| judge.refusal(name, &a.version, published)));
    }
    let n_refused = verdicts.iter().filter(|v| v.is_some()).count();
    if n_refused == 0 {
        return Filtered::Unchanged;
    }
    if n_refused == verdicts.len() {
        // Nothing left: the download's 403 tells pip why.
        return Filtered::Unchanged;
    }
    let mut verdict = verdicts.iter();
    files.retain(|_| verdict.next().is_some_and(Option::is_none));
    // API 1.1's `versions`: only those with a file left.
    let left: Vec<String> = files
        .iter()
        .filter_map(|f| f["filename"].as_str())
        .filter_map(|f| package::artifact(RemoteKind::Pypi, f))
        .map(|a| a.version)
        .collect();
    if let Some(versions) = doc.get_mut("versions").and_then(Value::as_array_mut) {
        versions.retain(|v| v.as_str().is_some_and(|v| left.iter().any(|l| l == v)));
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

fn pypi_html(judge: &Judge, name: &str, text: &str, times: &HashMap<String, i64>) -> Filtered {
    let all = anchors(text);
    let verdicts: Vec<(Anchor, Option<String>)> = all
        .into_iter()
        .map(|a| {
            let verdict = package::artifact(RemoteKind::Pypi, &a.file)
                .and_then(|f| judge.refusal(name, &f.version, times.get(&a.file).copied()));
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
        if verdict.is_some() {
            out.push_str(&text[at..anchor.start]);
            at = anchor.end;
        }
    }
    out.push_str(&text[at..]);
    Filtered::Changed(out.into_bytes())
}

fn cargo(judge: &Judge, body: &[u8]) -> Filtered {
    let mut out = Vec::with_capacity(body.len());
    let (mut kept, mut last_reason) = (0, None);
    for line in body.split_inclusive(|&b| b == b'\n') {
        let entry = serde_json::from_slice::<Value>(line.trim_ascii()).ok();
        let verdict = entry.as_ref().and_then(|e| {
            let (name, version) = (e["name"].as_str()?, e["vers"].as_str()?);
            let published = e["pubtime"].as_str().and_then(parse_time);
            judge.refusal(name, version, published)
        });
        match verdict {
            Some(reason) => last_reason = Some(reason),
            None => {
                if !line.trim_ascii().is_empty() {
                    kept += 1;
                }
                out.extend_from_slice(line);
            }
        }
    }
    match last_reason {
        None => Filtered::Unchanged,
        Some(reason) if kept == 0 => Filtered::Refused(reason),
        Some(_) => Filtered::Changed(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use serde_json::json;

    const DAY: i64 = 24 * 3600 * 1000;
    const NOW: i64 = 1_800_000_000_000;

    fn guard(kind: &str, keys: &str) -> crate::config::GuardConfig {
        let text = format!(
            "[[remote]]\nname = \"r\"\nkind = \"{kind}\"\nmirrors = [\"http://a/x\"]\n{keys}\n"
        );
        Config::parse(&text, "t.toml").unwrap().remotes[0]
            .guard
            .clone()
    }

    fn iso(ms: i64) -> String {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64);
        humantime::format_rfc3339_millis(at).to_string()
    }

    fn changed(f: Filtered) -> Value {
        match f {
            Filtered::Changed(bytes) => serde_json::from_slice(&bytes).unwrap(),
            other => panic!("not changed: {other:?}"),
        }
    }

    #[test]
    fn npm_young_versions_leave_versions_time_and_dist_tags() {
        let g = guard("npm", "min_release_age = \"7d\"");
        let judge = Judge::new(&g, RemoteKind::Npm, NOW);
        let full = json!({
            "name": "p",
            "dist-tags": {"latest": "1.1.0", "next": "2.0.0-rc.1", "old": "1.0.0"},
            "versions": {"1.0.0": {}, "1.1.0": {}, "2.0.0-rc.1": {}},
            "time": {"created": iso(NOW - 90 * DAY), "1.0.0": iso(NOW - 60 * DAY),
                     "1.1.0": iso(NOW - DAY), "2.0.0-rc.1": iso(NOW - DAY)},
        });
        let body = serde_json::to_vec(&full).unwrap();
        let doc = changed(filter(&judge, "p", &body, &HashMap::new(), false));
        assert_eq!(doc["versions"], json!({"1.0.0": {}}));
        assert_eq!(
            doc["dist-tags"],
            json!({"latest": "1.0.0", "next": "1.0.0", "old": "1.0.0"})
        );
        assert!(doc["time"].get("1.1.0").is_none() && doc["time"].get("created").is_some());

        // The abbreviated form has no `time`: the full one's are passed in.
        let abbreviated = json!({"name": "p", "dist-tags": {"latest": "1.1.0"},
                                 "versions": {"1.0.0": {}, "1.1.0": {}}});
        let body = serde_json::to_vec(&abbreviated).unwrap();
        let times = super::super::guard::publish_times(
            RemoteKind::Npm,
            &serde_json::to_vec(&full).unwrap(),
        );
        let doc = changed(filter(&judge, "p", &body, &times, false));
        assert_eq!(doc["versions"], json!({"1.0.0": {}}));
        assert_eq!(doc["dist-tags"]["latest"], "1.0.0");
        // Without times nothing is refused; with nothing left, the refusal.
        assert_eq!(
            filter(&judge, "p", &body, &HashMap::new(), false),
            Filtered::Unchanged
        );
        let g = guard("npm", "deny = [\"p\"]");
        let judge = Judge::new(&g, RemoteKind::Npm, NOW);
        match filter(&judge, "p", &body, &HashMap::new(), false) {
            Filtered::Refused(reason) => {
                assert!(reason.starts_with("p@1.1.0 is refused"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pypi_pages_lose_refused_files_unless_none_would_be_left() {
        let g = guard("pypi", "min_release_age = \"7d\"\ndeny = [\"mc-bad\"]");
        let judge = Judge::new(&g, RemoteKind::Pypi, NOW);
        let page = json!({"meta": {"api-version": "1.1"}, "name": "mc-alpha", "versions": ["1.0", "1.1"], "files": [
            {"filename": "mc_alpha-1.0-py3-none-any.whl", "upload-time": iso(NOW - 60 * DAY)},
            {"filename": "mc_alpha-1.1-py3-none-any.whl", "upload-time": iso(NOW - DAY)},
            {"filename": "mc_alpha-1.1.tar.gz", "upload-time": iso(NOW - DAY)},
        ]});
        let body = serde_json::to_vec(&page).unwrap();
        let doc = changed(filter(&judge, "mc-alpha", &body, &HashMap::new(), false));
        assert_eq!(doc["files"].as_array().unwrap().len(), 1);
        assert_eq!(doc["versions"], json!(["1.0"]));

        let html = "<html><body><a href=\"http://f/p/mc_alpha-1.0-py3-none-any.whl#sha256=aa\">a</a><br/>\n\
                    <A HREF='http://f/p/mc_alpha-1.1-py3-none-any.whl#sha256=bb' data-requires-python=\"&gt;=3\">b</a><br/>\n</body></html>";
        let times = super::super::guard::publish_times(RemoteKind::Pypi, &body);
        let Filtered::Changed(out) = filter(&judge, "mc-alpha", html.as_bytes(), &times, true)
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
            filter(&judge, "mc-bad", &bad, &HashMap::new(), false),
            Filtered::Unchanged
        );
        let html = "<a href=\"http://f/mc_bad-1.0.tar.gz\">x</a>";
        assert_eq!(
            filter(&judge, "mc-bad", html.as_bytes(), &HashMap::new(), true),
            Filtered::Unchanged
        );
        assert!(judge.refusal("mc-bad", "1.0", None).is_some());
    }

    #[test]
    fn cargo_index_lines_go_and_an_empty_index_is_refused() {
        let g = guard(
            "cargo",
            "min_release_age = \"7d\"\ndeny = [\"mc_leaf@>=0.3\"]",
        );
        let judge = Judge::new(&g, RemoteKind::Cargo, NOW);
        let line = |v: &str, at: Option<i64>| {
            let mut l = json!({"name": "mc_leaf", "vers": v, "deps": [], "cksum": "00"});
            if let Some(at) = at {
                l["pubtime"] = json!(iso(at).replace(".000Z", "Z"));
            }
            format!("{l}\n")
        };
        let body = [
            line("0.1.0", None),
            line("0.2.0", Some(NOW - DAY)),
            line("0.3.0", Some(NOW - 99 * DAY)),
        ]
        .concat();
        let Filtered::Changed(out) =
            filter(&judge, "mc_leaf", body.as_bytes(), &HashMap::new(), false)
        else {
            panic!()
        };
        assert_eq!(String::from_utf8(out).unwrap(), line("0.1.0", None));
        let body = line("0.3.0", None);
        assert!(matches!(
            filter(&judge, "mc_leaf", body.as_bytes(), &HashMap::new(), false),
            Filtered::Refused(_)
        ));
    }
}
