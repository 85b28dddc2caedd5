//! The `--server` URL: credentials in it (`http://user:pass@host`, how a
//! private remote is warmed) are taken out into an `Authorization` header
//! the client sends, so that no URL warm prints (its progress lines, its
//! failures, its errors) carries the password.

use anyhow::Context;
use base64::Engine as _;
use percent_encoding::percent_decode_str;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};

/// The server's base URL without credentials or a trailing `/`, and the
/// client that sends them (Basic) with every request.
pub(super) fn client_for(server: &str) -> anyhow::Result<(String, reqwest::Client)> {
    let (base, authorization) = split(server)?;
    let mut builder = reqwest::Client::builder();
    if let Some(mut value) = authorization {
        value.set_sensitive(true);
        builder = builder.default_headers(HeaderMap::from_iter([(AUTHORIZATION, value)]));
    }
    let client = builder.build().context("building the HTTP client")?;
    Ok((base, client))
}

/// `server` without its user and password, and their Basic header.
fn split(server: &str) -> anyhow::Result<(String, Option<HeaderValue>)> {
    let trimmed = server.trim_end_matches('/');
    let Ok(mut url) = url::Url::parse(trimmed) else {
        // Not a URL: left as it is, for the first request to say so.
        return Ok((trimmed.to_string(), None));
    };
    if url.username().is_empty() && url.password().is_none() {
        return Ok((trimmed.to_string(), None));
    }
    let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
    let pair = format!(
        "{}:{}",
        decode(url.username()),
        decode(url.password().unwrap_or_default())
    );
    let value = HeaderValue::from_str(&format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    ))
    .context("the credentials in --server are not a header's")?;
    // Only a URL that cannot be a base refuses these, and it has no user.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    Ok((url.as_str().trim_end_matches('/').to_string(), Some(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_leave_the_url_for_a_basic_header() {
        let (base, value) = split("http://ci:p%40ss@127.0.0.1:8080/").unwrap();
        assert_eq!(base, "http://127.0.0.1:8080");
        let expected = base64::engine::general_purpose::STANDARD.encode("ci:p@ss");
        assert_eq!(value.unwrap(), format!("Basic {expected}").as_str());
        let (base, value) = split("http://127.0.0.1:8080/").unwrap();
        assert_eq!((base.as_str(), value), ("http://127.0.0.1:8080", None));
    }

    #[tokio::test]
    async fn no_error_of_warm_shows_the_password() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("requirements.txt");
        std::fs::write(&lock, "six==1.16.0 --hash=sha256:8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254\n").unwrap();
        // A closed port: every request fails, and says where it went.
        let options = super::super::Options {
            server: "http://ci:pw-secret-1@127.0.0.1:1".into(),
            remote: "pypi".into(),
            files: vec![lock],
            jobs: 1,
            terminal: false,
        };
        let error = super::super::run(&options).await.unwrap_err();
        let shown = format!("{error:#}");
        assert!(shown.contains("127.0.0.1:1"), "{shown}");
        assert!(!shown.contains("pw-secret-1"), "{shown}");
    }
}
