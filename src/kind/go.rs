//! go: a GOPROXY module proxy. `.info`, `.mod` and `.zip` files are
//! immutable, `@v/list` and `@latest` are not; `sumdb/{db}/…` paths are the
//! checksum database's (`sumdb` mirrors, sum.golang.org by default), whose
//! lookups and tiles never change once published. Go has no index that
//! declares digests here (the go command checks the checksum database itself).

use std::collections::HashMap;

use axum::http::HeaderMap;

use super::guard::{parse_time, Filtered, Judge};
use super::package::Artifact;
use super::{standard_refusal, Ecosystem, Packages, Plan, TimeKey, TimeSource};

pub struct Go;

/// Paths under this prefix are the checksum database's
/// (`/{remote}/sumdb/{db}/{rest}` → `{sumdb_mirror}/{rest}`), as the GOPROXY
/// protocol lets a proxy serve `GOSUMDB`.
pub const SUMDB_PREFIX: &str = "sumdb/";

/// `sumdb/{db}/{rest}`: the database's name and the path within it.
fn sumdb_path(path: &str) -> Option<(&str, &str)> {
    let (db, rest) = path.strip_prefix(SUMDB_PREFIX)?.split_once('/')?;
    (!db.is_empty() && !rest.is_empty()).then_some((db, rest))
}

impl Ecosystem for Go {
    fn name(&self) -> &'static str {
        "go"
    }

    /// Modules' `.info`, `.mod` and `.zip` immutable; the checksum
    /// database's lookups and tiles too (the tree only grows), not `latest`.
    fn plan<'p>(&self, path: &'p str, _request: &HeaderMap) -> Plan<'p> {
        let sumdb = sumdb_path(path);
        let immutable = match sumdb {
            Some((_, rest)) => rest.starts_with("lookup/") || rest.starts_with("tile/"),
            None => [".info", ".mod", ".zip"]
                .iter()
                .any(|ext| path.ends_with(ext)),
        };
        Plan {
            immutable,
            sumdb,
            ..Plan::default()
        }
    }

    /// The checksum database the go command checks modules against
    /// (`GOSUMDB`, by default `sum.golang.org`).
    fn default_sumdb(&self) -> &'static [&'static str] {
        &["https://sum.golang.org"]
    }

    fn refuses_key(&self, key: &str) -> Option<String> {
        match key {
            "sumdb" => None,
            _ => standard_refusal(self.name(), self.digests(), self.packages(), key),
        }
    }

    fn packages(&self) -> Option<&dyn Packages> {
        Some(self)
    }

    #[cfg(test)]
    fn conformance(&self) -> super::conformance::Rows {
        tests::rows()
    }
}

/// Modules and versions for the guard: a version's `.zip`, `.mod` and
/// `.info` are its artifacts, dated by the `.info`'s `Time`; `@v/list` is
/// the document whose refused versions are taken out (the go command picks
/// from it, and asks `@latest` only when it is empty).
impl Packages for Go {
    fn osv_ecosystem(&self) -> Option<&'static str> {
        Some("Go")
    }

    /// The module path as the go command spells it: the proxy protocol's
    /// `!x` is `X`.
    fn normalise(&self, name: &str) -> String {
        let mut out = String::with_capacity(name.len());
        let mut bang = false;
        for c in name.chars() {
            match c {
                '!' => bang = true,
                c if bang => {
                    out.push(c.to_ascii_uppercase());
                    bang = false;
                }
                c => out.push(c),
            }
        }
        out
    }

    /// Refusals name the module as `go.mod` spells it.
    fn shown_name<'a>(&self, _spelt: &'a str, normalised: &'a str) -> &'a str {
        normalised
    }

    fn artifact(&self, path: &str) -> Option<Artifact> {
        let (module, file) = path.split_once("/@v/")?;
        let version = [".zip", ".mod", ".info"]
            .iter()
            .find_map(|ext| file.strip_suffix(ext))?;
        (!module.is_empty() && !version.is_empty() && !version.contains('/')).then(|| Artifact {
            name: module.to_string(),
            version: version.to_string(),
            file: file.to_string(),
        })
    }

    fn document(&self, path: &str) -> Option<String> {
        let module = path.strip_suffix("/@v/list")?;
        (!module.is_empty() && sumdb_path(path).is_none()).then(|| module.to_string())
    }

    /// An `.info` file: `{"Version": …, "Time": …}`.
    fn publish_times(&self, body: &[u8]) -> HashMap<String, i64> {
        let info: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let version = info["Version"].as_str();
        let time = info["Time"].as_str().and_then(parse_time);
        version
            .zip(time)
            .map(|(v, t)| (v.to_string(), t))
            .into_iter()
            .collect()
    }

    fn time_source(&self, artifact: &Artifact) -> Option<TimeSource> {
        Some(TimeSource {
            document: format!("{}/@v/{}.info", artifact.name, artifact.version),
            suffix: "",
            key: TimeKey::Listed(artifact.version.clone()),
        })
    }

    /// The versions of `@v/list`, newest first (semantic versions; what does
    /// not parse last).
    fn dated_versions(&self, name: &str, body: &[u8]) -> Vec<Artifact> {
        let text = String::from_utf8_lossy(body);
        let mut versions: Vec<&str> = text.split_whitespace().collect();
        versions.sort_by_key(|v| {
            std::cmp::Reverse(semver::Version::parse(v.trim_start_matches('v')).ok())
        });
        versions
            .into_iter()
            .map(|version| Artifact {
                name: name.to_string(),
                version: version.to_string(),
                file: format!("{version}.info"),
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
        let text = String::from_utf8_lossy(body);
        let versions: Vec<&str> = text.split_whitespace().collect();
        let kept: Vec<&str> = versions
            .iter()
            .copied()
            .filter(|v| judge.refusal(name, v, times.get(*v).copied()).is_none())
            .collect();
        if kept.len() == versions.len() {
            return Filtered::Unchanged;
        }
        let mut list = kept.join("\n");
        if !list.is_empty() {
            list.push('\n');
        }
        Filtered::Changed(list.into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::conformance::{Class, Rows};
    use crate::kind::Kind;

    pub(super) fn rows() -> Rows {
        Rows {
            paths: vec![
                ("golang.org/x/text/@v/list", Class::Mutable),
                ("golang.org/x/text/@latest", Class::Mutable),
                ("golang.org/x/text/@v/v0.3.0.zip", Class::Immutable),
                ("golang.org/x/text/@v/v0.3.0.mod", Class::Immutable),
                ("golang.org/x/text/@v/v0.3.0.info", Class::Immutable),
                ("sumdb/sum.golang.org/latest", Class::Mutable),
                (
                    "sumdb/sum.golang.org/lookup/golang.org/x/text@v0.3.0",
                    Class::Immutable,
                ),
                ("sumdb/sum.golang.org/tile/8/0/x001/234", Class::Immutable),
                ("sumdb/sum.golang.org/tile/8/1/000.p/5", Class::Immutable),
                ("sumdb/sum.golang.org/supported", Class::Mutable),
                ("api/v1/crates", Class::Mutable),
            ],
            keys: vec![("golang.org/x/text/@v/v0.3.0.zip", None)],
            ..Rows::default()
        }
    }

    #[test]
    fn sumdb_paths_name_the_database() {
        assert_eq!(
            sumdb_path("sumdb/sum.golang.org/lookup/m@v1.0.0"),
            Some(("sum.golang.org", "lookup/m@v1.0.0"))
        );
        assert_eq!(sumdb_path("sumdb/sum.golang.org/"), None);
        assert_eq!(sumdb_path("sumdb//latest"), None);
        let supported = |kind: &str, path: &str| {
            let kind = Kind::named(kind).unwrap();
            kind.plan(path, &HeaderMap::new()).is_sumdb_supported()
        };
        assert!(supported("go", "sumdb/sum.golang.org/supported"));
        assert!(!supported("go", "sumdb/sum.golang.org/supported/x"));
        assert!(!supported("npm", "sumdb/sum.golang.org/supported"));
    }
}
