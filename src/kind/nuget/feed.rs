//! NuGet v2 (OData Atom) feeds read for what the proxy needs: each
//! `<entry>`'s package id, version, publish time, `PackageHash` and the
//! download URL (`<content src>`), with the bytes it spans, so a filter
//! takes entries out and leaves every other byte as the feed wrote it.
//! Feeds are machine-written (NuGet.Server, the gallery, Artifactory,
//! Nexus), so entries are found by their tags rather than parsed whole.

use std::ops::Range;

/// One package version of a feed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub version: String,
    pub published: Option<String>,
    /// `PackageHash` (base64) and `PackageHashAlgorithm`.
    pub hash: Option<(String, String)>,
    pub content: Option<String>,
    span: Range<usize>,
}

/// Every entry of the feed (or the single entry) `text`.
pub fn entries(text: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(start) = find_tag(text, at, "entry") {
        let Some(end) = text[start..]
            .find("</entry>")
            .map(|e| start + e + "</entry>".len())
        else {
            break;
        };
        let body = &text[start..end];
        let hash = element(body, "PackageHash").map(|hash| {
            let algo = element(body, "PackageHashAlgorithm").unwrap_or_else(|| "SHA512".into());
            (hash, algo)
        });
        out.push(Entry {
            id: element(body, "Id").unwrap_or_else(|| title(body)),
            version: element(body, "Version").unwrap_or_default(),
            published: element(body, "Published"),
            hash,
            content: content_src(body),
            span: start..end,
        });
        at = end;
    }
    out
}

/// `text` without the entries `refused` picks (`None` when it picks none),
/// and whether every entry was picked.
pub fn without(text: &str, mut refused: impl FnMut(&Entry) -> bool) -> Option<(String, bool)> {
    let entries = entries(text);
    let gone: Vec<&Entry> = entries.iter().filter(|e| refused(e)).collect();
    if gone.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for entry in &gone {
        out.push_str(&text[at..entry.span.start]);
        at = entry.span.end;
    }
    out.push_str(&text[at..]);
    Some((out, gone.len() == entries.len()))
}

/// The start of the next `<tag` (followed by `>`, a space or `/`) at or
/// after `from`.
fn find_tag(text: &str, from: usize, tag: &str) -> Option<usize> {
    let open = format!("<{tag}");
    let mut at = from;
    while let Some(found) = text[at..].find(&open) {
        let start = at + found;
        let next = text[start + open.len()..].chars().next();
        if matches!(next, Some('>' | ' ' | '/' | '\n' | '\r' | '\t')) {
            return Some(start);
        }
        at = start + open.len();
    }
    None
}

/// The text of the first `<d:{name}>` (any prefix, or none) in `body`,
/// unescaped; `None` when absent or `m:null`.
fn element(body: &str, name: &str) -> Option<String> {
    let mut at = 0;
    while let Some(found) = body[at..].find(name) {
        let start = at + found;
        at = start + name.len();
        let before = body[..start].rfind(['<', '>', ' '])?;
        let prefix = &body[before..start];
        let is_open = prefix.starts_with('<')
            && !prefix.starts_with("</")
            && prefix[1..]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == ':')
            && (prefix.len() == 1 || prefix.ends_with(':'));
        let after = &body[at..];
        if !is_open || !after.starts_with(['>', ' ']) {
            continue;
        }
        let close = after.find('>')?;
        if after[..close].ends_with('/') {
            return None;
        }
        let content = &after[close + 1..];
        let end = content.find("</")?;
        return Some(unescape(content[..end].trim()));
    }
    None
}

/// An entry's `<title>` (feeds that put the id only there).
fn title(body: &str) -> String {
    element(body, "title").unwrap_or_default()
}

/// The `src` of the entry's `<content>`.
fn content_src(body: &str) -> Option<String> {
    let start = find_tag(body, 0, "content")?;
    let tag = &body[start..start + body[start..].find('>')?];
    let src = tag.split("src=\"").nth(1)?.split('"').next()?;
    Some(unescape(src))
}

fn unescape(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, version: &str, published: &str) -> String {
        format!(
            "<entry><id>https://www.nuget.org/api/v2/Packages(Id='{id}',Version='{version}')</id><title type=\"text\">{id}</title><content type=\"application/zip\" src=\"https://www.nuget.org/api/v2/package/{id}/{version}?a=1&amp;b=2\" /><m:properties><d:Id>{id}</d:Id><d:Version>{version}</d:Version><d:Copyright m:null=\"true\" /><d:Published m:type=\"Edm.DateTime\">{published}</d:Published><d:PackageHash>q83vEjRWeJA=</d:PackageHash><d:PackageHashAlgorithm>SHA512</d:PackageHashAlgorithm></m:properties></entry>"
        )
    }

    #[test]
    fn entries_give_their_fields_and_leave_when_refused() {
        let feed = format!(
            "<?xml version=\"1.0\"?><feed xml:base=\"https://www.nuget.org/api/v2\"><entry_count>2</entry_count>{}\n{}</feed>",
            entry("Acme.Hello", "1.0.0", "2024-01-01T00:00:00.000"),
            entry("Acme.Hello", "2.0.0-beta", "2024-02-01T00:00:00.000")
        );
        let got = entries(&feed);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].id, "Acme.Hello");
        assert_eq!(got[1].version, "2.0.0-beta");
        assert_eq!(got[0].published.as_deref(), Some("2024-01-01T00:00:00.000"));
        assert_eq!(
            got[0].content.as_deref(),
            Some("https://www.nuget.org/api/v2/package/Acme.Hello/1.0.0?a=1&b=2")
        );
        assert_eq!(got[0].hash, Some(("q83vEjRWeJA=".into(), "SHA512".into())));
        let (out, all) = without(&feed, |e| e.version == "1.0.0").unwrap();
        assert!(
            !all && !out.contains("'1.0.0'") && out.contains("2.0.0-beta"),
            "{out}"
        );
        assert!(out.ends_with("</feed>"), "{out}");
        let (_, all) = without(&feed, |_| true).unwrap();
        assert!(all);
        assert!(without(&feed, |_| false).is_none());
    }
}
