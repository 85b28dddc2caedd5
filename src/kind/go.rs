//! go: a GOPROXY module proxy. `.info`, `.mod` and `.zip` files are
//! immutable, `@v/list` and `@latest` are not; `sumdb/{db}/…` paths are the
//! checksum database's (`sumdb` mirrors, sum.golang.org by default), whose
//! lookups and tiles never change once published. Go has no index that
//! declares digests here (the go command checks the checksum database itself).

use super::{standard_refusal, Ecosystem};

pub struct Go;

/// Paths under this prefix are the checksum database's
/// (`/{remote}/sumdb/{db}/{rest}` → `{sumdb_mirror}/{rest}`), as the GOPROXY
/// protocol lets a proxy serve `GOSUMDB`.
pub const SUMDB_PREFIX: &str = "sumdb/";

impl Ecosystem for Go {
    fn name(&self) -> &'static str {
        "go"
    }

    /// Checksum database: lookups and tiles never change once published (the
    /// tree only grows); `latest` does.
    fn is_immutable(&self, path: &str) -> bool {
        match self.sumdb_path(path) {
            Some((_, rest)) => rest.starts_with("lookup/") || rest.starts_with("tile/"),
            None => [".info", ".mod", ".zip"]
                .iter()
                .any(|ext| path.ends_with(ext)),
        }
    }

    fn sumdb_path<'p>(&self, path: &'p str) -> Option<(&'p str, &'p str)> {
        let (db, rest) = path.strip_prefix(SUMDB_PREFIX)?.split_once('/')?;
        (!db.is_empty() && !rest.is_empty()).then_some((db, rest))
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

    #[cfg(test)]
    fn conformance(&self) -> super::conformance::Rows {
        tests::rows()
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
            Go.sumdb_path("sumdb/sum.golang.org/lookup/m@v1.0.0"),
            Some(("sum.golang.org", "lookup/m@v1.0.0"))
        );
        assert_eq!(Go.sumdb_path("sumdb/sum.golang.org/"), None);
        assert_eq!(Go.sumdb_path("sumdb//latest"), None);
        let go = Kind::named("go").unwrap();
        assert!(go.is_sumdb_supported("sumdb/sum.golang.org/supported"));
        assert!(!go.is_sumdb_supported("sumdb/sum.golang.org/supported/x"));
        let npm = Kind::named("npm").unwrap();
        assert!(!npm.is_sumdb_supported("sumdb/sum.golang.org/supported"));
    }
}
