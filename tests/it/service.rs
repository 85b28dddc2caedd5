//! `contrib/mirrorcache.service` as `systemd-analyze verify` reads it (with
//! this build's binary as `ExecStart`, which verify checks exists).

use crate::support::available;

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/contrib/mirrorcache.service"
    ))
    .unwrap();
    for line in [
        "DynamicUser=yes",
        "StateDirectory=mirrorcache",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} missing");
    }
    let analyze = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    // Installed by .ci/tools.sh (Debian's `systemd`).
    if !available("systemd-analyze", analyze) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mirrorcache.service");
    std::fs::write(
        &path,
        unit.replace(
            "/usr/local/bin/mirrorcache",
            env!("CARGO_BIN_EXE_mirrorcache"),
        ),
    )
    .unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{stderr}"
    );
    assert!(
        !stderr.contains("mirrorcache.service"),
        "systemd-analyze warns about the unit:\n{stderr}"
    );
}
