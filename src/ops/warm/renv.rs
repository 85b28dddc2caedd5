//! `renv.lock` for `warm`: every package of `Packages` installed from a
//! repository (`"Source": "Repository"`; GitHub, local and Bioconductor
//! sources are left out), at `src/contrib/<pkg>_<version>.tar.gz`, or at
//! `src/contrib/Archive/<pkg>/` once a newer version has replaced it.
//! Unchecked here: renv's `Hash` is of the package's `DESCRIPTION`, not of
//! its tarball (the proxy checks the tarball against the `MD5sum` its index
//! declares).

use serde_json::Value;

use super::artifact::{Artifact, Check, Failure, Location};

pub fn renv_lock(text: &str) -> Result<Vec<Artifact>, Failure> {
    let lock: Value =
        serde_json::from_str(text).map_err(|e| (e.line(), format!("not a renv.lock: {e}")))?;
    let Some(packages) = lock["Packages"].as_object() else {
        return Err((1, "no `Packages` object: not a renv.lock".into()));
    };
    let mut artifacts = Vec::new();
    for (key, package) in packages {
        if package["Source"].as_str() != Some("Repository") {
            continue;
        }
        let name = package["Package"].as_str().unwrap_or(key);
        let Some(version) = package["Version"].as_str() else {
            return Err((1, format!("package {key} has no `Version`")));
        };
        let file = format!("{name}_{version}.tar.gz");
        artifacts.push(Artifact {
            name: format!("{name}@{version}"),
            location: Location::FirstOf(vec![
                format!("src/contrib/{file}"),
                format!("src/contrib/Archive/{name}/{file}"),
            ]),
            check: Check::Unchecked,
        });
    }
    Ok(artifacts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_packages_at_their_current_then_archived_path() {
        let lock = r#"{"R": {"Version": "4.2.2", "Repositories": [{"Name": "CRAN", "URL": "https://cloud.r-project.org"}]},
            "Packages": {
              "mcleaf": {"Package": "mcleaf", "Version": "1.0.0", "Source": "Repository", "Repository": "CRAN", "Hash": "aa"},
              "mcgit": {"Package": "mcgit", "Version": "0.1", "Source": "GitHub", "RemoteRepo": "x"}
            }}"#;
        let artifacts = renv_lock(lock).unwrap();
        assert_eq!(artifacts.len(), 1);
        assert_eq!(artifacts[0].name, "mcleaf@1.0.0");
        assert_eq!(
            artifacts[0].location,
            Location::FirstOf(vec![
                "src/contrib/mcleaf_1.0.0.tar.gz".into(),
                "src/contrib/Archive/mcleaf/mcleaf_1.0.0.tar.gz".into()
            ])
        );
        assert!(renv_lock("{}").is_err());
        let broken = r#"{"Packages": {"x": {"Source": "Repository"}}}"#;
        assert!(renv_lock(broken).unwrap_err().1.contains("Version"));
    }
}
