//! Rewriting index documents so clients download through the proxy: every
//! absolute URL on one of the remote's hosts (its `mirrors`, its `files`
//! mirrors, and the go kind's `sumdb` mirrors are not documents) is re-pointed
//! at the proxy. URLs are compared as origins, not as text: the scheme and the
//! host case-insensitively, the port with the scheme's default dropped (so
//! `https://HOST:443/x` is `https://host/x`), then the base's path segments
//! one by one. Nothing else in the document is touched — fragments
//! (`#sha256=…`), attributes, other hosts, URLs with userinfo — so only URLs
//! on configured hosts are ever fetched.

use url::Url;

use super::FILES_PREFIX;

pub struct Rewrite {
    /// (mirror base, proxy base), most path segments first; the files
    /// mirrors before the index mirrors when equally long.
    pairs: Vec<(Origin, String)>,
    /// `{public_base}/{remote}`: where the remote is served.
    index: String,
}

/// A base URL reduced to what two spellings of it share.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    /// Lower case: `http` or `https`.
    scheme: String,
    /// Lower case; IPv6 addresses in brackets.
    host: String,
    /// The explicit port, else the scheme's default.
    port: u16,
    /// The base's path, without empty segments.
    segments: Vec<String>,
}

impl Origin {
    fn of(url: &Url) -> Option<Origin> {
        Some(Origin {
            scheme: url.scheme().to_ascii_lowercase(),
            host: url.host_str()?.to_ascii_lowercase(),
            port: url.port_or_known_default()?,
            segments: url
                .path()
                .split('/')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        })
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// Characters that continue a host, port or path segment: a base matches only
/// when the URL's segment ends where the base's does (so `https://files.example`
/// does not match `https://files.example.evil`, nor `/crates` match `/crates2`).
fn continues_segment(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | '~' | ':' | '@' | '%' | '+' | '!' | '$')
}

/// The scheme, host and port at the start of `text` (which starts at a URL's
/// first character), and the length of that prefix; `None` when `text` does
/// not start with an `http`/`https` URL this rewriter would touch.
fn parse_authority(text: &str) -> Option<(String, String, u16, usize)> {
    // Only the scheme's few bytes are looked at: a long document with many
    // "http"s and no URL stays one linear pass.
    let colon = text.bytes().take(6).position(|b| b == b':')?;
    if !text[colon..].starts_with("://") {
        return None;
    }
    let scheme = text[..colon].to_ascii_lowercase();
    let default = default_port(&scheme)?;
    let start = colon + 3;
    let authority_len = text[start..]
        .find(|c: char| !(continues_segment(c) || c == '[' || c == ']'))
        .unwrap_or(text.len() - start);
    let authority = &text[start..start + authority_len];
    if authority.contains('@') {
        // Userinfo: not a link a registry gives clients; leave it alone.
        return None;
    }
    let (host, port) = match authority.rfind(':') {
        Some(at) if !authority[at..].contains(']') => (&authority[..at], &authority[at + 1..]),
        _ => (authority, ""),
    };
    let port = if port.is_empty() {
        default
    } else if port.bytes().all(|b| b.is_ascii_digit()) {
        port.parse().ok()?
    } else {
        return None;
    };
    if host.is_empty() {
        return None;
    }
    Some((
        scheme,
        host.to_ascii_lowercase(),
        port,
        start + authority_len,
    ))
}

/// The length of the prefix of `path` (which follows an authority) that
/// spells `segments`, or `None` if it does not.
fn match_segments(path: &str, segments: &[String]) -> Option<usize> {
    let mut at = 0;
    for segment in segments {
        let rest = path[at..].strip_prefix('/')?;
        let rest = rest.strip_prefix(segment.as_str())?;
        if rest.chars().next().is_some_and(continues_segment) {
            return None;
        }
        at = path.len() - rest.len();
    }
    Some(at)
}

impl Rewrite {
    /// The rewrite for the remote `remote` (index mirrors `mirrors`, files
    /// mirrors `files`) as seen by a client that reaches the proxy at
    /// `public_base` (e.g. `http://127.0.0.1:8080`, no trailing slash).
    pub fn new(remote: &str, mirrors: &[Url], files: &[Url], public_base: &str) -> Rewrite {
        let to_index = format!("{public_base}/{remote}");
        let to_files = format!("{to_index}/{}", FILES_PREFIX.trim_end_matches('/'));
        let bases = files
            .iter()
            .map(|u| (u, to_files.clone()))
            .chain(mirrors.iter().map(|u| (u, to_index.clone())));
        let mut rewrite =
            Rewrite::from_pairs(bases.filter_map(|(url, to)| Some((Origin::of(url)?, to))));
        rewrite.index = to_index;
        rewrite
    }

    /// Where the remote is served (`{public_base}/{remote}`): what a
    /// root-relative path of the upstream (`/p2/…`) becomes, prefixed.
    pub fn index_base(&self) -> &str {
        &self.index
    }

    /// A root-relative link in a document of the remote's mirrors
    /// (`/api/v3/…`), as a root-relative link at the proxy
    /// (`/{remote}/api/v3/…`, below `public_url`'s own path): the part
    /// below the longest index mirror base whose path it starts with, put
    /// below the remote's. `None` when it is below none of them (or is not
    /// root-relative): the link is then left as it is.
    pub fn root_relative(&self, link: &str) -> Option<String> {
        if !link.starts_with('/') || link.starts_with("//") {
            return None;
        }
        let index_path = match self.index.find("://") {
            Some(at) => {
                let authority = &self.index[at + 3..];
                &authority[authority.find('/').unwrap_or(authority.len())..]
            }
            None => self.index.as_str(),
        };
        self.pairs
            .iter()
            .filter(|(_, to)| *to == self.index)
            .find_map(|(origin, _)| {
                let len = match_segments(link, &origin.segments)?;
                Some(format!("{index_path}{}", &link[len..]))
            })
    }

    fn from_pairs(pairs: impl Iterator<Item = (Origin, String)>) -> Rewrite {
        let mut pairs: Vec<(Origin, String)> = pairs.collect();
        // Stable: among equally long bases, the files mirrors stay first.
        pairs.sort_by_key(|(origin, _)| std::cmp::Reverse(origin.segments.len()));
        Rewrite {
            pairs,
            index: String::new(),
        }
    }

    /// `text` with every URL on a configured base re-pointed: the scheme,
    /// authority and base path are replaced, the rest of the URL is kept.
    pub fn apply(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len() + text.len() / 8);
        let mut rest = text;
        while let Some(at) = find_http(rest) {
            out.push_str(&rest[..at]);
            rest = &rest[at..];
            let hit = parse_authority(rest).and_then(|(scheme, host, port, end)| {
                self.pairs.iter().find_map(|(origin, to)| {
                    if origin.scheme != scheme || origin.host != host || origin.port != port {
                        return None;
                    }
                    let len = match_segments(&rest[end..], &origin.segments)?;
                    Some((end + len, to))
                })
            });
            match hit {
                Some((len, to)) => {
                    out.push_str(to);
                    rest = &rest[len..];
                }
                None => {
                    out.push_str(&rest[..4]);
                    rest = &rest[4..];
                }
            }
        }
        out.push_str(rest);
        out
    }
}

/// The next `http` (any case) in `text`.
fn find_http(text: &str) -> Option<usize> {
    text.as_bytes()
        .windows(4)
        .position(|w| w.eq_ignore_ascii_case(b"http"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(pairs: &[(&str, &str)]) -> Rewrite {
        Rewrite::from_pairs(
            pairs
                .iter()
                .map(|(a, b)| (Origin::of(&Url::parse(a).unwrap()).unwrap(), b.to_string())),
        )
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

    #[test]
    fn root_relative_links_go_below_the_remote_at_the_proxy() {
        let at_root = Rewrite::new(
            "galaxy",
            &[Url::parse("https://galaxy.example").unwrap()],
            &[Url::parse("https://files.example/dl").unwrap()],
            "http://p:8080/cache",
        );
        assert_eq!(
            at_root
                .root_relative("/api/v3/x/?limit=10&offset=10")
                .as_deref(),
            Some("/cache/galaxy/api/v3/x/?limit=10&offset=10")
        );
        let below = Rewrite::new(
            "hub",
            &[Url::parse("https://hub.example/api/galaxy/").unwrap()],
            &[],
            "http://p",
        );
        assert_eq!(
            below.root_relative("/api/galaxy/v3/x/").as_deref(),
            Some("/hub/v3/x/")
        );
        for other in [
            "/api/galaxyx/v3/",
            "/other/",
            "//evil.example/x",
            "v3/x/",
            "https://hub.example/x",
        ] {
            assert_eq!(below.root_relative(other), None, "{other}");
        }
    }

    #[test]
    fn origins_match_whatever_their_spelling() {
        let r = rewrite(&[
            ("https://static.crates.io/crates", "http://p/c/~files"),
            ("https://index.crates.io", "http://p/c"),
            ("http://127.0.0.1:8081/reg/", "http://p/r"),
        ]);
        for (from, to) in [
            // Explicit default ports, upper-case hosts and schemes.
            (
                "https://index.crates.io:443/api/v1/crates",
                "http://p/c/api/v1/crates",
            ),
            ("https://INDEX.Crates.IO/api", "http://p/c/api"),
            ("HTTPS://index.crates.io:/x", "http://p/c/x"),
            (
                "https://STATIC.crates.io:443/crates/{crate}/{version}/download",
                "http://p/c/~files/{crate}/{version}/download",
            ),
            ("http://127.0.0.1:8081/reg/x.tgz", "http://p/r/x.tgz"),
            ("http://127.0.0.1:8081/reg", "http://p/r"),
            // The longer base wins on a shared host.
            ("https://static.crates.io/crates", "http://p/c/~files"),
            // Not the same origin, or not the same path segments: untouched.
            ("http://index.crates.io/api", "http://index.crates.io/api"),
            (
                "https://index.crates.io:8443/api",
                "https://index.crates.io:8443/api",
            ),
            (
                "https://index.crates.io.evil/api",
                "https://index.crates.io.evil/api",
            ),
            (
                "https://user@index.crates.io/api",
                "https://user@index.crates.io/api",
            ),
            ("http://127.0.0.1:80/reg/x", "http://127.0.0.1:80/reg/x"),
            (
                "http://127.0.0.1:8081/reg2/x",
                "http://127.0.0.1:8081/reg2/x",
            ),
            ("http://127.0.0.1:8081/Reg/x", "http://127.0.0.1:8081/Reg/x"),
            (
                "http://127.0.0.1:80811/reg/x",
                "http://127.0.0.1:80811/reg/x",
            ),
            ("httpx", "httpx"),
            ("http", "http"),
        ] {
            assert_eq!(
                r.apply(&format!("\"{from}\"")),
                format!("\"{to}\""),
                "{from}"
            );
        }
        let r = rewrite(&[("http://[::1]:8080/", "http://p/v6")]);
        assert_eq!(r.apply("'http://[::1]:8080/a'"), "'http://p/v6/a'");
        assert_eq!(r.apply("'http://[::1]/a'"), "'http://[::1]/a'");
    }
}
