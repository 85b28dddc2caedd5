//! The checks of a remote's upstream credentials: `username` with
//! `password` or `password_env`, or `bearer_token` / `bearer_token_env`, and
//! `credentials_for`, the only bases besides the mirrors they are sent to.

use toml::Spanned;
use url::Url;

use super::raw::*;
use super::validate::Validator;
use super::*;

impl Validator<'_> {
    /// `credentials_for`: each base one of the remote's own `mirrors`,
    /// `files` or `sumdb` (named when it is not).
    pub(super) fn credentials_for(
        &self,
        i: usize,
        raw: &RawRemote,
        own: [&[Url]; 3],
    ) -> Result<Vec<Url>, ConfigError> {
        let key = format!("remote[{i}].credentials_for");
        let bases = self.optional_mirror_list(&key, raw.credentials_for.as_ref(), &[])?;
        let spans = raw.credentials_for.as_ref().map(|l| l.get_ref().as_slice());
        for (j, base) in bases.iter().enumerate() {
            if !own.iter().any(|set| set.contains(base)) {
                let span = spans.and_then(|s| s.get(j)).map_or(0..0, |s| s.span());
                return self.error(
                    format!("{key}[{j}]"),
                    span,
                    format!(
                        "{base} is not one of this remote's mirrors, files or sumdb; \
                         credentials go only to those"
                    ),
                );
            }
        }
        Ok(bases)
    }

    /// A secret given inline (`key`) or by environment variable (`key_env`), not both.
    fn secret(
        &self,
        i: usize,
        key: &str,
        inline: &Option<Spanned<String>>,
        env: &Option<Spanned<String>>,
    ) -> Result<Option<Secret>, ConfigError> {
        match (inline, env) {
            (Some(_), Some(e)) => self.error(
                format!("remote[{i}].{key}_env"),
                e.span(),
                format!("give `{key}` or `{key}_env`, not both"),
            ),
            (Some(v), None) => Ok(Some(Secret(v.get_ref().clone()))),
            (None, Some(e)) => match std::env::var(e.get_ref()) {
                Ok(v) => Ok(Some(Secret(v))),
                Err(_) => self.error(
                    format!("remote[{i}].{key}_env"),
                    e.span(),
                    format!("environment variable {} is not set", e.get_ref()),
                ),
            },
            (None, None) => Ok(None),
        }
    }

    pub(super) fn auth(&self, i: usize, raw: &RawRemote) -> Result<UpstreamAuth, ConfigError> {
        let password = self.secret(i, "password", &raw.password, &raw.password_env)?;
        let token = self.secret(i, "bearer_token", &raw.bearer_token, &raw.bearer_token_env)?;
        match (&raw.username, password, token) {
            (Some(_), _, Some(_)) => self.error(
                format!("remote[{i}].bearer_token"),
                0..0,
                "give basic credentials (username) or a bearer token, not both",
            ),
            (Some(username), password, None) => Ok(UpstreamAuth::Basic {
                username: username.clone(),
                password: password.unwrap_or(Secret(String::new())),
            }),
            (None, Some(_), _) => self.error(
                format!("remote[{i}].username"),
                0..0,
                "a password needs a username",
            ),
            (None, None, Some(token)) => Ok(UpstreamAuth::Bearer(token)),
            (None, None, None) => Ok(UpstreamAuth::None),
        }
    }
}
