//! `mirrorcache check`: exit 0 for a good config; exit 2 naming the key and line.

use std::process::Command;

fn check(text: &str) -> (i32, String) {
    let out = crate::support::binary::check(text);
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const GOOD: &str = "[server]\nlisten = \"127.0.0.1:8080\"\n\n[[remote]]\nname = \"r\"\nmirrors = [\"http://127.0.0.1:1/x\"]\n";

#[test]
fn the_shipped_config_and_a_minimal_one_pass() {
    assert_eq!(check(GOOD).0, 0);
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/mirrorcache.toml"
    ))
    .unwrap();
    assert_eq!(check(&shipped), (0, String::new()));
}

#[test]
fn bad_configs_name_the_key_and_line() {
    let cases: &[(&str, &[&str])] = &[
        (
            "[server]\nlisten = \"127.0.0.1:8080\"\nlisten_backlog = 5\n",
            &[":3:", "unknown field `listen_backlog`"],
        ),
        (
            "[[remote]]\nname = \"r\"\nmirrors = [\"http://a/x\"]\nstrategy = \"fastest_ever\"\n",
            &[":4:", "unknown variant `fastest_ever`"],
        ),
        (
            "[[remote]]\nname = \"r\"\nmirrors = [\"http://a/x\"]\nrevalidate_after = \"ten minutes\"\n",
            &[":4:", "invalid duration"],
        ),
        // A feed's URLs are its remote's mirrors; its remote's name is taken.
        (
            "[[advisories]]\nname = \"osv\"\nurls = [\"https://u:secret@osv.example/all.zip\"]\n[[remote]]\nname = \"r\"\nmirrors = [\"http://a/x\"]\n",
            &[":3:", "advisories[0].urls[0]", "must not carry credentials"],
        ),
        (
            "[[advisories]]\nname = \"osv\"\nurls = [\"https://osv.example/all.zip\"]\n[[remote]]\nname = \"advisories.osv\"\nmirrors = [\"http://a/x\"]\n",
            &["remote[0].name", "advisory feed \"osv\""],
        ),
        ("[storage]\nmax_size = \"lots\"\n", &[":2:", "invalid size"]),
        (
            "[log]\nbuffer = \"8KiB\"\nflush = \"0s\"\n[[remote]]\nname = \"r\"\nmirrors = [\"http://a/x\"]\n",
            &[":3:", "log.flush", "more than 0"],
        ),
        ("[[remote]]\nname = \"r\"\nmirrors = []\n", &[":3:", "remote[0].mirrors", "no mirror"]),
        (
            "[[remote]]\nname = \"r\"\nmirrors = [\n  \"http://a/x\",\n  \"ftp://b/x\",\n]\n",
            &[":5:", "remote[0].mirrors[1]", "http"],
        ),
        ("[[remote]]\nname = \"a b\"\nmirrors = [\"http://a/x\"]\n", &[":2:", "remote[0].name"]),
        ("[server]\nlisten = \"nowhere\"\n[[remote]]\nname = \"r\"\nmirrors = [\"http://a/x\"]\n", &[":2:", "server.listen"]),
        ("[[remote]]\nname = \"r\"\nmirrors = [\"http://a/x\"]\nimmutable = [\"a[\"]\n", &[":4:", "remote[0].immutable[0]"]),
        (
            "[[remote]]\nname = \"r\"\nkind = \"go\"\nmirrors = [\"http://a/x\"]\nrequire_declared_hash = true\n",
            &[":5:", "remote[0].require_declared_hash", "no index that declares digests"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"npm\"\nmirrors = [\"http://a/x\"]\nrequire_declared_hash = \"yes\"\n",
            &[":5:", "expected a boolean"],
        ),
        // The guard: a malformed range in the ecosystem's syntax, a key misspelt,
        // a duration that is not one, package rules where packages are unknown.
        (
            "[[remote]]\nname = \"r\"\nkind = \"npm\"\nmirrors = [\"http://a/x\"]\ndeny = [\n  \"event-stream@3.3.6\",\n  \"colors@>=>1.4\",\n]\n",
            &[":7:", "remote[0].deny[1]", "not an npm version range"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"pypi\"\nmirrors = [\"http://a/x\"]\nallow = [\"requests@>>2\"]\n",
            &[":5:", "remote[0].allow[0]", "PEP 440"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"cargo\"\nmirrors = [\"http://a/x\"]\ndeny = [\"serde@~>1\"]\n",
            &[":5:", "remote[0].deny[0]", "cargo version requirement"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"npm\"\nmirrors = [\"http://a/x\"]\nmin_release_agee = \"7d\"\n",
            &[":5:", "unknown field `min_release_agee`"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"npm\"\nmirrors = [\"http://a/x\"]\nmin_release_age = \"a week\"\n",
            &[":5:", "invalid duration"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"apt\"\nmirrors = [\"http://a/x\"]\ndeny = [\"hello\"]\n",
            &[":5:", "remote[0].deny[0]", "cannot tell packages apart"],
        ),
        // The quarantine: unknown classes, allow entries without a version,
        // dates that are not, kinds without packages, feeds without URLs.
        (
            "[[remote]]\nname = \"r\"\nkind = \"npm\"\nmirrors = [\"http://a/x\"]\nquarantine = [\n  \"malicious\",\n  \"severe\",\n]\n",
            &[":7:", "remote[0].quarantine[1]", "neither a class"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"pypi\"\nmirrors = [\"http://a/x\"]\nquarantine = [\"high\"]\nquarantine_allow = [\"requests\"]\n",
            &[":6:", "remote[0].quarantine_allow[0]", "names no version"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"npm\"\nmirrors = [\"http://a/x\"]\nquarantine_since = \"last tuesday\"\n",
            &[":5:", "remote[0].quarantine_since", "not a date"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"apt\"\nmirrors = [\"http://a/x\"]\nquarantine = [\"malicious\"]\n",
            &[":5:", "remote[0].quarantine", "cannot tell packages apart"],
        ),
        (
            "[[advisories]]\nname = \"osv\"\nurls = []\n[[remote]]\nname = \"r\"\nmirrors = [\"http://a/x\"]\n",
            &[":3:", "advisories[0].urls", "no URL"],
        ),
        (
            "[[advisories]]\nname = \"osv\"\nurls = [\"https://osv-vulnerabilities.storage.googleapis.com/npm/all.zip\"]\nrefresh = \"often\"\n[[remote]]\nname = \"r\"\nmirrors = [\"http://a/x\"]\n",
            &[":4:", "invalid duration"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"npm\"\nmirrors = [\"http://a/x\"]\ncooldown_exempt = [\"@types/[\"]\n",
            &[":5:", "remote[0].cooldown_exempt[0]"],
        ),
        // cran: a key it does not take, a constraint not in R's syntax.
        (
            "[[remote]]\nname = \"r\"\nkind = \"cran\"\nmirrors = [\"http://a/x\"]\nversion_policy = \"releases\"\n",
            &[":5:", "remote[0].version_policy", "cran remotes do not tell snapshots"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"cran\"\nmirrors = [\"http://a/x\"]\ndeny = [\"mctop@~> 2\"]\n",
            &[":5:", "remote[0].deny[0]", "not an R version constraint"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"hex\"\nmirrors = [\"http://a/x\"]\nallow = [\"cowboy@^2.0\"]\n",
            &[":5:", "remote[0].allow[0]", "not an Elixir version requirement"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"conan\"\nmirrors = [\"http://a/x\"]\ndeny = [\"zlib@>>1.3\"]\n",
            &[":5:", "remote[0].deny[0]", "not a Conan version range"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"conan\"\nmirrors = [\"http://a/x\"]\nversion_policy = \"releases\"\n",
            &[":5:", "version_policy", "conan remotes do not tell snapshots from releases"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"conan\"\nmirrors = [\"http://a/x\"]\nrequire_declared_hash = true\n",
            &[":5:", "require_declared_hash", "every archive would be refused"],
        ),
        (
            "[[remote]]\nname = \"r\"\nkind = \"conda\"\nmirrors = [\"http://a/x\"]\ndeny = [\"numpy@~=1.2\"]\n",
            &[":5:", "remote[0].deny[0]", "not a conda version spec"],
        ),
    ];
    for (text, needles) in cases {
        let (code, stderr) = check(text);
        assert_eq!(code, 2, "{text}");
        for needle in *needles {
            assert!(
                stderr.contains(needle),
                "{needle:?} missing from {stderr:?} for\n{text}"
            );
        }
    }
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .args(["check", "--config", "/nonexistent/mirrorcache.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}
