//! A Helm repository index read for what the proxy needs of it: each chart's
//! versions with their `version`, `digest`, `created` and `urls`, and the
//! bytes each version's record spans, so a filter takes records out and
//! leaves every other byte as the upstream wrote it. The YAML form is read
//! line by line in the block layout every index writer emits (`helm repo
//! index`, ChartMuseum, chart-releaser: go-yaml through `sigs.k8s.io/yaml`),
//! list items at their key's indentation or deeper, quoted or plain
//! scalars, long ones folded onto deeper lines; a tens-of-MB index is one
//! pass holding only these fields. The JSON form (`helm repo index --json`,
//! which Helm reads at the same `index.yaml` path) goes through serde_json.

use std::borrow::Cow;
use std::ops::Range;

use serde_json::Value;

/// One version of one chart; its fields borrowed from the YAML form's
/// text where no quote needed undoing.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub chart: Cow<'a, str>,
    pub version: Cow<'a, str>,
    pub digest: Option<Cow<'a, str>>,
    pub created: Option<Cow<'a, str>>,
    pub urls: Vec<Cow<'a, str>>,
    /// The record's bytes in the YAML form (empty for JSON).
    span: Range<usize>,
}

/// Whether `body` is the JSON form of an index.
pub fn is_json(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// Every record of the index `body`, in order.
pub fn records(body: &[u8]) -> Vec<Record<'_>> {
    if is_json(body) {
        return json_records(body);
    }
    match std::str::from_utf8(body) {
        Ok(text) => Scanner::default().scan(text).0,
        Err(_) => Vec::new(),
    }
}

/// `body` without the records `refused` picks; `None` when it picks none.
/// A chart left with no version loses its key too.
pub fn without(body: &[u8], mut refused: impl FnMut(&Record) -> bool) -> Option<Vec<u8>> {
    if is_json(body) {
        return json_without(body, refused);
    }
    let text = std::str::from_utf8(body).ok()?;
    let (records, charts) = Scanner::default().scan(text);
    let mut cut: Vec<Range<usize>> = Vec::new();
    let mut any = false;
    for (key, range) in charts {
        let of_chart: Vec<&Record> = records[range].iter().collect();
        let gone: Vec<&Record> = of_chart.iter().copied().filter(|r| refused(r)).collect();
        any |= !gone.is_empty();
        if !of_chart.is_empty() && gone.len() == of_chart.len() {
            cut.push(key.start..of_chart.last().map_or(key.end, |r| r.span.end));
        } else {
            cut.extend(gone.iter().map(|r| r.span.clone()));
        }
    }
    if !any {
        return None;
    }
    let mut out = Vec::with_capacity(body.len());
    let mut at = 0;
    for range in cut {
        out.extend_from_slice(&body[at..range.start]);
        at = range.end;
    }
    out.extend_from_slice(&body[at..]);
    Some(out)
}

#[derive(serde::Deserialize)]
struct JsonIndex {
    #[serde(default)]
    entries: std::collections::BTreeMap<String, Option<Vec<JsonRecord>>>,
}

#[derive(serde::Deserialize)]
struct JsonRecord {
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    digest: Option<String>,
    #[serde(default)]
    created: Option<String>,
    #[serde(default)]
    urls: Option<Vec<String>>,
}

fn json_records(body: &[u8]) -> Vec<Record<'static>> {
    let Ok(index) = serde_json::from_slice::<JsonIndex>(body) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (chart, versions) in index.entries {
        for r in versions.into_iter().flatten() {
            out.push(Record {
                chart: Cow::Owned(chart.clone()),
                version: Cow::Owned(r.version.unwrap_or_default()),
                digest: r.digest.map(Cow::Owned),
                created: r.created.map(Cow::Owned),
                urls: r.urls.into_iter().flatten().map(Cow::Owned).collect(),
                span: 0..0,
            });
        }
    }
    out
}

fn json_without(body: &[u8], mut refused: impl FnMut(&Record) -> bool) -> Option<Vec<u8>> {
    let mut doc: Value = serde_json::from_slice(body).ok()?;
    let entries = doc.get_mut("entries")?.as_object_mut()?;
    let mut any = false;
    for (chart, versions) in entries.iter_mut() {
        let Some(list) = versions.as_array_mut() else {
            continue;
        };
        list.retain(|v| {
            let text = |key: &str| v.get(key).and_then(Value::as_str).map(Cow::Borrowed);
            let record = Record {
                chart: Cow::Borrowed(chart.as_str()),
                version: text("version").unwrap_or_default(),
                created: text("created"),
                ..Record::default()
            };
            let gone = refused(&record);
            any |= gone;
            !gone
        });
    }
    entries.retain(|_, v| v.as_array().is_none_or(|l| !l.is_empty()));
    any.then(|| serde_json::to_vec(&doc).ok()).flatten()
}

/// The YAML form's reader: where the chart keys, their list items and an
/// item's keys are indented, learned from the first of each.
#[derive(Default)]
struct Scanner {
    in_entries: bool,
    chart_indent: Option<usize>,
    item_indent: Option<usize>,
    /// The column of the current item's keys.
    key_column: usize,
    /// Reading the current item's `urls:` list.
    in_urls: bool,
}

/// A line's indentation and its content (without the line break).
fn split_line(line: &str) -> (usize, &str) {
    let bare = line.trim_end_matches(['\n', '\r']);
    let content = bare.trim_start_matches(' ');
    (bare.len() - content.len(), content.trim_end())
}

impl Scanner {
    /// The records, and each chart's key line with the range of its records.
    #[allow(clippy::type_complexity)]
    fn scan(mut self, text: &str) -> (Vec<Record<'_>>, Vec<(Range<usize>, Range<usize>)>) {
        let mut records: Vec<Record> = Vec::new();
        let mut charts: Vec<(Range<usize>, Range<usize>)> = Vec::new();
        let mut chart = Cow::Borrowed("");
        let mut at = 0;
        for line in text.split_inclusive('\n') {
            let start = at;
            at += line.len();
            let (indent, content) = split_line(line);
            if content.is_empty() || content.starts_with('#') || content == "---" {
                continue;
            }
            if indent == 0 {
                self.close(&mut records, start);
                self.in_entries = content.starts_with("entries:");
                continue;
            }
            if !self.in_entries {
                continue;
            }
            let item = content == "-" || content.starts_with("- ");
            let chart_level = self.chart_indent.is_none_or(|c| indent <= c);
            if !item && chart_level {
                // A chart's key: `name:` (its items follow).
                self.close(&mut records, start);
                self.chart_indent = Some(indent);
                self.item_indent = None;
                chart = unquote(content.strip_suffix(':').unwrap_or(content));
                charts.push((start..at, records.len()..records.len()));
                continue;
            }
            let Some((_, range)) = charts.last_mut() else {
                continue;
            };
            if item && self.item_indent.is_none_or(|i| i == indent) && !self.in_urls_at(indent) {
                // A new version of the chart.
                self.close(&mut records, start);
                self.item_indent = Some(indent);
                let after = content[1..].trim_start_matches(' ');
                self.key_column = indent + (content.len() - after.len());
                records.push(Record {
                    chart: chart.clone(),
                    span: start..at,
                    ..Record::default()
                });
                range.end = records.len();
                self.key(records.last_mut(), after);
                continue;
            }
            let Some(record) = records.last_mut().filter(|_| range.end > range.start) else {
                continue;
            };
            record.span.end = at;
            if self.in_urls && item && indent >= self.key_column {
                record.urls.push(unquote(content[1..].trim()));
            } else if indent == self.key_column {
                self.key(Some(record), content);
            }
        }
        self.close(&mut records, text.len());
        (records, charts)
    }

    /// Whether an item at `indent` belongs to the current `urls:` list
    /// (written at its key's indentation).
    fn in_urls_at(&self, indent: usize) -> bool {
        self.in_urls && indent >= self.key_column
    }

    /// The current record ends where the line at `at` starts.
    fn close(&mut self, records: &mut [Record<'_>], at: usize) {
        self.in_urls = false;
        if let Some(last) = records.last_mut() {
            if last.span.end > at {
                last.span.end = at;
            }
        }
    }

    /// A `key: value` line of the current record.
    fn key<'a>(&mut self, record: Option<&mut Record<'a>>, content: &'a str) {
        self.in_urls = false;
        let (Some(record), Some((key, value))) = (record, content.split_once(':')) else {
            return;
        };
        let value = value.trim();
        match key.trim() {
            "version" => record.version = unquote(value),
            "digest" => record.digest = Some(unquote(value)),
            "created" => record.created = Some(unquote(value)),
            "urls" if value.is_empty() => self.in_urls = true,
            "urls" => {
                let list = value.trim_start_matches('[').trim_end_matches(']');
                record.urls.extend(
                    list.split(',')
                        .map(|u| unquote(u.trim()))
                        .filter(|u| !u.is_empty()),
                );
            }
            _ => {}
        }
    }
}

/// A scalar without its quotes (`"…"` with its escapes of `"` and `\`,
/// `'…'` with `''`), or a plain one without a trailing comment.
fn unquote(value: &str) -> std::borrow::Cow<'_, str> {
    if let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        if inner.contains('\\') {
            return inner.replace("\\\"", "\"").replace("\\\\", "\\").into();
        }
        return inner.into();
    }
    if let Some(inner) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
        return inner.replace("''", "'").into();
    }
    value.split(" #").next().unwrap_or(value).trim().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As `helm repo index` writes it (sigs.k8s.io/yaml): items at their
    /// key's indentation, a folded description, a block scalar.
    const INDEX: &str = "apiVersion: v1\nentries:\n  alpine:\n  - apiVersion: v2\n    created: \"2024-01-05T10:00:00.123456789Z\"\n    description: A very long description that go-yaml folds onto the next\n      line when it passes eighty columns\n    digest: aaaa\n    name: alpine\n    urls:\n    - https://charts.example.com/alpine-0.2.0.tgz\n    - alpine-0.2.0-mirror.tgz\n    version: 0.2.0\n  - apiVersion: v2\n    created: 2016-10-06T16:23:20.499814565-06:00\n    digest: bbbb\n    name: alpine\n    notes: |\n      - not a version\n      version: 9.9.9\n    urls:\n    - charts/alpine-0.1.0.tgz\n    version: 0.1.0\n  \"cert-manager\":\n  - digest: cccc\n    urls: [\"https://github.com/x/cert-manager-v1.14.0.tgz\"]\n    version: v1.14.0\ngenerated: \"2024-01-05T10:00:00Z\"\n";

    #[test]
    fn the_block_layout_gives_each_version_its_fields() {
        let records = records(INDEX.as_bytes());
        let got: Vec<(&str, &str, Option<&str>, usize)> = records
            .iter()
            .map(|r| {
                (
                    r.chart.as_ref(),
                    r.version.as_ref(),
                    r.digest.as_deref(),
                    r.urls.len(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("alpine", "0.2.0", Some("aaaa"), 2),
                ("alpine", "0.1.0", Some("bbbb"), 1),
                ("cert-manager", "v1.14.0", Some("cccc"), 1)
            ]
        );
        assert_eq!(records[0].urls[1], "alpine-0.2.0-mirror.tgz");
        assert_eq!(
            records[1].created.as_deref(),
            Some("2016-10-06T16:23:20.499814565-06:00")
        );
    }

    #[test]
    fn indented_lists_read_the_same() {
        let text = "entries:\n    alpine:\n        -   version: '1.0'\n            digest: \"dd\"\n            urls:\n                - a.tgz\n        -   version: '2.0'\n            urls:\n              - b.tgz\n";
        let records = records(text.as_bytes());
        assert_eq!(records.len(), 2, "{records:?}");
        assert_eq!(records[0].urls, ["a.tgz"]);
        assert_eq!(records[1].version, "2.0");
        assert_eq!(records[1].urls, ["b.tgz"]);
    }

    #[test]
    fn taking_records_out_keeps_every_other_byte() {
        let out = without(INDEX.as_bytes(), |r| r.version == "0.2.0").unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.starts_with(
                "apiVersion: v1\nentries:\n  alpine:\n  - apiVersion: v2\n    created: 2016"
            ),
            "{out}"
        );
        assert!(out.ends_with("version: v1.14.0\ngenerated: \"2024-01-05T10:00:00Z\"\n"));
        assert_eq!(records(out.as_bytes()).len(), 2);
        // A chart with nothing left loses its key.
        let out = without(INDEX.as_bytes(), |r| r.chart == "cert-manager").unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains("cert-manager"), "{out}");
        assert!(out.ends_with("version: 0.1.0\ngenerated: \"2024-01-05T10:00:00Z\"\n"));
        assert!(without(INDEX.as_bytes(), |_| false).is_none());
    }

    #[test]
    fn the_json_form_reads_and_filters_the_same() {
        let json = serde_json::json!({"apiVersion": "v1", "entries": {"alpine": [
            {"version": "0.2.0", "digest": "aaaa", "urls": ["a.tgz"], "created": "2024-01-05T10:00:00Z"},
            {"version": "0.1.0", "digest": "bbbb", "urls": ["b.tgz"]}
        ]}})
        .to_string();
        assert!(is_json(json.as_bytes()));
        let records = records(json.as_bytes());
        assert_eq!(records.len(), 2);
        assert_eq!(records[1].urls, ["b.tgz"]);
        let out = without(json.as_bytes(), |r| r.version == "0.1.0").unwrap();
        let out: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(out["entries"]["alpine"].as_array().unwrap().len(), 1);
    }
}
