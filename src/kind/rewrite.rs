//! Rewriting index documents so clients download through the proxy: every
//! absolute URL that starts with one of the remote's mirror bases (or its
//! files mirrors' bases) is re-pointed at the proxy. Nothing else in the
//! document is touched — fragments (`#sha256=…`), attributes, other hosts —
//! so only URLs on configured hosts are ever fetched.

use super::FILES_PREFIX;
use crate::config::RemoteConfig;

pub struct Rewrite {
    /// (mirror base, proxy base), longest mirror base first.
    pairs: Vec<(String, String)>,
}

impl Rewrite {
    /// The rewrite for the remote `config` as seen by a client that reaches the proxy at
    /// `public_base` (e.g. `http://127.0.0.1:8080`, no trailing slash).
    pub fn new(config: &RemoteConfig, public_base: &str) -> Rewrite {
        let to_index = format!("{public_base}/{}", config.name);
        let to_files = format!("{to_index}/{}", FILES_PREFIX.trim_end_matches('/'));
        let mut pairs: Vec<(String, String)> = config
            .files
            .iter()
            .map(|u| {
                (
                    u.as_str().trim_end_matches('/').to_string(),
                    to_files.clone(),
                )
            })
            .chain(config.mirrors.iter().map(|u| {
                (
                    u.as_str().trim_end_matches('/').to_string(),
                    to_index.clone(),
                )
            }))
            .collect();
        pairs.sort_by_key(|pair| std::cmp::Reverse(pair.0.len()));
        Rewrite { pairs }
    }

    /// `text` with every configured base re-pointed. A base matches only as a
    /// whole URL prefix: the next character must end the host or path segment
    /// (so `https://files.example` does not match `https://files.example.evil`).
    pub fn apply(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len() + text.len() / 8);
        let mut rest = text;
        while let Some(at) = rest.find("http") {
            out.push_str(&rest[..at]);
            rest = &rest[at..];
            let hit = self.pairs.iter().find(|(from, _)| {
                rest.starts_with(from.as_str())
                    && rest[from.len()..].chars().next().is_none_or(|c| {
                        !(c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '@' | '%'))
                    })
            });
            match hit {
                Some((from, to)) => {
                    out.push_str(to);
                    rest = &rest[from.len()..];
                }
                None => {
                    out.push_str("http");
                    rest = &rest[4..];
                }
            }
        }
        out.push_str(rest);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(pairs: &[(&str, &str)]) -> Rewrite {
        let mut pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        pairs.sort_by_key(|pair| std::cmp::Reverse(pair.0.len()));
        Rewrite { pairs }
    }

    #[test]
    fn rewrites_configured_bases_only_and_keeps_the_rest() {
        let r = rewrite(&[
            ("https://files.pythonhosted.org", "http://p/pypi/~files"),
            ("https://pypi.org", "http://p/pypi"),
        ]);
        let html = r#"<a href="https://files.pythonhosted.org/packages/a/six.whl#sha256=ab" data-dist-info-metadata="sha256=cd">six</a>
<a href="https://files.pythonhosted.org.evil.com/x">evil</a> <a href="https://example.com/x">other</a>"#;
        let out = r.apply(html);
        assert!(out.contains(r#"href="http://p/pypi/~files/packages/a/six.whl#sha256=ab" data-dist-info-metadata="sha256=cd""#));
        assert!(out.contains("https://files.pythonhosted.org.evil.com/x"));
        assert!(out.contains("https://example.com/x"));
        let json = r#"{"dl":"https://static.crates.io/crates","api":"https://crates.io"}"#;
        let r = rewrite(&[
            ("https://static.crates.io/crates", "http://p/c/~files"),
            ("https://crates.io", "http://p/c"),
        ]);
        assert_eq!(
            r.apply(json),
            r#"{"dl":"http://p/c/~files","api":"http://p/c"}"#
        );
    }
}
