//! `packages.lock.json` (NuGet's lock file, `RestorePackagesWithLockFile`)
//! for `warm`: every package of every target framework with a `resolved`
//! version (project references have none), at nuget.org's flat-container
//! path below the remote (`v3-flatcontainer/{id}/{version}/{id}.{version}.nupkg`,
//! lower case), checked against its `contentHash` (the SHA-512 of the
//! `.nupkg`, base64). A package listed under several frameworks is fetched
//! once.

use base64::Engine as _;
use serde_json::Value;

use super::artifact::{Artifact, Check, Failure, Location};

pub fn packages_lock(text: &str) -> Result<Vec<Artifact>, Failure> {
    let lock: Value = serde_json::from_str(text)
        .map_err(|e| (e.line(), format!("not a packages.lock.json: {e}")))?;
    let Some(frameworks) = lock["dependencies"].as_object() else {
        return Err((1, "no `dependencies` object".into()));
    };
    let mut artifacts: Vec<Artifact> = Vec::new();
    for packages in frameworks.values().filter_map(Value::as_object) {
        for (id, package) in packages {
            let Some(version) = package["resolved"].as_str() else {
                continue;
            };
            let (id, version) = (id.to_ascii_lowercase(), version.to_ascii_lowercase());
            let name = format!("{id}@{version}");
            if artifacts.iter().any(|a| a.name == name) {
                continue;
            }
            let check = package["contentHash"]
                .as_str()
                .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
                .map_or(Check::Unchecked, |sha512| {
                    Check::Integrity("sha512", sha512)
                });
            artifacts.push(Artifact {
                name,
                location: Location::Path(format!(
                    "v3-flatcontainer/{id}/{version}/{id}.{version}.nupkg"
                )),
                check,
            });
        }
    }
    Ok(artifacts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_resolved_package_once_at_its_flat_container_path() {
        let lock = r#"{"version": 1, "dependencies": {
            "net8.0": {"Newtonsoft.Json": {"type": "Direct", "requested": "[13.0.1, )", "resolved": "13.0.1", "contentHash": "q83vEjRWeJA="},
                       "app.lib": {"type": "Project"}},
            "net6.0": {"Newtonsoft.Json": {"type": "Direct", "resolved": "13.0.1", "contentHash": "q83vEjRWeJA="}}}}"#;
        let artifacts = packages_lock(lock).unwrap();
        assert_eq!(artifacts.len(), 1);
        assert_eq!(artifacts[0].name, "newtonsoft.json@13.0.1");
        assert_eq!(
            artifacts[0].location,
            Location::Path(
                "v3-flatcontainer/newtonsoft.json/13.0.1/newtonsoft.json.13.0.1.nupkg".into()
            )
        );
        assert!(matches!(artifacts[0].check, Check::Integrity("sha512", _)));
        assert!(packages_lock("{}").is_err());
    }
}
