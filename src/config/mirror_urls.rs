//! Lists of mirror URLs (`mirrors`, `files`, `sumdb`, `token_realms`,
//! `credentials_for`, an advisory feed's `urls`): each an http(s) URL with a host, no query, no
//! credentials in it, none twice, at most [`MAX_MIRRORS`].

use toml::Spanned;
use url::Url;

use super::validate::{has_userinfo, Validator};
use super::{ConfigError, MAX_MIRRORS};

impl Validator<'_> {
    /// A list of mirrors that may be absent (then `default`) or empty (none).
    pub(super) fn optional_mirror_list(
        &self,
        key: &str,
        list: Option<&Spanned<Vec<Spanned<String>>>>,
        default: &[&str],
    ) -> Result<Vec<Url>, ConfigError> {
        match list {
            Some(list) if list.get_ref().is_empty() => Ok(Vec::new()),
            Some(list) => self.mirror_list(key, list),
            None => Ok(default
                .iter()
                .map(|u| Url::parse(u).expect("default URLs parse"))
                .collect()),
        }
    }

    pub(super) fn mirror_list(
        &self,
        key: &str,
        list: &Spanned<Vec<Spanned<String>>>,
    ) -> Result<Vec<Url>, ConfigError> {
        let raw = list.get_ref();
        if raw.is_empty() {
            return self.error(key, list.span(), "lists no mirror; give at least one URL");
        }
        if raw.len() > MAX_MIRRORS {
            return self.error(
                key,
                list.span(),
                format!(
                    "lists {} mirrors; at most {MAX_MIRRORS} are supported",
                    raw.len()
                ),
            );
        }
        // `remote[N]`, where the credentials keys are.
        let remote = key.split('.').next().unwrap_or_default();
        let mut urls: Vec<Url> = Vec::with_capacity(raw.len());
        for (j, m) in raw.iter().enumerate() {
            let key = format!("{key}[{j}]");
            // The value is not echoed: it may hold a password.
            let url = match Url::parse(m.get_ref().trim_end_matches('/')) {
                Ok(u) => u,
                Err(e) => return self.error(key, m.span(), format!("not a URL: {e}")),
            };
            if has_userinfo(&url) && remote.starts_with("advisories") {
                return self.error(
                    key,
                    m.span(),
                    "must not carry credentials (`user:password@`), which would show in \
                     /-/status, metrics and logs",
                );
            }
            if has_userinfo(&url) {
                return self.error(
                    key,
                    m.span(),
                    format!(
                        "must not carry credentials (`user:password@`), which would show in \
                         /-/status, metrics and logs; give them as `{remote}.username` and \
                         `{remote}.password_env` (or `password`, or `bearer_token_env`)"
                    ),
                );
            }
            if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                return self.error(
                    key,
                    m.span(),
                    "must be an http:// or https:// URL with a host",
                );
            }
            if url.query().is_some() || url.fragment().is_some() {
                return self.error(key, m.span(), "must not have a query or fragment");
            }
            if urls.contains(&url) {
                return self.error(key, m.span(), "is listed twice");
            }
            urls.push(url);
        }
        Ok(urls)
    }
}
