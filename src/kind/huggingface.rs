//! huggingface: the Hugging Face hub as `huggingface_hub` (`hf_hub_download`,
//! `snapshot_download`, the `hf` CLI) speaks to it with `HF_ENDPOINT` set to
//! the remote. Files are `{repo}/resolve/{revision}/{file}` (datasets and
//! spaces under `datasets/` and `spaces/`): immutable by a full commit hash,
//! revalidated by a branch or tag name. The hub answers an LFS file with a
//! redirect to a signed URL on a CDN host (the remote's `files`); the proxy
//! follows it itself (`Protocol::SignedRedirects`) and keeps the hub's
//! headers the client relies on (`X-Repo-Commit`, `ETag`, `X-Linked-Etag`,
//! `X-Linked-Size`) with the entry, whose `X-Linked-Etag` is the sha256 the
//! body must have. The API documents (`api/{models,datasets,spaces}/{repo}`,
//! `…/revision/{rev}`, `…/tree/{rev}`) are cached with their query string in
//! the key and their `Link` paging header kept.
//!
//! Never kept, so never sent on: the `X-Xet-*` headers and the `xet-auth`
//! link, which would send the client down the Xet path around the proxy.

use axum::http::HeaderMap;

use super::declared::{Algo, Declared};
use super::{standard_refusal, Digests, Ecosystem, Plan, Protocol, Rewritten};

pub struct Huggingface;

/// The repository types the hub's URLs prefix (models have none).
const TYPE_PREFIXES: [&str; 2] = ["datasets/", "spaces/"];

/// What `huggingface_hub` reads from a file's answer, kept with the entry.
const FILE_HEADERS: &[&str] = &["x-repo-commit", "etag", "x-linked-etag", "x-linked-size"];

/// What an API document's answer carries that a client reads: the next page.
const API_HEADERS: &[&str] = &["link", "x-repo-commit"];

impl Ecosystem for Huggingface {
    fn name(&self) -> &'static str {
        "huggingface"
    }

    /// A file by commit hash immutable; the API documents revalidated
    /// (repository info changes with its likes and downloads even at a
    /// fixed commit) and read whole: a tree listing loses its files'
    /// `xetHash` on the way out.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        let hub_path = classify(path);
        let api = matches!(hub_path, Some(HubPath::Api { .. }));
        Plan {
            immutable: matches!(hub_path, Some(HubPath::File { revision, .. }) if is_commit(revision)),
            document: Rewritten::when(api),
            // What an API document lists is selected by its query.
            query_in_key: api,
            ..Plan::default()
        }
    }

    /// A tree listing without `xetHash`: with it (and `hf_xet` installed),
    /// `huggingface_hub` downloads a file by commit from the Xet storage
    /// directly, around the proxy, without even a HEAD.
    fn rewrite(&self, path: &str, text: &str, rewrite: &super::rewrite::Rewrite) -> String {
        let tree = matches!(
            classify(path),
            Some(HubPath::Api {
                endpoint: ApiEndpoint::Tree,
                ..
            })
        );
        if tree && text.contains("\"xetHash\"") {
            if let Ok(mut listing) = serde_json::from_str::<serde_json::Value>(text) {
                for entry in listing.as_array_mut().into_iter().flatten() {
                    if let Some(entry) = entry.as_object_mut() {
                        entry.remove("xetHash");
                    }
                }
                return serde_json::to_string(&listing).unwrap_or_else(|_| text.to_string());
            }
        }
        rewrite.apply(text)
    }

    fn kept_headers(&self, path: &str) -> &'static [&'static str] {
        match classify(path) {
            Some(HubPath::File { .. }) => FILE_HEADERS,
            Some(HubPath::Api { .. }) => API_HEADERS,
            None => &[],
        }
    }

    /// The hub's CDN hosts for LFS files (and the Xet bridge, which serves
    /// plain HTTP to clients that do not speak Xet).
    fn default_files(&self) -> &'static [&'static str] {
        &[
            "https://cdn-lfs.hf.co",
            "https://cdn-lfs-us-1.hf.co",
            "https://cdn-lfs-eu-1.hf.co",
            "https://cas-bridge.xethub.hf.co",
        ]
    }

    fn refuses_key(&self, key: &str) -> Option<String> {
        match key {
            "require_declared_hash" => Some(
                "a huggingface remote checks every LFS file against the sha256 the hub \
                 declares (X-Linked-Etag); small files in git have no declared sha256"
                    .to_string(),
            ),
            _ => standard_refusal(self.name(), self.digests(), self.packages(), key),
        }
    }

    fn protocol(&self) -> Protocol {
        Protocol::SignedRedirects
    }

    fn digests(&self) -> Option<&dyn Digests> {
        Some(self)
    }

    #[cfg(test)]
    fn conformance(&self) -> super::conformance::Rows {
        tests::rows()
    }
}

impl Digests for Huggingface {
    /// An LFS file's `X-Linked-Etag`: its sha256, quoted (weak or not).
    fn in_head(&self, path: &str, head: &HeaderMap) -> Option<Declared> {
        if !matches!(classify(path), Some(HubPath::File { .. })) {
            return None;
        }
        let value = head.get("x-linked-etag")?.to_str().ok()?;
        let hex = value.trim().trim_start_matches("W/").trim_matches('"');
        Declared::from_hex(Algo::Sha256, hex)
    }
}

/// What a path below a huggingface remote names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HubPath<'a> {
    /// `[{type}s/]{repo}/resolve/{revision}/{file}`.
    File {
        repo: &'a str,
        revision: &'a str,
        file: &'a str,
    },
    /// `api/{type}s/{repo}[/revision/{rev} | /tree/{rev}[/{dir}]]`, query aside.
    Api {
        endpoint: ApiEndpoint,
        /// Empty for a repository's info without a revision.
        revision: &'a str,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiEndpoint {
    /// Repository info (at a revision, or the default branch).
    Info,
    /// A tree listing, paged with `Link`.
    Tree,
}

/// Reads a path (the query, if any, aside).
pub fn classify(path: &str) -> Option<HubPath<'_>> {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    if let Some(rest) = path.strip_prefix("api/") {
        return api(rest);
    }
    let rest = TYPE_PREFIXES
        .iter()
        .find_map(|p| path.strip_prefix(p))
        .unwrap_or(path);
    // `{ns}/{name}/resolve/…`, else a legacy one-part name `{name}/resolve/…`.
    for n_repo in [2, 1] {
        let mut parts = rest.splitn(n_repo + 3, '/');
        let repo_parts: Vec<&str> = parts.by_ref().take(n_repo).collect();
        if repo_parts.len() != n_repo || repo_parts.iter().any(|p| p.is_empty()) {
            continue;
        }
        let (Some("resolve"), Some(revision), Some(file)) =
            (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if revision.is_empty() || file.is_empty() || file.ends_with('/') {
            continue;
        }
        let repo_len = repo_parts.iter().map(|p| p.len()).sum::<usize>() + n_repo - 1;
        return Some(HubPath::File {
            repo: &rest[..repo_len],
            revision,
            file,
        });
    }
    None
}

fn api(rest: &str) -> Option<HubPath<'_>> {
    let rest = ["models/", "datasets/", "spaces/"]
        .iter()
        .find_map(|p| rest.strip_prefix(p))?;
    let segments: Vec<&str> = rest.split('/').collect();
    // The repository is one or two segments; what follows names the endpoint.
    for n_repo in [2, 1] {
        if segments.len() < n_repo || segments[..n_repo].iter().any(|s| s.is_empty()) {
            continue;
        }
        match &segments[n_repo..] {
            [] if n_repo == segments.len() => {
                return Some(HubPath::Api {
                    endpoint: ApiEndpoint::Info,
                    revision: "",
                })
            }
            ["revision", revision] if !revision.is_empty() => {
                return Some(HubPath::Api {
                    endpoint: ApiEndpoint::Info,
                    revision,
                })
            }
            ["tree", revision, ..] if !revision.is_empty() => {
                return Some(HubPath::Api {
                    endpoint: ApiEndpoint::Tree,
                    revision,
                })
            }
            _ => {}
        }
    }
    None
}

/// A full commit hash, as `huggingface_hub` recognises one (`[0-9a-f]{40}`).
pub fn is_commit(revision: &str) -> bool {
    revision.len() == 40
        && revision
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `repo[@revision]` as `warm` takes it: the repository (with its `datasets/`
/// or `spaces/` prefix, if any) and the revision (`main` by default).
pub fn split_snapshot(name: &str) -> Option<(&str, &str)> {
    let (repo, revision) = name.split_once('@').unwrap_or((name, "main"));
    let bare = TYPE_PREFIXES
        .iter()
        .find_map(|p| repo.strip_prefix(p))
        .unwrap_or(repo);
    let ok = !revision.is_empty()
        && (1..=2).contains(&bare.split('/').count())
        && bare.split('/').all(|s| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        });
    ok.then_some((repo, revision))
}

/// The API path of a repository's info at `revision`, and of its recursive
/// tree listing, for a `repo` as [`split_snapshot`] gives it.
pub fn api_paths(repo: &str, revision: &str) -> (String, String) {
    let (kind, bare) = TYPE_PREFIXES
        .iter()
        .find_map(|p| repo.strip_prefix(p).map(|bare| (&p[..p.len() - 1], bare)))
        .unwrap_or(("models", repo));
    let revision =
        percent_encoding::utf8_percent_encode(revision, percent_encoding::NON_ALPHANUMERIC)
            .to_string();
    (
        format!("api/{kind}/{bare}/revision/{revision}"),
        format!("api/{kind}/{bare}/tree/{revision}?recursive=true&expand=false"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::conformance::{Class, Rewritten, Rows};
    use crate::kind::Kind;

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    pub(super) fn rows() -> Rows {
        Rows {
            paths: vec![
                ("org/model/resolve/main/config.json", Class::Mutable),
                ("org/model/resolve/v1.0/model.safetensors", Class::Mutable),
                (
                    "org/model/resolve/0123456789abcdef0123456789abcdef01234567/model.safetensors",
                    Class::Immutable,
                ),
                (
                    "gpt2/resolve/0123456789abcdef0123456789abcdef01234567/sub/dir/w.bin",
                    Class::Immutable,
                ),
                ("datasets/org/data/resolve/main/train.parquet", Class::Mutable),
                ("spaces/org/app/resolve/main/app.py", Class::Mutable),
                ("api/models/org/model", Class::Document),
                ("api/models/org/model/revision/main", Class::Document),
                ("api/datasets/org/data/revision/main", Class::Document),
                (
                    "api/models/org/model/tree/main?recursive=true&expand=false",
                    Class::Document,
                ),
                (
                    "api/models/org/model/tree/0123456789abcdef0123456789abcdef01234567?recursive=true&expand=false",
                    Class::Document,
                ),
                // A short hash is a name the hub resolves, not a commit.
                ("org/model/resolve/0123456/model.bin", Class::Mutable),
                ("org/model/blob/main/config.json", Class::Mutable),
                ("org/model/resolve/main/", Class::Mutable),
            ],
            keys: vec![("org/model/resolve/main/config.json", None)],
            rewrites: vec![Rewritten {
                mirrors: &["https://huggingface.co"],
                files: &["https://cdn-lfs.hf.co"],
                path: "api/models/o/m/tree/main?recursive=true&expand=false",
                body: r#"[{"type":"file","oid":"ab","size":3,"path":"w.bin","xetHash":"cd","lfs":{"oid":"ef","size":3,"pointerSize":134}}]"#,
                // serde_json writes keys in order.
                expected: r#"[{"lfs":{"oid":"ef","pointerSize":134,"size":3},"oid":"ab","path":"w.bin","size":3,"type":"file"}]"#,
            }],
            ..Rows::default()
        }
    }

    #[test]
    fn paths_are_read_with_one_and_two_part_names() {
        assert_eq!(
            classify("org/model/resolve/main/a/b.bin"),
            Some(HubPath::File {
                repo: "org/model",
                revision: "main",
                file: "a/b.bin"
            })
        );
        assert_eq!(
            classify("gpt2/resolve/main/config.json"),
            Some(HubPath::File {
                repo: "gpt2",
                revision: "main",
                file: "config.json"
            })
        );
        // A repository named `resolve` under a namespace.
        assert_eq!(
            classify("user/resolve/resolve/main/x"),
            Some(HubPath::File {
                repo: "user/resolve",
                revision: "main",
                file: "x"
            })
        );
        assert_eq!(
            classify("datasets/org/data/resolve/refs%2Fconvert%2Fparquet/x.parquet"),
            Some(HubPath::File {
                repo: "org/data",
                revision: "refs%2Fconvert%2Fparquet",
                file: "x.parquet"
            })
        );
        assert_eq!(classify("org/model/tree/main"), None);
    }

    #[test]
    fn files_keep_the_hubs_headers_and_never_the_xet_ones() {
        let hf = Kind::named("huggingface").unwrap().ecosystem();
        let kept = hf.kept_headers("org/model/resolve/main/w.bin");
        assert!(kept.contains(&"x-repo-commit") && kept.contains(&"x-linked-etag"));
        assert!(kept.iter().all(|h| !h.starts_with("x-xet")));
        assert_eq!(hf.kept_headers("api/models/o/m/tree/main"), API_HEADERS);
        let query_in_key = |path| hf.plan(path, &HeaderMap::new()).query_in_key;
        assert!(query_in_key("api/models/o/m/tree/main"));
        assert!(!query_in_key("o/m/resolve/main/w.bin"));
    }

    #[test]
    fn the_linked_etag_of_a_file_is_its_declared_sha256() {
        let hf = Kind::named("huggingface").unwrap();
        let sum = "ab".repeat(32);
        let mut head = HeaderMap::new();
        head.insert("x-linked-etag", format!("\"{sum}\"").parse().unwrap());
        let digests = hf.digests().unwrap();
        let declared = digests.in_head("o/m/resolve/main/w.bin", &head).unwrap();
        assert_eq!(declared.to_string(), format!("sha256:{sum}"));
        head.insert("x-linked-etag", format!("W/\"{sum}\"").parse().unwrap());
        assert!(digests.in_head("o/m/resolve/main/w.bin", &head).is_some());
        assert!(digests.in_head("api/models/o/m", &head).is_none());
        head.insert("x-linked-etag", "\"not-a-sha\"".parse().unwrap());
        assert!(digests.in_head("o/m/resolve/main/w.bin", &head).is_none());
    }

    #[test]
    fn snapshots_are_named_repo_at_revision() {
        assert_eq!(split_snapshot("org/model"), Some(("org/model", "main")));
        assert_eq!(split_snapshot("gpt2@v1"), Some(("gpt2", "v1")));
        assert_eq!(
            split_snapshot(&format!("datasets/org/d@{SHA}")),
            Some(("datasets/org/d", SHA))
        );
        assert_eq!(split_snapshot("org/../x"), None);
        assert_eq!(split_snapshot("a/b/c"), None);
        assert_eq!(split_snapshot("org/model@"), None);
        assert_eq!(
            api_paths("datasets/org/d", "refs/pr/1"),
            (
                "api/datasets/org/d/revision/refs%2Fpr%2F1".to_string(),
                "api/datasets/org/d/tree/refs%2Fpr%2F1?recursive=true&expand=false".to_string()
            )
        );
    }

    #[test]
    fn commits_are_forty_lower_case_hex_digits() {
        assert!(is_commit(SHA));
        assert!(!is_commit(&SHA.to_uppercase()));
        assert!(!is_commit(&SHA[..39]));
        assert!(!is_commit("main"));
    }
}
