//! `mirrorcache warm --server URL --remote NAME FILE…`: fetches every
//! artifact that lockfiles name through a running server, so that clients
//! can install afterwards with every mirror down.
//!
//! Every file is read first; one that cannot be read stops the command
//! before anything is fetched. Python pins are then resolved to the files
//! their simple page links to. Then the artifacts are fetched `jobs` at a
//! time, each body checked against the lockfile's digest; the server's
//! `X-Cache-Status` tells an artifact already cached from one fetched now.
//! Through a huggingface remote the names are snapshots, `repo[@revision]`
//! (`snapshot`): every file of the revision's tree. A `requirements.yml`
//! names Ansible collections, resolved with their dependencies (`galaxy`).

mod artifact;
mod composer;
mod conanlock;
mod condalock;
mod galaxy;
mod gemfile;
mod helm;
mod hexpm;
pub mod lockfile;
mod maven;
mod nuget;
mod pypi;
mod renv;
mod server;
mod snapshot;
mod terraform;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use futures_util::StreamExt;
use sha2::Digest as _;

use super::progress::Progress;
use lockfile::{Artifact, Check, Location};

pub struct Options {
    /// The server's base URL (`http://127.0.0.1:8080`).
    pub server: String,
    pub remote: String,
    pub files: Vec<PathBuf>,
    pub jobs: usize,
    /// A progress bar (a terminal) rather than one line per artifact.
    pub terminal: bool,
}

/// What became of each artifact.
#[derive(Debug, Default)]
pub struct Summary {
    pub fetched: usize,
    pub cached: usize,
    /// (artifact, why).
    pub failed: Vec<(String, String)>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} fetched, {} already cached, {} failed",
            self.fetched,
            self.cached,
            self.failed.len()
        )?;
        for (name, why) in &self.failed {
            write!(f, "\nfailed: {name}: {why}")?;
        }
        Ok(())
    }
}

enum Outcome {
    Fetched(u64),
    Cached(u64),
}

/// Reads every lockfile, then fetches what they name. An error is a
/// lockfile that cannot be read or a server that cannot say where
/// artifacts are; a failed artifact is counted in the summary.
pub async fn run(options: &Options) -> anyhow::Result<Summary> {
    let (server, client) = server::client_for(&options.server)?;
    let mut artifacts = Vec::new();
    if remote_kind(&client, &server, &options.remote)
        .await
        .as_deref()
        == Some("huggingface")
    {
        let names: Vec<String> = options
            .files
            .iter()
            .map(|f| f.to_string_lossy().into_owned())
            .collect();
        let base = format!("{server}/{}", options.remote);
        artifacts = snapshot::artifacts(&client, &base, &names).await?;
    } else {
        for file in &options.files {
            artifacts.extend(lockfile::read(file).map_err(anyhow::Error::msg)?);
        }
    }
    let places = Places::learn(&client, &server, &options.remote, &artifacts).await?;
    let (artifacts, unresolved) = resolve_pins(&client, &places, artifacts, options.jobs).await;
    for (name, why) in &unresolved {
        println!("FAILED {name}: {why}");
    }
    let progress = Arc::new(Progress::with_terminal(
        "artifacts",
        artifacts.len() as u64,
        0,
        options.terminal,
    ));
    let results: Vec<(String, Result<Outcome, String>)> =
        futures_util::stream::iter(artifacts.into_iter().map(|artifact| {
            let (client, places, progress) = (&client, &places, progress.clone());
            async move {
                let result = fetch(client, places, &artifact).await;
                let (line, bytes) = match &result {
                    Ok(Outcome::Fetched(n)) => {
                        (format!("fetched {} ({n} bytes)", artifact.name), *n)
                    }
                    Ok(Outcome::Cached(n)) => (format!("cached {} ({n} bytes)", artifact.name), *n),
                    Err(why) => (format!("FAILED {}: {why}", artifact.name), 0),
                };
                if !options.terminal || result.is_err() {
                    progress.println(&line);
                }
                progress.advance(bytes, true);
                (artifact.name, result)
            }
        }))
        .buffer_unordered(options.jobs.max(1))
        .collect()
        .await;
    progress.finish();
    let mut summary = Summary::default();
    summary.failed.extend(unresolved);
    for (name, result) in results {
        match result {
            Ok(Outcome::Fetched(_)) => summary.fetched += 1,
            Ok(Outcome::Cached(_)) => summary.cached += 1,
            Err(why) => summary.failed.push((name, why)),
        }
    }
    summary.failed.sort();
    Ok(summary)
}

/// Where the remote's artifacts are on the server.
struct Places {
    /// `{server}/{remote}`.
    base: String,
    /// The remote's mirror URLs (from `/-/status`), which npm's `resolved`
    /// URLs start with.
    mirrors: Vec<String>,
    /// The crate download URL template, from the remote's `config.json`.
    crate_dl: Option<String>,
}

impl Places {
    async fn learn(
        client: &reqwest::Client,
        server: &str,
        remote: &str,
        artifacts: &[Artifact],
    ) -> anyhow::Result<Places> {
        let status = get_json(client, &format!("{server}/-/status")).await?;
        let Some(found) = status["remotes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["name"] == remote)
        else {
            anyhow::bail!("the server has no remote named {remote:?}");
        };
        let mirrors = found["mirrors"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["url"].as_str().map(str::to_string))
            .collect();
        let base = format!("{server}/{remote}");
        let crate_dl = if artifacts
            .iter()
            .any(|a| matches!(a.location, Location::Crate { .. }))
        {
            let config = get_json(client, &format!("{base}/config.json"))
                .await
                .context("the crate download URL")?;
            let dl = config["dl"]
                .as_str()
                .context("config.json has no `dl`")?
                .to_string();
            if !dl.starts_with(&format!("{base}/")) {
                anyhow::bail!(
                    "config.json's `dl` ({dl}) is not on the server: crates would not be cached"
                );
            }
            Some(dl)
        } else {
            None
        };
        Ok(Places {
            base,
            mirrors,
            crate_dl,
        })
    }

    /// The URL on the server of `artifact`.
    fn url_of(&self, artifact: &Artifact) -> Result<String, String> {
        match &artifact.location {
            Location::Url(url) => Ok(url.clone()),
            Location::Pinned { .. } => Err("a pin not resolved to files".into()),
            Location::Composer { .. } => Err("a package not resolved to its archive".into()),
            Location::Galaxy(_) => Err("collections not resolved to tarballs".into()),
            Location::Chart { .. } => Err("a chart not resolved to its file".into()),
            Location::Provider { .. } => Err("a provider not resolved to its archives".into()),
            Location::Path(path) => Ok(format!("{}/{path}", self.base)),
            Location::FirstOf(_) => Err("several places, asked in turn by `fetch`".into()),
            Location::Resolved(url) => {
                if let Some(rest) = url.strip_prefix(&format!("{}/", self.base)) {
                    return Ok(format!("{}/{rest}", self.base));
                }
                for mirror in &self.mirrors {
                    if let Some(rest) = url.strip_prefix(&format!("{mirror}/")) {
                        return Ok(format!("{}/{rest}", self.base));
                    }
                }
                // Another registry host: npm's tarball paths are the same on
                // every registry.
                let parsed = url::Url::parse(url).map_err(|e| format!("resolved URL: {e}"))?;
                Ok(format!("{}{}", self.base, parsed.path()))
            }
            Location::Crate { name, version } => {
                let dl = self.crate_dl.as_deref().ok_or("no crate download URL")?;
                let checksum = match &artifact.check {
                    Check::Sha256(hex) => hex.as_str(),
                    _ => "",
                };
                Ok(crate_url(dl, name, version, checksum))
            }
        }
    }
}

/// The kind of the server's remote `remote`, if the server says.
async fn remote_kind(client: &reqwest::Client, server: &str, remote: &str) -> Option<String> {
    let status = get_json(client, &format!("{server}/-/status")).await.ok()?;
    status["remotes"]
        .as_array()?
        .iter()
        .find(|r| r["name"] == remote)?["kind"]
        .as_str()
        .map(str::to_string)
}

/// `GET url` as JSON.
async fn get_json(client: &reqwest::Client, url: &str) -> anyhow::Result<serde_json::Value> {
    let body = client
        .get(url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .with_context(|| format!("fetching {url}"))?
        .bytes()
        .await
        .with_context(|| format!("reading {url}"))?;
    serde_json::from_slice(&body).with_context(|| format!("{url} is not JSON"))
}

/// Cargo's download URL: `dl` with its markers replaced, or
/// `{dl}/{crate}/{version}/download` when it has none.
fn crate_url(dl: &str, name: &str, version: &str, checksum: &str) -> String {
    let markers = [
        "{crate}",
        "{version}",
        "{prefix}",
        "{lowerprefix}",
        "{sha256-checksum}",
    ];
    if !markers.iter().any(|m| dl.contains(m)) {
        return format!("{dl}/{name}/{version}/download");
    }
    let prefix = lockfile::cargo_prefix(name);
    dl.replace("{crate}", name)
        .replace("{version}", version)
        .replace("{lowerprefix}", &prefix.to_lowercase())
        .replace("{prefix}", &prefix)
        .replace("{sha256-checksum}", checksum)
}

async fn fetch(
    client: &reqwest::Client,
    places: &Places,
    artifact: &Artifact,
) -> Result<Outcome, String> {
    let urls = match &artifact.location {
        Location::FirstOf(paths) => paths
            .iter()
            .map(|p| format!("{}/{p}", places.base))
            .collect(),
        _ => vec![places.url_of(artifact)?],
    };
    let (mut url, mut response) = (String::new(), None);
    // The first that is there: a 404 goes on to the next.
    for at in urls {
        let answer = client
            .get(&at)
            .send()
            .await
            .map_err(|e| format!("{at}: {}", e.without_url()))?;
        let found = answer.status() != reqwest::StatusCode::NOT_FOUND;
        (url, response) = (at, Some(answer));
        if found {
            break;
        }
    }
    let response = response.ok_or("no path to fetch")?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{url}: the server answered {}", status.as_u16()));
    }
    let cached = response
        .headers()
        .get("x-cache-status")
        .is_some_and(|v| v.as_bytes() == b"HIT");
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("{url}: body broke off: {}", e.without_url()))?;
    check(&artifact.check, &body).map_err(|why| format!("{url}: {why}"))?;
    let size = body.len() as u64;
    Ok(if cached {
        Outcome::Cached(size)
    } else {
        Outcome::Fetched(size)
    })
}

/// Replaces each Python pin by the files its simple page links to; the pins
/// that cannot be resolved come back as (name, why).
async fn resolve_pins(
    client: &reqwest::Client,
    places: &Places,
    artifacts: Vec<Artifact>,
    jobs: usize,
) -> (Vec<Artifact>, Vec<(String, String)>) {
    let resolved: Vec<(String, Result<Vec<Artifact>, String>)> =
        futures_util::stream::iter(artifacts.into_iter().map(|artifact| async move {
            match &artifact.location {
                Location::Pinned {
                    name,
                    version,
                    hashes,
                } => {
                    let files = pypi::files(client, places, name, version, hashes).await;
                    (artifact.name, files)
                }
                Location::Composer {
                    name,
                    version,
                    reference,
                    url,
                } => {
                    let at = (
                        name.as_str(),
                        version.as_str(),
                        reference.as_str(),
                        url.as_str(),
                    );
                    let found = composer::dist_url(client, &places.base, at).await;
                    let archive = found.map(|url| {
                        vec![Artifact {
                            location: Location::Url(url),
                            ..artifact.clone()
                        }]
                    });
                    (artifact.name.clone(), archive)
                }
                Location::Galaxy(requirements) => {
                    let found = galaxy::tarballs(client, &places.base, requirements).await;
                    (artifact.name.clone(), found)
                }
                Location::Chart { name, version } => {
                    let found = helm::chart(client, &places.base, name, version).await;
                    let chart = found.map(|(url, check)| {
                        vec![Artifact {
                            location: Location::Url(url),
                            check,
                            ..artifact.clone()
                        }]
                    });
                    (artifact.name.clone(), chart)
                }
                Location::Provider {
                    address,
                    version,
                    hashes,
                } => {
                    let found =
                        terraform::archives(client, &places.base, address, version, hashes).await;
                    let archives = found.map(|found| {
                        found
                            .into_iter()
                            .map(|(url, check)| Artifact {
                                location: Location::Url(url),
                                check,
                                ..artifact.clone()
                            })
                            .collect()
                    });
                    (artifact.name.clone(), archives)
                }
                _ => (artifact.name.clone(), Ok(vec![artifact])),
            }
        }))
        .buffered(jobs.max(1))
        .collect()
        .await;
    let (mut found, mut failed) = (Vec::new(), Vec::new());
    for (name, result) in resolved {
        match result {
            Ok(artifacts) => found.extend(artifacts),
            Err(why) => failed.push((name, why)),
        }
    }
    (found, failed)
}

fn check(check: &Check, body: &[u8]) -> Result<(), String> {
    let matches = match check {
        Check::Unchecked => true,
        Check::Sha256Any(hexes) => hexes.contains(&hex::encode(sha2::Sha256::digest(body))),
        Check::Sha256(hex) => hex::encode(sha2::Sha256::digest(body)) == *hex,
        Check::Integrity("sha512", digest) => sha2::Sha512::digest(body).as_slice() == digest,
        // composer.lock's `dist.shasum`.
        Check::Integrity("sha1", digest) => sha1::Sha1::digest(body).as_slice() == digest,
        Check::Integrity(_, digest) => sha2::Sha256::digest(body).as_slice() == digest,
    };
    if matches {
        Ok(())
    } else {
        Err("digest does not match the lockfile".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crate_urls_follow_cargo_markers() {
        assert_eq!(
            crate_url("http://p/c/~files", "serde", "1.0.0", ""),
            "http://p/c/~files/serde/1.0.0/download"
        );
        assert_eq!(
            crate_url(
                "http://p/c/{prefix}/{crate}/{crate}-{version}.crate",
                "Abcd",
                "1",
                ""
            ),
            "http://p/c/Ab/cd/Abcd/Abcd-1.crate"
        );
        assert_eq!(
            crate_url(
                "http://p/{lowerprefix}/{crate}?{sha256-checksum}",
                "Abc",
                "1",
                "ff"
            ),
            "http://p/3/a/Abc?ff"
        );
    }
}
