//! `rebar.lock` and `mix.lock` for `warm`: every Hex package each names, at
//! `tarballs/<name>-<version>.tar` (under `repos/<org>/` for an
//! organization's), checked against its outer checksum (the sha256 of the
//! tarball: `pkg_hash_ext` in `rebar.lock`, the last checksum of a `mix.lock`
//! entry) where the lockfile has one. Git and path dependencies are left
//! out.

use std::collections::HashMap;

use super::artifact::{line_at, Artifact, Check, Failure, Location};

/// The binaries (`<<"…">>`) of `text`, in order.
fn binaries(text: &str) -> Vec<&str> {
    text.split("<<\"")
        .skip(1)
        .filter_map(|rest| rest.split_once("\">>").map(|(value, _)| value))
        .collect()
}

/// The path of `name`'s tarball at `version` in repository `repo`.
fn tarball(repo: &str, name: &str, version: &str) -> String {
    match repo.split_once(':') {
        Some((_, org)) if !org.is_empty() => format!("repos/{org}/tarballs/{name}-{version}.tar"),
        _ => format!("tarballs/{name}-{version}.tar"),
    }
}

fn check(hash: Option<&String>) -> Check {
    hash.map_or(Check::Unchecked, |hex| {
        Check::Sha256(hex.to_ascii_lowercase())
    })
}

/// rebar3's lock: `{"1.2.0", [{<<"dep">>, {pkg, <<"name">>, <<"version">>[,
/// <<"repo">>]}, level}, …]}.` then `[{pkg_hash, …}, {pkg_hash_ext, [{<<"dep">>,
/// <<"HEX">>}, …]}].`
pub fn rebar_lock(text: &str) -> Result<Vec<Artifact>, Failure> {
    let mut outer: HashMap<&str, String> = HashMap::new();
    if let Some((_, ext)) = text.split_once("{pkg_hash_ext,") {
        let pairs = binaries(ext.split(']').next().unwrap_or(""));
        for pair in pairs.chunks(2) {
            if let [dep, hash] = pair {
                outer.insert(dep, hash.to_string());
            }
        }
    }
    let mut artifacts = Vec::new();
    for (at, _) in text.match_indices("{pkg,") {
        let entry = &text[at..];
        let entry = &entry[..entry.find('}').unwrap_or(entry.len())];
        let found = binaries(entry);
        let (Some(name), Some(version)) = (found.first(), found.get(1)) else {
            return Err((
                line_at(text, at),
                "expected {pkg, <<\"name\">>, <<\"version\">>}".into(),
            ));
        };
        // The dependency's own name (an alias) keys its hash.
        let before = &text[..at];
        let dep = before
            .rfind("{<<\"")
            .and_then(|open| binaries(&before[open..]).first().copied())
            .unwrap_or(name);
        artifacts.push(Artifact {
            name: format!("{name}@{version}"),
            location: Location::Path(tarball(found.get(2).unwrap_or(&"hexpm"), name, version)),
            check: check(outer.get(dep)),
        });
    }
    Ok(artifacts)
}

/// Mix's lock: `"dep": {:hex, :name, "version", "inner", [builds], [deps],
/// "repo", "outer"},` one entry a line.
pub fn mix_lock(text: &str) -> Result<Vec<Artifact>, Failure> {
    let mut artifacts = Vec::new();
    for (idx, line) in text.lines().enumerate() {
        let Some((_, entry)) = line.split_once("{:hex, :") else {
            continue;
        };
        let name = entry.split(',').next().unwrap_or("").trim();
        let quoted: Vec<&str> = entry.split('"').skip(1).step_by(2).collect();
        let (Some(version), false) = (quoted.first(), name.is_empty()) else {
            return Err((idx + 1, "expected {:hex, :name, \"version\", …}".into()));
        };
        // After the two lists: the repository and the outer checksum.
        let tail = entry.rsplit_once(']').map_or("", |(_, tail)| tail);
        let after: Vec<&str> = tail.split('"').skip(1).step_by(2).collect();
        let (repo, outer) = match after.as_slice() {
            [repo, outer, ..] => (*repo, Some(outer.to_string())),
            _ => ("hexpm", None),
        };
        artifacts.push(Artifact {
            name: format!("{name}@{version}"),
            location: Location::Path(tarball(repo, name, version)),
            check: check(outer.as_ref()),
        });
    }
    Ok(artifacts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(artifacts: &[Artifact]) -> Vec<(&str, &Check)> {
        artifacts
            .iter()
            .map(|a| match &a.location {
                Location::Path(p) => (p.as_str(), &a.check),
                _ => ("", &a.check),
            })
            .collect()
    }

    #[test]
    fn rebar_lock_names_tarballs_with_their_outer_checksum() {
        let (a, b) = ("AB".repeat(32), "CD".repeat(32));
        let lock = format!(
            "{{\"1.2.0\",\n[{{<<\"cowboy\">>,{{pkg,<<\"cowboy\">>,<<\"2.9.0\">>}},0}},\n \
             {{<<\"ranch_alias\">>,{{pkg,<<\"ranch\">>,<<\"1.8.0\">>}},1}},\n \
             {{<<\"mine\">>,{{git,\"https://example.com/x.git\",{{ref,\"abc\"}}}},0}}]}}.\n\
             [\n{{pkg_hash,[\n {{<<\"cowboy\">>, <<\"{}\">>}}]}},\n\
             {{pkg_hash_ext,[\n {{<<\"cowboy\">>, <<\"{a}\">>}},\n {{<<\"ranch_alias\">>, <<\"{b}\">>}}]}}\n].\n",
            "00".repeat(32)
        );
        let artifacts = rebar_lock(&lock).unwrap();
        assert_eq!(
            paths(&artifacts),
            [
                (
                    "tarballs/cowboy-2.9.0.tar",
                    &Check::Sha256(a.to_ascii_lowercase())
                ),
                (
                    "tarballs/ranch-1.8.0.tar",
                    &Check::Sha256(b.to_ascii_lowercase())
                ),
            ]
        );
    }

    #[test]
    fn mix_lock_names_tarballs_with_their_outer_checksum() {
        let lock = format!(
            "%{{\n  \"jason\": {{:hex, :jason, \"1.4.1\", \"{}\", [:mix], [{{:decimal, \"~> 1.0 or ~> 2.0\", [hex: :decimal, repo: \"hexpm\", optional: true]}}], \"hexpm\", \"{}\"}},\n  \
             \"secret\": {{:hex, :secret, \"0.1.0\", \"{}\", [:mix], [], \"acme:corp\", \"{}\"}},\n  \
             \"dep\": {{:git, \"https://example.com/dep.git\", \"abc\", []}},\n}}\n",
            "aa".repeat(32),
            "bb".repeat(32),
            "cc".repeat(32),
            "dd".repeat(32)
        );
        let artifacts = mix_lock(&lock).unwrap();
        assert_eq!(
            paths(&artifacts),
            [
                ("tarballs/jason-1.4.1.tar", &Check::Sha256("bb".repeat(32))),
                (
                    "repos/corp/tarballs/secret-0.1.0.tar",
                    &Check::Sha256("dd".repeat(32))
                ),
            ]
        );
    }
}
