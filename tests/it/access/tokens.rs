//! Tokens: made by `mirrorcache token add` (the binary: the token alone on
//! its last line), accepted as `Bearer`, bare (cargo), and as the Basic
//! password of their user; expired, revoked and other users' tokens are
//! 401, and a user removed from the htpasswd file takes their tokens along.

use std::process::Command;

use super::{basic, htpasswd, AuthProxy};

fn token_command(proxy: &AuthProxy, args: &[&str]) -> std::process::Output {
    let config_path = proxy.dir.path().join("mirrorcache.toml");
    std::fs::write(&config_path, &proxy.config_text).unwrap();
    Command::new(env!("CARGO_BIN_EXE_mirrorcache"))
        .arg("token")
        .args(args)
        .arg("--config")
        .arg(&config_path)
        .output()
        .unwrap()
}

pub fn add(proxy: &AuthProxy, user: &str) -> String {
    let out = token_command(proxy, &["add", "--user", user, "--expires", "90d"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    stdout.lines().last().unwrap().to_string()
}

#[tokio::test]
async fn tokens_work_in_the_forms_clients_send_them() {
    let proxy = AuthProxy::start().await;
    let token = add(&proxy, "ci");
    assert!(token.starts_with("mct_") && !token.contains(' '), "{token}");
    for header in [
        format!("Bearer {token}"),
        format!("bearer {token}"),
        token.clone(),
        basic("ci", &token),
    ] {
        let (status, _, _) = proxy
            .get("/secret/hidden-package/x", &[("authorization", &header)])
            .await;
        assert_eq!(status, 200, "{}", &header[..10]);
    }
    // As the password of another user: no.
    let (status, _, _) = proxy
        .get(
            "/secret/hidden-package/x",
            &[("authorization", &basic("dev", &token))],
        )
        .await;
    assert_eq!(status, 401);
    // A token of dev: valid, but secret lists only ci.
    let dev_token = add(&proxy, "dev");
    let (status, _, _) = proxy
        .get(
            "/secret/hidden-package/x",
            &[("authorization", &format!("Bearer {dev_token}"))],
        )
        .await;
    assert_eq!(status, 404);

    // `token list` shows ids and users, never a secret.
    let out = token_command(&proxy, &["list"]);
    let listed = String::from_utf8(out.stdout).unwrap();
    assert!(listed.contains("ci") && listed.contains("dev"), "{listed}");
    let secret_part = &token[17..];
    assert!(!listed.contains(secret_part), "{listed}");

    // Revoked before first use: refused.
    let fresh = add(&proxy, "ci");
    let id = &fresh[4..16];
    let out = token_command(&proxy, &["revoke", id]);
    assert!(out.status.success());
    let (status, _, _) = proxy
        .get(
            "/secret/hidden-package/x",
            &[("authorization", &format!("Bearer {fresh}"))],
        )
        .await;
    assert_eq!(status, 401);
    assert!(!token_command(&proxy, &["revoke", id]).status.success());

    // A token for a user the file lacks cannot be made.
    let out = token_command(&proxy, &["add", "--user", "nobody"]);
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test]
async fn an_expired_token_is_refused() {
    let proxy = AuthProxy::start().await;
    let made = mirrorcache::access::token::generate().unwrap();
    let meta = &proxy.running.proxy.cache.meta;
    mirrorcache::access::token_table::TokenTable::of(meta)
        .insert(&mirrorcache::access::token_table::TokenRow {
            id: made.id.clone(),
            user: "ci".into(),
            secret_hash: made.secret_hash.clone(),
            created_at_ms: 0,
            expires_at_ms: Some(1),
        })
        .await
        .unwrap();
    let (status, _, _) = proxy
        .get(
            "/secret/hidden-package/x",
            &[("authorization", &format!("Bearer {}", made.text))],
        )
        .await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn a_removed_user_loses_password_and_tokens_on_reload() {
    let proxy = AuthProxy::start().await;
    let token = add(&proxy, "ci");
    let bearer = format!("Bearer {token}");
    let password = basic("ci", "ci-pass");
    for header in [&bearer, &password] {
        let (status, _, _) = proxy
            .get("/secret/hidden-package/x", &[("authorization", header)])
            .await;
        assert_eq!(status, 200);
    }
    std::fs::write(proxy.htpasswd_path(), htpasswd(&[("dev", "dev-pass")])).unwrap();
    proxy.running.reload(&proxy.config());
    for header in [&bearer, &password] {
        let (status, _, _) = proxy
            .get("/secret/hidden-package/x", &[("authorization", header)])
            .await;
        assert_eq!(status, 401);
    }
    // A broken file keeps the users there are.
    std::fs::write(proxy.htpasswd_path(), "dev:{SHA}notbcrypt\n").unwrap();
    assert!(mirrorcache::config::Config::parse(&proxy.config_text, "t.toml").is_err());
    let (status, _, _) = proxy
        .get(
            "/team/t.txt",
            &[("authorization", &basic("dev", "dev-pass"))],
        )
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn sighup_reloads_the_htpasswd_file() {
    let dir = tempfile::tempdir().unwrap();
    let mirror = crate::support::MirrorServer::start().await;
    mirror.put("/x", b"bytes".to_vec());
    let users = dir.path().join("users.htpasswd");
    std::fs::write(&users, htpasswd(&[("ci", "old-pass")])).unwrap();
    let remotes = format!(
        "[[remote]]\nname = \"secret\"\nmirrors = [\"{}\"]\naccess = \"authenticated\"\n",
        mirror.url("")
    );
    let proxy = crate::support::BinaryProxy::start(
        dir.path(),
        &super::auth_config(dir.path(), "", &remotes),
    )
    .await;
    let client = reqwest::Client::new();
    let status = |password: &'static str| {
        let request = client
            .get(proxy.url("/secret/x"))
            .header("authorization", basic("ci", password));
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status("old-pass").await, 200);
    std::fs::write(&users, htpasswd(&[("ci", "new-pass")])).unwrap();
    proxy.signal("HUP");
    crate::support::wait_until("the new password", async || status("new-pass").await == 200).await;
    assert_eq!(status("old-pass").await, 401);
    // A broken file on the next SIGHUP: logged, and the users stay.
    std::fs::write(&users, "ci:plain-text\n").unwrap();
    proxy.signal("HUP");
    crate::support::wait_until("the refusal in the log", async || {
        proxy.log().contains("new config refused")
    })
    .await;
    assert_eq!(status("new-pass").await, 200);
    assert!(
        !proxy.log().contains("plain-text"),
        "the line is not echoed"
    );
}
