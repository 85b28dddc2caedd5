//! The registry token service (`/v2/token`), as `docker login`, containerd
//! and podman use it: a token for the repositories the caller may read and
//! no others, refresh tokens for `docker login`'s identity token, both
//! grant forms of `POST`, and a token one instance signed taken by another
//! sharing its database.

use super::{basic, send, start, AuthProxy};
use crate::support::{sha256_hex, MirrorServer};

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

async fn token_of(url: &str, auth: Option<&str>) -> (u16, serde_json::Value) {
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
    let (status, _, body) = send(reqwest::Method::GET, url, &headers).await;
    (status, serde_json::from_slice(&body).unwrap_or_default())
}

async fn post_token(proxy: &AuthProxy, form: &[(&str, &str)]) -> (u16, serde_json::Value) {
    let response = reqwest::Client::new()
        .post(proxy.url("/v2/token"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(
            url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(form)
                .finish(),
        )
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).unwrap_or_default())
}

#[tokio::test]
async fn tokens_grant_readable_repositories_refresh_and_serve_the_whole_fleet() {
    let internal = MirrorServer::start().await;
    let manifest = format!(r#"{{"schemaVersion":2,"mediaType":"{MANIFEST}","layers":[]}}"#);
    internal.put_typed("/v2/team/app/manifests/1", manifest.clone(), MANIFEST);
    internal.put_typed("/v2/team/other/manifests/1", manifest.clone(), MANIFEST);
    let remotes = format!(
        "[[remote]]\nname = \"internal\"\nkind = \"oci\"\nmirrors = [\"{}\"]\naccess = [\"ci\"]\n",
        internal.url("")
    );
    let proxy = AuthProxy::start_with("", &remotes).await;
    let app = "/v2/internal/team/app/manifests/1";

    // A pull without credentials is asked for a token of that repository.
    let (status, headers, _) = proxy.get(app, &[]).await;
    assert_eq!(status, 401);
    let bearer = headers["www-authenticate"].to_str().unwrap();
    assert!(
        bearer.ends_with(",scope=\"repository:internal/team/app:pull\""),
        "{bearer}"
    );

    let scope = "service=mirrorcache&scope=repository:internal/team/app:pull";
    let url = proxy.url(&format!(
        "/v2/token?{scope}&offline_token=true&client_id=docker"
    ));
    let (status, issued) = token_of(&url, Some(&basic("ci", "ci-pass"))).await;
    assert_eq!(status, 200, "{issued}");
    let token = issued["token"].as_str().unwrap().to_string();
    assert_eq!(issued["access_token"], issued["token"]);
    assert_eq!(issued["expires_in"], 300);
    let refresh = issued["refresh_token"].as_str().unwrap().to_string();
    let bearer = format!("Bearer {token}");
    let (status, _, body) = proxy.get(app, &[("authorization", &bearer)]).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body), sha256_hex(manifest.as_bytes()));
    // Not another repository, not `/v2/` for another route, not a refresh
    // token in place of an access token.
    let other = "/v2/internal/team/other/manifests/1";
    assert_eq!(proxy.get(other, &[("authorization", &bearer)]).await.0, 401);
    assert_eq!(
        proxy
            .get("/secret/hidden-package/x", &[("authorization", &bearer)])
            .await
            .0,
        401
    );
    let refresh_bearer = format!("Bearer {refresh}");
    assert_eq!(
        proxy
            .get(app, &[("authorization", &refresh_bearer)])
            .await
            .0,
        401
    );
    assert_eq!(
        proxy.get("/v2/", &[("authorization", &bearer)]).await.0,
        200
    );

    // Wrong credentials get no token; a user the remote does not list, and
    // an anonymous caller, get one that grants nothing.
    let (status, _) = token_of(&url, Some(&basic("ci", "wrong"))).await;
    assert_eq!(status, 401);
    for auth in [Some(basic("dev", "dev-pass")), None] {
        let (status, issued) = token_of(&url, auth.as_deref()).await;
        assert_eq!(status, 200);
        assert!(issued.get("refresh_token").is_none() || auth.is_some());
        let bearer = format!("Bearer {}", issued["token"].as_str().unwrap());
        let (status, _, _) = proxy.get(app, &[("authorization", &bearer)]).await;
        assert!(status == 401 || status == 404, "{status}");
    }

    // The OAuth2 forms: a refresh token, and a password.
    let (status, issued) = post_token(
        &proxy,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh),
            ("service", "mirrorcache"),
            ("scope", "repository:internal/team/other:pull"),
            ("client_id", "docker"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{issued}");
    let other_bearer = format!("Bearer {}", issued["access_token"].as_str().unwrap());
    assert_eq!(
        proxy
            .get(other, &[("authorization", &other_bearer)])
            .await
            .0,
        200
    );
    let form = |password: &'static str| {
        [
            ("grant_type", "password"),
            ("username", "ci"),
            ("password", password),
            ("service", "mirrorcache"),
            ("scope", "repository:internal/team/app:pull"),
        ]
    };
    assert_eq!(post_token(&proxy, &form("ci-pass")).await.0, 200);
    assert_eq!(post_token(&proxy, &form("wrong")).await.0, 401);
    let (status, _) = post_token(
        &proxy,
        &[("grant_type", "refresh_token"), ("refresh_token", &token)],
    )
    .await;
    assert_eq!(status, 401, "an access token is no refresh token");

    // Another instance on the same database takes the token.
    let second = start(&proxy.config_text).await;
    let second_url = format!("http://{}{app}", second.local_addr);
    let (status, _, _) = send(
        reqwest::Method::GET,
        &second_url,
        &[("authorization", &bearer)],
    )
    .await;
    assert_eq!(status, 200);
    second.shutdown().await;
}
