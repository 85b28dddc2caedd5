//! `conan.lock` for `warm`: every recipe revision of `requires`,
//! `build_requires`, `python_requires` and `config_requires`
//! (`name/version[@user/channel]#rrev%time`), at its `conanfile.py`, which
//! the proxy checks against the revision's `conanmanifest.txt` (read and
//! kept on the way). Binaries are not named: a package id depends on the
//! profile, which the lockfile does not hold. A reference without a
//! revision is an error.

use serde_json::Value;

use super::artifact::{line_at, Artifact, Check, Failure, Location};

const LISTS: [&str; 4] = [
    "requires",
    "build_requires",
    "python_requires",
    "config_requires",
];

pub fn conan_lock(text: &str) -> Result<Vec<Artifact>, Failure> {
    let lock: Value =
        serde_json::from_str(text).map_err(|e| (e.line(), format!("not a conan.lock: {e}")))?;
    if !lock["version"].is_string() {
        return Err((1, "no `version`: not a conan.lock".into()));
    }
    let mut artifacts = Vec::new();
    for list in LISTS {
        for entry in lock[list].as_array().into_iter().flatten() {
            let Some(entry) = entry.as_str() else {
                continue;
            };
            let line = text.find(entry).map_or(1, |at| line_at(text, at));
            let path = recipe_file(entry)
                .ok_or_else(|| (line, format!("{entry:?} is not name/version#revision")))?;
            artifacts.push(Artifact {
                name: entry.split('%').next().unwrap_or(entry).to_string(),
                location: Location::Path(path),
                check: Check::Unchecked,
            });
        }
    }
    Ok(artifacts)
}

/// `v2/conans/<name>/<version>/<user>/<channel>/revisions/<rrev>/files/conanfile.py`
/// of a locked reference.
fn recipe_file(entry: &str) -> Option<String> {
    let reference = entry.split('%').next()?;
    let (reference, revision) = reference.split_once('#')?;
    let (name_version, user_channel) = reference.split_once('@').unwrap_or((reference, "_/_"));
    let (name, version) = name_version.split_once('/')?;
    let (user, channel) = user_channel.split_once('/')?;
    let parts = [name, version, user, channel, revision];
    let good = |p: &&str| !p.is_empty() && !p.contains(['/', '?', '#', '%']);
    parts.iter().all(good).then(|| {
        format!(
            "v2/conans/{name}/{version}/{user}/{channel}/revisions/{revision}/files/conanfile.py"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_locked_recipe_revision_at_its_conanfile() {
        let lock = r#"{
    "version": "0.5",
    "requires": [
        "libb/1.0#3f2c0765d2504c5d8a9bf287f0534dce%1796420325.77",
        "liba/1.0@acme/stable#331da349ab9fac573da2ca7ab4d98dfd%1796420318.5"
    ],
    "build_requires": [],
    "python_requires": ["pyreq/0.1#abc"]
}"#;
        let artifacts = conan_lock(lock).unwrap();
        let paths: Vec<_> = artifacts.iter().map(|a| &a.location).collect();
        assert_eq!(
            paths,
            [
                &Location::Path("v2/conans/libb/1.0/_/_/revisions/3f2c0765d2504c5d8a9bf287f0534dce/files/conanfile.py".into()),
                &Location::Path("v2/conans/liba/1.0/acme/stable/revisions/331da349ab9fac573da2ca7ab4d98dfd/files/conanfile.py".into()),
                &Location::Path("v2/conans/pyreq/0.1/_/_/revisions/abc/files/conanfile.py".into()),
            ]
        );
        assert_eq!(
            artifacts[0].name,
            "libb/1.0#3f2c0765d2504c5d8a9bf287f0534dce"
        );
        let unrevised = "{\"version\": \"0.5\",\n\"requires\": [\"liba/1.0\"]}";
        assert_eq!(conan_lock(unrevised).unwrap_err().0, 2);
        assert!(conan_lock("{}").is_err());
    }
}
