//! generic: any HTTP file tree. Nothing is immutable unless the remote's
//! `immutable` patterns say so; nothing is rewritten, declared or filtered.

use super::Ecosystem;

pub struct Generic;

impl Ecosystem for Generic {
    fn name(&self) -> &'static str {
        "generic"
    }

    #[cfg(test)]
    fn conformance(&self) -> super::conformance::Rows {
        tests::rows()
    }
}

#[cfg(test)]
mod tests {
    use crate::kind::conformance::{Class, Rows};
    use crate::kind::Kind;

    pub(super) fn rows() -> Rows {
        Rows {
            paths: vec![
                ("sumdb/sum.golang.org/tile/8/0/000", Class::Mutable),
                ("-/v1/search", Class::Mutable),
                ("pool/x.deb", Class::Mutable),
            ],
            keys: vec![("any/file.bin", None)],
            ..Rows::default()
        }
    }

    #[test]
    fn generic_paths_have_no_checksum_database() {
        let generic = Kind::named("generic").unwrap();
        assert_eq!(generic.sumdb_path("sumdb/sum.golang.org/latest"), None);
    }
}
