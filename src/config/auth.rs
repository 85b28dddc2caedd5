//! Who may read what and how the listener is reached, as configured: `[auth]
//! htpasswd` (bcrypt lines only), each remote's `access`, and `server.tls_cert`,
//! `server.tls_key` and `server.trusted_proxies`, with their checks.

use std::net::IpAddr;
use std::path::PathBuf;

use toml::Spanned;

use super::raw::{RawAccess, RawAuth};
use super::validate::Validator;
use super::{ConfigError, RemoteConfig, Secret};

/// `[auth]`: the users, read from the htpasswd file when the config is loaded
/// (and again on every reload).
#[derive(Debug, Clone)]
pub struct AuthConfig {
    pub htpasswd: PathBuf,
    pub users: Vec<HtpasswdUser>,
}

/// One `user:$2y$…` line of the htpasswd file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HtpasswdUser {
    pub name: String,
    /// The bcrypt hash; `Debug` shows `***` all the same.
    pub hash: Secret,
}

/// Who may read a remote (`access`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RemoteAccess {
    /// Anyone who can reach the proxy (the default).
    #[default]
    Anonymous,
    /// Any user with valid credentials.
    Authenticated,
    /// These users only.
    Users(Vec<String>),
}

impl RemoteAccess {
    pub fn is_anonymous(&self) -> bool {
        *self == RemoteAccess::Anonymous
    }

    /// Whether `user` (`None`: no credentials) may read the remote.
    pub fn admits(&self, user: Option<&str>) -> bool {
        match (self, user) {
            (RemoteAccess::Anonymous, _) => true,
            (RemoteAccess::Authenticated, user) => user.is_some(),
            (RemoteAccess::Users(names), Some(user)) => names.iter().any(|n| n == user),
            (RemoteAccess::Users(_), None) => false,
        }
    }
}

/// `server.tls_cert` and `server.tls_key`: PEM files, read at start and on
/// every SIGHUP (`http::tls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// One entry of `server.trusted_proxies`: an address or a CIDR block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpBlock {
    addr: IpAddr,
    prefix: u8,
}

impl IpBlock {
    pub fn parse(text: &str) -> Option<IpBlock> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr.parse::<IpAddr>().ok()?, prefix.parse::<u8>().ok()?),
            None => {
                let addr = text.parse::<IpAddr>().ok()?;
                (addr, if addr.is_ipv4() { 32 } else { 128 })
            }
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (prefix <= max).then_some(IpBlock { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |ip: IpAddr| -> (u128, u8) {
            match ip {
                IpAddr::V4(v4) => (u128::from(u32::from(v4)) << 96, 32),
                IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                    Some(v4) => (u128::from(u32::from(v4)) << 96, 32),
                    None => (u128::from(v6), 128),
                },
            }
        };
        let (mine, my_width) = bits(self.addr);
        let (theirs, width) = bits(ip);
        if my_width != width {
            return false;
        }
        // An IPv4 address sits in the top 32 bits: its prefix counts from the top too.
        let prefix = u32::from(self.prefix);
        let mask = if prefix == 0 {
            0
        } else {
            u128::MAX << (128 - prefix)
        };
        mine & mask == theirs & mask
    }
}

/// Reads an htpasswd file: `user:hash` lines, bcrypt hashes only (`$2y$`,
/// `$2b$`, `$2a$`), blank lines and `#` comments allowed. Errors name the
/// file and line, never the hash.
pub fn load_htpasswd(path: &std::path::Path) -> Result<Vec<HtpasswdUser>, ConfigError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        origin: origin.clone(),
        line: None,
        key: String::new(),
        message: format!("cannot read the htpasswd file: {e}"),
    })?;
    parse_htpasswd(&text, &origin)
}

pub fn parse_htpasswd(text: &str, origin: &str) -> Result<Vec<HtpasswdUser>, ConfigError> {
    let error = |line: usize, message: String| ConfigError {
        origin: origin.to_string(),
        line: Some(line),
        key: String::new(),
        message,
    };
    let mut users: Vec<HtpasswdUser> = Vec::new();
    for (idx, line) in text.lines().enumerate() {
        let number = idx + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, hash)) = line.split_once(':') else {
            return Err(error(number, "not a `user:hash` line".to_string()));
        };
        if !is_user_name(name) {
            return Err(error(
                number,
                "the user name is empty or holds characters other than letters, digits, \
                 '-', '_', '.', '@'"
                    .to_string(),
            ));
        }
        if !is_bcrypt(hash) {
            return Err(error(
                number,
                format!(
                    "user {name:?}: not a bcrypt hash; only bcrypt ($2y$, $2b$, $2a$) is \
                     accepted (`htpasswd -B`)"
                ),
            ));
        }
        if users.iter().any(|u| u.name == name) {
            return Err(error(number, format!("user {name:?} is listed twice")));
        }
        users.push(HtpasswdUser {
            name: name.to_string(),
            hash: Secret(hash.to_string()),
        });
    }
    Ok(users)
}

/// `$2y$NN$` and 53 characters of bcrypt's base64: salt and digest.
fn is_bcrypt(hash: &str) -> bool {
    let b = hash.as_bytes();
    b.len() == 60
        && (hash.starts_with("$2y$") || hash.starts_with("$2b$") || hash.starts_with("$2a$"))
        && b[4].is_ascii_digit()
        && b[5].is_ascii_digit()
        && (4..=31).contains(&((b[4] - b'0') * 10 + (b[5] - b'0')))
        && b[6] == b'$'
        && b[7..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'/'))
}

/// A user name as htpasswd files and `access` lists write it.
pub fn is_user_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
}

impl Validator<'_> {
    /// `[auth]`: the htpasswd file read and checked now, so that `check`
    /// refuses a bad line and a reload with one keeps the running users.
    pub(super) fn auth_table(
        &self,
        raw: Option<RawAuth>,
    ) -> Result<Option<AuthConfig>, ConfigError> {
        let Some(raw) = raw else { return Ok(None) };
        let path = PathBuf::from(raw.htpasswd.get_ref());
        if raw.htpasswd.get_ref().is_empty() {
            return self.error("auth.htpasswd", raw.htpasswd.span(), "is empty");
        }
        match std::fs::read_to_string(&path) {
            Err(e) => self.error(
                "auth.htpasswd",
                raw.htpasswd.span(),
                format!("cannot read {}: {e}", path.display()),
            ),
            Ok(text) => {
                let users = parse_htpasswd(&text, &path.display().to_string())?;
                Ok(Some(AuthConfig {
                    htpasswd: path,
                    users,
                }))
            }
        }
    }

    /// A remote's `access`: "anonymous", "authenticated", or user names.
    pub(super) fn access(
        &self,
        i: usize,
        raw: Option<&Spanned<RawAccess>>,
    ) -> Result<RemoteAccess, ConfigError> {
        let Some(raw) = raw else {
            return Ok(RemoteAccess::Anonymous);
        };
        let key = format!("remote[{i}].access");
        let names: Vec<&str> = match raw.get_ref() {
            RawAccess::One(one) => vec![one.as_str()],
            RawAccess::Many(many) => many.iter().map(String::as_str).collect(),
        };
        match names.as_slice() {
            ["anonymous"] => return Ok(RemoteAccess::Anonymous),
            ["authenticated"] => return Ok(RemoteAccess::Authenticated),
            [] => {
                return self.error(
                    key,
                    raw.span(),
                    "lists nobody; give user names, \"authenticated\" or \"anonymous\"",
                )
            }
            _ => {}
        }
        let mut users = Vec::with_capacity(names.len());
        for name in names {
            if matches!(name, "anonymous" | "authenticated") {
                return self.error(
                    key,
                    raw.span(),
                    format!("{name:?} stands alone, not in a list of users"),
                );
            }
            if !is_user_name(name) {
                return self.error(key, raw.span(), format!("{name:?} is not a user name"));
            }
            users.push(name.to_string());
        }
        Ok(RemoteAccess::Users(users))
    }

    /// `server.tls_cert` and `server.tls_key`: both or neither, each a
    /// readable PEM file (a chain with at least one certificate; a private key).
    pub(super) fn tls(
        &self,
        cert: Option<&Spanned<String>>,
        key: Option<&Spanned<String>>,
    ) -> Result<Option<TlsConfig>, ConfigError> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let (cert, key) = match (cert, key) {
            (None, None) => return Ok(None),
            (Some(cert), Some(key)) => (cert, key),
            (Some(s), None) | (None, Some(s)) => {
                return self.error(
                    "server.tls_cert",
                    s.span(),
                    "give both `server.tls_cert` and `server.tls_key`, or neither",
                )
            }
        };
        let read = |name: &str, value: &Spanned<String>| match std::fs::read(value.get_ref()) {
            Ok(bytes) => Ok(bytes),
            Err(e) => self.error(
                name,
                value.span(),
                format!("cannot read {}: {e}", value.get_ref()),
            ),
        };
        let cert_pem = read("server.tls_cert", cert)?;
        let chain: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&cert_pem).collect();
        if !chain.is_ok_and(|c| !c.is_empty()) {
            return self.error(
                "server.tls_cert",
                cert.span(),
                format!("{} holds no PEM certificate", cert.get_ref()),
            );
        }
        let key_pem = read("server.tls_key", key)?;
        if PrivateKeyDer::from_pem_slice(&key_pem).is_err() {
            return self.error(
                "server.tls_key",
                key.span(),
                format!("{} holds no PEM private key", key.get_ref()),
            );
        }
        Ok(Some(TlsConfig {
            cert: PathBuf::from(cert.get_ref()),
            key: PathBuf::from(key.get_ref()),
        }))
    }

    pub(super) fn trusted_proxies(
        &self,
        list: &[Spanned<String>],
    ) -> Result<Vec<IpBlock>, ConfigError> {
        list.iter()
            .enumerate()
            .map(|(j, entry)| match IpBlock::parse(entry.get_ref().trim()) {
                Some(block) => Ok(block),
                None => self.error(
                    format!("server.trusted_proxies[{j}]"),
                    entry.span(),
                    format!(
                        "{:?} is not an address or CIDR block (\"10.0.0.0/8\")",
                        entry.get_ref()
                    ),
                ),
            })
            .collect()
    }

    /// A remote that is not anonymous needs `[auth]`; a user it names that
    /// the htpasswd file lacks is a warning (the file may be reloaded).
    pub(super) fn access_needs_users(
        &self,
        remotes: &[RemoteConfig],
        auth: Option<&AuthConfig>,
    ) -> Result<Vec<String>, ConfigError> {
        let mut warnings = Vec::new();
        for (i, remote) in remotes.iter().enumerate() {
            if remote.access.is_anonymous() {
                continue;
            }
            let Some(auth) = auth else {
                return self.error(
                    format!("remote[{i}].access"),
                    0..0,
                    "a remote that is not anonymous needs `[auth] htpasswd`",
                );
            };
            if let RemoteAccess::Users(names) = &remote.access {
                for name in names {
                    if !auth.users.iter().any(|u| &u.name == name) {
                        warnings.push(format!(
                            "{}: `remote[{i}].access`: user {name:?} is not in {}",
                            self.origin,
                            auth.htpasswd.display()
                        ));
                    }
                }
            }
        }
        Ok(warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_contain_their_addresses_only() {
        let b = IpBlock::parse("10.0.0.0/8").unwrap();
        assert!(b.contains("10.1.2.3".parse().unwrap()));
        assert!(!b.contains("11.0.0.1".parse().unwrap()));
        assert!(b.contains("::ffff:10.0.0.1".parse().unwrap()));
        let one = IpBlock::parse("127.0.0.1").unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        assert!(IpBlock::parse("0.0.0.0/0")
            .unwrap()
            .contains("1.2.3.4".parse().unwrap()));
        assert!(IpBlock::parse("10.0.0.0/33").is_none());
        assert!(IpBlock::parse("::1/128")
            .unwrap()
            .contains("::1".parse().unwrap()));
    }

    #[test]
    fn htpasswd_takes_bcrypt_comments_and_blank_lines_only() {
        let good = "# users\n\nci:$2y$05$abcdefghijklmnopqrstuuJ0BZJ5aeKQ3eYhG0e5lR8eXH6Fw/3yW\n";
        assert_eq!(parse_htpasswd(good, "u").unwrap().len(), 1);
        let md5 = "ci:$apr1$abc$def\n";
        let e = parse_htpasswd(md5, "u").unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(!e.to_string().contains("apr1$abc"), "{e}");
        let e = parse_htpasswd("# c\nnocolon\n", "u").unwrap_err();
        assert_eq!(e.line, Some(2));
    }

    #[test]
    fn access_admits_whom_it_names() {
        let users = RemoteAccess::Users(vec!["ci".into()]);
        assert!(users.admits(Some("ci")));
        assert!(!users.admits(Some("dev")));
        assert!(!users.admits(None));
        assert!(RemoteAccess::Authenticated.admits(Some("dev")));
        assert!(!RemoteAccess::Authenticated.admits(None));
        assert!(RemoteAccess::Anonymous.admits(None));
    }
}
