//! What a lockfile names, whichever format it is read from: an artifact, where
//! it lives under the remote and the digest it must have, and how a parse
//! failure is told (`lockfile` reads the npm, cargo, go and pip formats;
//! `maven`, `gemfile`, `composer`, `helm`, `nuget`, `galaxy`, `renv`, `hexpm`, `condalock`, `terraform` and `conanlock` theirs).

/// One artifact a lockfile names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// What the lines and the summary call it (`lodash@4.17.21`).
    pub name: String,
    pub location: Location,
    pub check: Check,
}

/// Where the artifact is, relative to the remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// An absolute URL as the lockfile has it, mapped onto the remote when
    /// fetched (npm's `resolved`).
    Resolved(String),
    /// A path under the remote (`golang.org/x/text/@v/v0.3.0.zip`).
    Path(String),
    /// The first of these paths under the remote that the server has (a
    /// CRAN package's current file, then its archived copy).
    FirstOf(Vec<String>),
    /// A crate, at the remote's `config.json` download URL.
    Crate { name: String, version: String },
    /// A Python distribution pinned with `==`: every file of that version on
    /// the remote's simple page (those with one of `hashes` when given).
    Pinned {
        name: String,
        version: String,
        hashes: Vec<String>,
    },
    /// A URL on the server (a file a simple page links to).
    Url(String),
    /// A Helm chart of a `Chart.lock`, found by name and version in the
    /// remote's `index.yaml`.
    Chart { name: String, version: String },
    /// A Composer package's archive, found by `reference` in the remote's
    /// p2 file unless `url` is on the server already.
    Composer {
        name: String,
        version: String,
        reference: String,
        url: String,
    },
    /// Ansible collections as `name:specifier`, resolved with their
    /// dependencies to the tarballs the remote's Galaxy API names.
    Galaxy(Vec<String>),
    /// A provider of a `.terraform.lock.hcl` (`host/namespace/type`): the
    /// archives the remote's `{version}.json` lists with one of `hashes`.
    Provider {
        address: String,
        version: String,
        hashes: Vec<String>,
    },
}

/// What the body's digest must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// sha256, as lowercase hex (Cargo.lock's `checksum`).
    Sha256(String),
    /// One of these sha256 values (requirements.txt's `--hash`).
    Sha256Any(Vec<String>),
    /// A Subresource Integrity value (`sha512-…`, npm's `integrity`):
    /// algorithm and digest.
    Integrity(&'static str, Vec<u8>),
    /// The lockfile has no digest this tool can check (go.sum's `h1:` hashes
    /// a zip's file tree, not its bytes).
    Unchecked,
}

/// A parse failure: (1-based line, message).
pub(super) type Failure = (usize, String);

pub(super) fn line_at(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}
