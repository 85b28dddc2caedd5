//! Lockfiles read by `warm`, each into the artifacts it names: where each one
//! lives under the remote and the digest it must have. A file that cannot be
//! read is an error naming the file and line, and then nothing is fetched.

use std::path::Path;

use base64::Engine;

use super::artifact::{line_at, Failure};
pub use super::artifact::{Artifact, Check, Location};

/// The kinds of lockfile, by file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    PackageLock,
    CargoLock,
    GoSum,
    Requirements,
    PomXml,
    GradleLock,
    GemfileLock,
    ComposerLock,
    GalaxyRequirements,
    NugetLock,
    ChartLock,
    RenvLock,
    RebarLock,
    MixLock,
    CondaLock,
    TerraformLock,
    ConanLock,
}

impl Kind {
    pub fn of(path: &Path) -> Option<Kind> {
        match path.file_name()?.to_str()? {
            "package-lock.json" | "npm-shrinkwrap.json" => Some(Kind::PackageLock),
            "Cargo.lock" => Some(Kind::CargoLock),
            "go.sum" => Some(Kind::GoSum),
            "pom.xml" => Some(Kind::PomXml),
            "gradle.lockfile" => Some(Kind::GradleLock),
            "Gemfile.lock" | "gems.locked" => Some(Kind::GemfileLock),
            "composer.lock" => Some(Kind::ComposerLock),
            "requirements.yml" | "requirements.yaml" => Some(Kind::GalaxyRequirements),
            "packages.lock.json" => Some(Kind::NugetLock),
            "Chart.lock" => Some(Kind::ChartLock),
            ".terraform.lock.hcl" => Some(Kind::TerraformLock),
            "renv.lock" => Some(Kind::RenvLock),
            "rebar.lock" => Some(Kind::RebarLock),
            "mix.lock" => Some(Kind::MixLock),
            "pixi.lock" | "conda-lock.yml" | "conda-lock.yaml" => Some(Kind::CondaLock),
            "conan.lock" => Some(Kind::ConanLock),
            name if name.ends_with(".txt") => Some(Kind::Requirements),
            _ => None,
        }
    }
}

/// Reads one lockfile. Errors read `file:line: message`.
pub fn read(path: &Path) -> Result<Vec<Artifact>, String> {
    let shown = path.display();
    let kind = Kind::of(path).ok_or_else(|| {
        format!("{shown}: not a lockfile warm reads (package-lock.json, Cargo.lock, go.sum, requirements *.txt, pom.xml, gradle.lockfile, Gemfile.lock, composer.lock, packages.lock.json, Chart.lock, requirements.yml, renv.lock, rebar.lock, mix.lock, pixi.lock, conda-lock.yml, .terraform.lock.hcl, conan.lock)")
    })?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{shown}: {e}"))?;
    let parsed = match kind {
        Kind::PackageLock => package_lock(&text),
        Kind::CargoLock => cargo_lock(&text),
        Kind::GoSum => go_sum(&text),
        Kind::Requirements => requirements(&text),
        Kind::PomXml => super::maven::pom_xml(&text),
        Kind::GradleLock => super::maven::gradle_lockfile(&text),
        Kind::GemfileLock => super::gemfile::gemfile_lock(&text),
        Kind::ComposerLock => super::composer::composer_lock(&text),
        Kind::GalaxyRequirements => super::galaxy::requirements_yml(&text),
        Kind::NugetLock => super::nuget::packages_lock(&text),
        Kind::ChartLock => super::helm::chart_lock(&text),
        Kind::RenvLock => super::renv::renv_lock(&text),
        Kind::RebarLock => super::hexpm::rebar_lock(&text),
        Kind::MixLock => super::hexpm::mix_lock(&text),
        Kind::CondaLock => super::condalock::conda_lock(&text),
        Kind::TerraformLock => super::terraform::lock_hcl(&text),
        Kind::ConanLock => super::conanlock::conan_lock(&text),
    };
    parsed.map_err(|(line, message)| format!("{shown}:{line}: {message}"))
}

/// The line of the first occurrence of `needle` (1 if absent).
fn line_of(text: &str, needle: &str) -> usize {
    text.find(needle).map_or(1, |at| line_at(text, at))
}

/// `package-lock.json` v2 or v3: every entry of `packages` with a `resolved`
/// URL (links, the root and bundled dependencies have none).
pub fn package_lock(text: &str) -> Result<Vec<Artifact>, Failure> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| (e.line(), e.to_string()))?;
    match json.get("lockfileVersion").and_then(|v| v.as_u64()) {
        Some(2 | 3) => {}
        Some(v) => {
            return Err((
                line_of(text, "\"lockfileVersion\""),
                format!("lockfileVersion {v} is not read; npm 7 and later write 2 or 3"),
            ))
        }
        None => return Err((1, "no lockfileVersion: not a package-lock.json".into())),
    }
    let Some(packages) = json.get("packages").and_then(|p| p.as_object()) else {
        return Err((1, "no `packages` object".into()));
    };
    let mut artifacts = Vec::new();
    for (key, package) in packages {
        let Some(resolved) = package.get("resolved").and_then(|r| r.as_str()) else {
            continue;
        };
        let at = || line_of(text, &format!("{key:?}"));
        if !(resolved.starts_with("http://") || resolved.starts_with("https://")) {
            // `file:` tarballs and git dependencies are not in a registry.
            continue;
        }
        let name = key.rsplit("node_modules/").next().unwrap_or(key);
        let version = package
            .get("version")
            .and_then(|v| v.as_str())
            .unwrap_or("?");
        let check = match package.get("integrity").and_then(|i| i.as_str()) {
            None => Check::Unchecked,
            Some(sri) => integrity(sri).ok_or_else(|| {
                (
                    at(),
                    format!("`integrity` of {key} is not a Subresource Integrity value"),
                )
            })?,
        };
        artifacts.push(Artifact {
            name: format!("{name}@{version}"),
            location: Location::Resolved(resolved.to_string()),
            check,
        });
    }
    Ok(artifacts)
}

/// The strongest hash of a Subresource Integrity value (several may be
/// listed, space-separated); `Unchecked` when it has only hashes this tool
/// does not compute (sha1, of very old packages); `None` when malformed.
fn integrity(sri: &str) -> Option<Check> {
    let mut best: Option<Check> = None;
    for item in sri.split_whitespace() {
        let (algorithm, digest) = item.split_once('-')?;
        let digest = digest.split('?').next()?;
        let algorithm = match algorithm {
            "sha512" => "sha512",
            "sha256" => "sha256",
            _ => continue,
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(digest)
            .ok()?;
        if !matches!(best, Some(Check::Integrity("sha512", _))) {
            best = Some(Check::Integrity(algorithm, bytes));
        }
    }
    Some(best.unwrap_or(Check::Unchecked))
}

#[derive(serde::Deserialize)]
struct CargoLock {
    #[serde(default)]
    package: Vec<CargoPackage>,
}

#[derive(serde::Deserialize)]
struct CargoPackage {
    name: String,
    version: String,
    source: Option<String>,
    checksum: Option<String>,
}

/// `Cargo.lock`: every package from a registry, with its `checksum`, and the
/// sparse index file of each crate (cargo reads it even with a lockfile).
/// Path and git dependencies are not in a registry and are skipped.
pub fn cargo_lock(text: &str) -> Result<Vec<Artifact>, Failure> {
    let lock: CargoLock = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |span| line_at(text, span.start));
        (line, e.message().to_string())
    })?;
    let mut artifacts = Vec::new();
    let mut indexed = std::collections::BTreeSet::new();
    for package in lock.package {
        let from_registry = package
            .source
            .as_deref()
            .is_some_and(|s| s.starts_with("registry+") || s.starts_with("sparse+"));
        if !from_registry {
            continue;
        }
        let Some(checksum) = package.checksum else {
            return Err((
                line_of(text, &format!("name = \"{}\"", package.name)),
                format!("{} {} has no checksum", package.name, package.version),
            ));
        };
        if checksum.len() != 64 || !checksum.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err((
                line_of(text, &checksum),
                format!(
                    "the checksum of {} {} is not sha256 hex",
                    package.name, package.version
                ),
            ));
        }
        let lower = package.name.to_ascii_lowercase();
        if indexed.insert(lower.clone()) {
            artifacts.push(Artifact {
                name: format!("{} (index)", package.name),
                location: Location::Path(format!("{}/{lower}", cargo_prefix(&lower))),
                check: Check::Unchecked,
            });
        }
        artifacts.push(Artifact {
            name: format!("{}@{}", package.name, package.version),
            location: Location::Crate {
                name: package.name,
                version: package.version,
            },
            check: Check::Sha256(checksum.to_ascii_lowercase()),
        });
    }
    Ok(artifacts)
}

/// Cargo's index directory of a crate: `1`, `2`, `3/{first}`, or
/// `{first two}/{next two}`.
pub fn cargo_prefix(name: &str) -> String {
    match name.len() {
        1 => "1".to_string(),
        2 => "2".to_string(),
        3 => format!("3/{}", &name[..1]),
        _ => format!("{}/{}", &name[..2], &name[2..4]),
    }
}

/// `go.sum`: each `module version h1:…` line names the module's `.zip` and
/// `.info` (which `go mod download` reads too), each
/// `module version/go.mod h1:…` line its `.mod`.
pub fn go_sum(text: &str) -> Result<Vec<Artifact>, Failure> {
    let mut artifacts = Vec::new();
    for (idx, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [] => continue,
            [module, version, hash] if hash.starts_with("h1:") => {
                let (version, kinds): (&str, &[&str]) = match version.strip_suffix("/go.mod") {
                    Some(v) => (v, &["mod"]),
                    None => (version, &["zip", "info"]),
                };
                for kind in kinds {
                    artifacts.push(Artifact {
                        name: format!("{module}@{version} .{kind}"),
                        location: Location::Path(format!(
                            "{}/@v/{version}.{kind}",
                            go_escape(module)
                        )),
                        check: Check::Unchecked,
                    });
                }
            }
            _ => return Err((idx + 1, "expected `module version h1:hash`".to_string())),
        }
    }
    Ok(artifacts)
}

/// `requirements.txt` with every requirement pinned with `==` (as
/// `pip freeze` and `pip-compile` write them), with `--hash=sha256:…` when
/// present. Continuation lines are joined; comments, blank lines and option
/// lines (`--index-url`, `-r other.txt`) are skipped; extras and environment
/// markers do not change what is fetched.
pub fn requirements(text: &str) -> Result<Vec<Artifact>, Failure> {
    let mut artifacts = Vec::new();
    let mut logical = String::new();
    let mut first_line = 0;
    for (idx, raw) in text.lines().enumerate() {
        if logical.is_empty() {
            first_line = idx + 1;
        }
        let line = match raw.find(" #") {
            Some(at) => &raw[..at],
            None if raw.trim_start().starts_with('#') => "",
            None => raw,
        };
        if let Some(continued) = line.trim_end().strip_suffix('\\') {
            logical.push_str(continued);
            logical.push(' ');
            continue;
        }
        logical.push_str(line);
        let requirement = std::mem::take(&mut logical);
        if let Some(artifact) = pinned(requirement.trim()).map_err(|m| (first_line, m))? {
            artifacts.push(artifact);
        }
    }
    Ok(artifacts)
}

/// One logical requirement line; `None` for a blank or option line.
fn pinned(line: &str) -> Result<Option<Artifact>, String> {
    if line.is_empty() || line.starts_with('-') {
        return Ok(None);
    }
    let mut words = line.split_whitespace();
    let spec = words.next().unwrap_or_default();
    let mut hashes = Vec::new();
    for option in words {
        match option.strip_prefix("--hash=") {
            Some(hash) => match hash.strip_prefix("sha256:") {
                Some(hex) if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
                    hashes.push(hex.to_ascii_lowercase())
                }
                _ => return Err(format!("`{option}`: only sha256 hashes are checked")),
            },
            // An environment marker after `;` or a lone `;`.
            None => break,
        }
    }
    let spec = spec.split(';').next().unwrap_or_default();
    let Some((name, version)) = spec.split_once("==") else {
        return Err(format!(
            "`{spec}` is not pinned with ==: warm fetches exact versions"
        ));
    };
    let name = name.split('[').next().unwrap_or_default().trim();
    let version = version.trim_start_matches('=').trim();
    if name.is_empty() || version.is_empty() || version.contains(['*', ',']) {
        return Err(format!("`{spec}` is not pinned to one version"));
    }
    Ok(Some(Artifact {
        name: format!("{name}=={version}"),
        location: Location::Pinned {
            name: name.to_string(),
            version: version.to_string(),
            hashes,
        },
        check: Check::Unchecked,
    }))
}

/// The module proxy's case encoding: each capital letter becomes `!` and the
/// letter in lower case.
fn go_escape(module: &str) -> String {
    let mut out = String::with_capacity(module.len());
    for c in module.chars() {
        if c.is_ascii_uppercase() {
            out.push('!');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_lock_names_registry_tarballs_with_their_integrity() {
        let text = r#"{
  "name": "app",
  "lockfileVersion": 3,
  "packages": {
    "": { "name": "app" },
    "node_modules/a": {
      "version": "1.0.0",
      "resolved": "https://registry.npmjs.org/a/-/a-1.0.0.tgz",
      "integrity": "sha1-AAAA sha512-AAECAw=="
    },
    "node_modules/a/node_modules/@s/b": {
      "version": "2.0.0",
      "resolved": "https://registry.npmjs.org/@s/b/-/b-2.0.0.tgz"
    },
    "node_modules/local": { "resolved": "file:../local", "link": true }
  }
}"#;
        let artifacts = package_lock(text).unwrap();
        assert_eq!(artifacts.len(), 2);
        assert_eq!(artifacts[0].name, "a@1.0.0");
        assert_eq!(
            artifacts[0].check,
            Check::Integrity("sha512", vec![0, 1, 2, 3])
        );
        assert_eq!(artifacts[1].name, "@s/b@2.0.0");
        assert_eq!(artifacts[1].check, Check::Unchecked);
    }

    #[test]
    fn unreadable_lockfiles_name_the_line() {
        let broken = "{\n  \"lockfileVersion\": 3,\n  \"packages\": {\n    \"x\": }\n}";
        assert_eq!(package_lock(broken).unwrap_err().0, 4);
        let v1 = "{\n  \"name\": \"a\",\n  \"lockfileVersion\": 1\n}";
        let (line, message) = package_lock(v1).unwrap_err();
        assert_eq!(line, 3);
        assert!(message.contains("lockfileVersion 1"), "{message}");
        let cargo = "version = 3\n\n[[package]]\nname = \"a\"\nversion = = \"1\"\n";
        assert_eq!(cargo_lock(cargo).unwrap_err().0, 5);
        assert_eq!(go_sum("a v1 h1:x=\nb v1\n").unwrap_err().0, 2);
    }

    #[test]
    fn cargo_lock_names_registry_crates_with_their_checksum() {
        let sum = "ab".repeat(32);
        let text = format!(
            "version = 3\n\n[[package]]\nname = \"app\"\nversion = \"0.1.0\"\n\n\
             [[package]]\nname = \"serde\"\nversion = \"1.0.0\"\n\
             source = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"{sum}\"\n"
        );
        let artifacts = cargo_lock(&text).unwrap();
        assert_eq!(
            artifacts,
            [
                Artifact {
                    name: "serde (index)".into(),
                    location: Location::Path("se/rd/serde".into()),
                    check: Check::Unchecked,
                },
                Artifact {
                    name: "serde@1.0.0".into(),
                    location: Location::Crate {
                        name: "serde".into(),
                        version: "1.0.0".into()
                    },
                    check: Check::Sha256(sum),
                },
            ]
        );
    }

    #[test]
    fn requirements_are_pinned_with_their_hashes() {
        let hash = "AB".repeat(32);
        let text = format!(
            "# frozen\n--index-url https://pypi.org/simple\n\nrequests[socks]==2.31.0 \\\n    --hash=sha256:{hash}\n\
             six==1.16.0 ; python_version >= \"3\"  # why\n"
        );
        let artifacts = requirements(&text).unwrap();
        assert_eq!(artifacts.len(), 2);
        assert_eq!(
            artifacts[0].location,
            Location::Pinned {
                name: "requests".into(),
                version: "2.31.0".into(),
                hashes: vec![hash.to_lowercase()]
            }
        );
        assert_eq!(artifacts[1].name, "six==1.16.0");
        let (line, message) = requirements("a==1\n\nflask>=2\n").unwrap_err();
        assert_eq!(line, 3);
        assert!(message.contains("not pinned with =="), "{message}");
    }

    #[test]
    fn go_sum_names_zips_and_mods_with_escaped_paths() {
        let artifacts = go_sum(
            "github.com/BurntSushi/toml v1.2.0 h1:x=\ngithub.com/BurntSushi/toml v1.2.0/go.mod h1:y=\n",
        )
        .unwrap();
        assert_eq!(
            artifacts[0].location,
            Location::Path("github.com/!burnt!sushi/toml/@v/v1.2.0.zip".into())
        );
        assert_eq!(
            artifacts[1].location,
            Location::Path("github.com/!burnt!sushi/toml/@v/v1.2.0.info".into())
        );
        assert_eq!(
            artifacts[2].location,
            Location::Path("github.com/!burnt!sushi/toml/@v/v1.2.0.mod".into())
        );
    }
}
