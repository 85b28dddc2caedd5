//! Fuzzes every document parser the proxy runs on upstream bytes: the first
//! byte picks a kind and one of its document paths, the rest is the body.
//! For each: declared digests learned (`Digests::learn`), publish times and
//! dated versions read, the guard's filter (a deny rule and a cooldown), the
//! index listing, and the rewrite for the proxy's base. None may panic, and
//! a body the filter changes stays within the unpacking bound.
//!
//! Covered: PyPI simple (HTML and JSON) and the JSON API, npm packuments,
//! cargo index lines and `config.json`, Maven metadata, rpm `repomd.xml` and
//! primaries, apt `Release`/`Packages`, go `@v/list`, RubyGems' compact
//! index and versions API, Composer p2, the Hugging Face tree, OCI manifests.
#![no_main]

use std::collections::HashMap;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mirrorcache::config::Config;
use mirrorcache::kind::declared::Document;
use mirrorcache::kind::guard::Judge;
use mirrorcache::kind::rewrite::Rewrite;

/// (kind, path of a document of that kind).
const CASES: &[(&str, &str)] = &[
    ("pypi", "simple/pkg/"),
    ("pypi", "pypi/pkg/json"),
    ("npm", "pkg"),
    ("npm", "@scope%2Fpkg"),
    ("cargo", "3/p/pkg"),
    ("cargo", "pk/g/pkg"),
    ("cargo", "config.json"),
    ("maven", "org/example/pkg/maven-metadata.xml"),
    ("rpm", "repodata/repomd.xml"),
    ("rpm", "repodata/abc-primary.xml"),
    ("rpm", "repodata/abc-primary.xml.gz"),
    ("apt", "dists/stable/Release"),
    ("apt", "dists/stable/main/binary-amd64/Packages"),
    ("apt", "dists/stable/main/binary-amd64/Packages.gz"),
    ("go", "example.com/m/@v/list"),
    ("rubygems", "info/pkg"),
    ("rubygems", "versions"),
    ("rubygems", "api/v1/versions/pkg.json"),
    ("composer", "p2/vendor/pkg.json"),
    ("composer", "packages.json"),
    ("huggingface", "api/models/org/m/tree/main"),
    ("oci", "v2/library/alpine/manifests/latest"),
];

/// One remote per kind, each with a deny rule and a cooldown, so the
/// filter runs.
fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let mut text = String::from("[server]\nlisten = \"127.0.0.1:0\"\n");
        let mut seen = Vec::new();
        for (kind, _) in CASES {
            if seen.contains(kind) {
                continue;
            }
            seen.push(*kind);
            // The kinds whose packages `deny` and `min_release_age` name.
            let guard = match *kind {
                "pypi" | "npm" | "cargo" | "go" | "maven" | "rubygems" | "composer" => {
                    "min_release_age = \"7d\"\ndeny = [\"pkg\"]\n"
                }
                _ => "",
            };
            text.push_str(&format!(
                "[[remote]]\nname = \"{kind}\"\nkind = \"{kind}\"\nmirrors = [\"https://mirror.example/{kind}\"]\n{guard}"
            ));
        }
        Config::parse(&text, "fuzz.toml").expect("the fuzz config parses")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    let (kind_name, path) = CASES[usize::from(pick) % CASES.len()];
    let config = config();
    let remote = config.remotes.iter().find(|r| r.name == kind_name).expect("a remote per kind");
    let kind = remote.kind;
    let ecosystem = kind.ecosystem();
    if let Some(digests) = kind.digests() {
        let document = Document::new(&remote.name, &remote.mirrors, &remote.files, path)
            .with_max_unpacked(1 << 20);
        let _ = digests.learn(&document, body);
    }
    if let Some(packages) = kind.packages() {
        let times = packages.publish_times(body);
        if let Some(name) = packages.document(path) {
            let _ = packages.dated_versions(&name, body);
            let judge = Judge::new(&remote.guard, packages, 1_800_000_000_000);
            let _ = packages.filter(&judge, &name, body, &times, "");
            let _ = packages.filter(&judge, &name, body, &HashMap::new(), "");
        }
        let _ = packages.index_listing(path, body);
    }
    let rewrite = Rewrite::new(&remote.name, &remote.mirrors, &remote.files, "http://proxy.example/r");
    let _ = ecosystem.rewritten_with(path, body);
    let _ = ecosystem.rewrite_body(path, body.to_vec(), &rewrite, &[]);
});
