//! The supply-chain keys of a remote (`min_release_age`, `cooldown_exempt`,
//! `deny`, `allow`), validated in the remote's ecosystem's syntax: the
//! rules parsed once, so a bad range fails `check` with its key and line.

use toml::Spanned;

use super::raw::RawRemote;
use super::validate::Validator;
use super::ConfigError;
use crate::kind::guard::{self, GuardConfig};
use crate::kind::Kind;

impl Validator<'_> {
    /// `min_release_age`, `cooldown_exempt`, `deny` and `allow`.
    pub(super) fn guard(&self, i: usize, raw: &RawRemote) -> Result<GuardConfig, ConfigError> {
        // An unknown kind is reported by `remote` with its own message.
        let Some(kind) = Kind::named(raw.kind.get_ref()) else {
            return Ok(GuardConfig::default());
        };
        let (ecosystem, packages) = (kind.ecosystem(), kind.packages());
        let mut cooldown_exempt = Vec::with_capacity(raw.cooldown_exempt.len());
        for (j, glob) in raw.cooldown_exempt.iter().enumerate() {
            match guard::name_glob(packages, glob.get_ref()) {
                Ok(glob) => cooldown_exempt.push(glob),
                Err(e) => {
                    return self.error(format!("remote[{i}].cooldown_exempt[{j}]"), glob.span(), e)
                }
            }
        }
        let rules = |key: &str, list: &[Spanned<String>]| {
            let mut rules = Vec::with_capacity(list.len());
            for (j, rule) in list.iter().enumerate() {
                let key = format!("remote[{i}].{key}[{j}]");
                let packages = match (packages, ecosystem.refuses_key("deny")) {
                    (Some(packages), None) => packages,
                    (_, refusal) => {
                        let refusal = refusal.unwrap_or_else(|| {
                            format!("a {} remote cannot tell packages apart", kind.name())
                        });
                        return self.error(key, rule.span(), refusal);
                    }
                };
                match guard::package_rule(packages, rule.get_ref()) {
                    Ok(rule) => rules.push(rule),
                    Err(e) => return self.error(key, rule.span(), e),
                }
            }
            Ok(rules)
        };
        let refusal = ecosystem.refuses_key("min_release_age");
        if let (true, Some(refusal)) = (raw.min_release_age.is_some(), refusal) {
            return self.error(format!("remote[{i}].min_release_age"), 0..0, refusal);
        }
        Ok(GuardConfig {
            min_release_age: raw.min_release_age.map(|d| d.0).filter(|d| !d.is_zero()),
            cooldown_exempt,
            deny: rules("deny", &raw.deny)?,
            allow: match &raw.allow {
                Some(list) => Some(rules("allow", list)?),
                None => None,
            },
            quarantine: self.quarantine(i, raw)?,
        })
    }
}
