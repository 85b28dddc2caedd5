//! Container registries: with a private `oci` remote, `/v2/` challenges
//! (container clients send credentials only after a 401) while anonymous
//! `oci` remotes stay pullable without any; the check runs on the remote
//! the name, `?ns=` or the root-remote fallback resolved to.

use super::{basic, AuthProxy};
use crate::support::{sha256_hex, MirrorServer};

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

fn image(mirror: &MirrorServer, name: &str) -> String {
    let blob = format!("layer of {name}").into_bytes();
    let digest = format!("sha256:{}", sha256_hex(&blob));
    mirror.put(&format!("/v2/{name}/blobs/{digest}"), blob);
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"{MANIFEST}","layers":[{{"digest":"{digest}","size":1}}]}}"#
    );
    mirror.put_typed(&format!("/v2/{name}/manifests/1"), manifest, MANIFEST);
    digest
}

#[tokio::test]
async fn v2_challenges_with_a_private_oci_remote_and_public_images_stay_pullable() {
    let (hub, internal) = (MirrorServer::start().await, MirrorServer::start().await);
    let public_blob = image(&hub, "library/app");
    let private_blob = image(&internal, "team/app");
    let remotes = format!(
        "[[remote]]\nname = \"hub\"\nkind = \"oci\"\nmirrors = [\"{}\"]\nregistry = \"docker.io\"\n\n\
         [[remote]]\nname = \"internal\"\nkind = \"oci\"\nmirrors = [\"{}\"]\nregistry = \"registry.internal\"\naccess = [\"ci\"]\n",
        hub.url(""),
        internal.url("")
    );
    let proxy = AuthProxy::start_with("oci_root_remote = \"internal\"", &remotes).await;
    let ci = basic("ci", "ci-pass");

    let (status, headers, body) = proxy.get("/v2/", &[]).await;
    assert_eq!(status, 401);
    // The token service, and no other scheme (Basic sent unasked is
    // taken: below).
    let challenges: Vec<&str> = headers
        .get_all("www-authenticate")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        challenges,
        [format!(
            "Bearer realm=\"{}/v2/token\",service=\"mirrorcache\"",
            proxy.base
        )
        .as_str()]
    );
    assert_eq!(headers["docker-distribution-api-version"], "registry/2.0");
    assert!(String::from_utf8_lossy(&body).contains("UNAUTHORIZED"));
    assert_eq!(proxy.get("/v2/", &[("authorization", &ci)]).await.0, 200);
    assert_eq!(
        proxy
            .get("/v2/", &[("authorization", &basic("ci", "x"))])
            .await
            .0,
        401
    );

    // Anonymous pulls of the public remote, with no credentials or empty ones.
    for auth in [None, Some("Basic Og==")] {
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
        let (status, _, _) = proxy
            .get(
                &format!("/v2/hub/library/app/blobs/{public_blob}"),
                &headers,
            )
            .await;
        assert_eq!(status, 200);
        let (status, _, _) = proxy
            .get(
                &format!("/v2/library/app/blobs/{public_blob}?ns=docker.io"),
                &headers,
            )
            .await;
        assert_eq!(status, 200);
    }

    // The private remote, by its name, by `?ns=` and as the root remote.
    for path in [
        format!("/v2/internal/team/app/blobs/{private_blob}"),
        format!("/v2/team/app/blobs/{private_blob}?ns=registry.internal"),
        format!("/v2/team/app/blobs/{private_blob}"),
        "/v2/team/app/manifests/1".to_string(),
        "/v2/internal/team/app/tags/list".to_string(),
    ] {
        let (status, headers, body) = proxy.get(&path, &[]).await;
        assert_eq!(status, 401, "{path}");
        assert!(headers.contains_key("www-authenticate"));
        assert!(
            !String::from_utf8_lossy(&body).contains("team/app"),
            "{path}"
        );
        let (status, _, body) = proxy
            .get(&path, &[("authorization", &basic("dev", "dev-pass"))])
            .await;
        assert_eq!(status, 404, "{path}");
        assert!(String::from_utf8_lossy(&body).contains("NAME_UNKNOWN"));
    }
    assert_eq!(internal.total(), 0, "nothing reached the private registry");
    let (status, _, _) = proxy
        .get(
            &format!("/v2/team/app/blobs/{private_blob}"),
            &[("authorization", &ci)],
        )
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn v2_stays_open_when_every_oci_remote_is_anonymous() {
    let hub = MirrorServer::start().await;
    let remotes = format!(
        "[[remote]]\nname = \"hub\"\nkind = \"oci\"\nmirrors = [\"{}\"]\n",
        hub.url("")
    );
    let proxy = AuthProxy::start_with("", &remotes).await;
    assert_eq!(proxy.get("/v2/", &[]).await.0, 200);
}

/// The remote's own registry credentials go to a token realm on another
/// host (here: another port) only when `token_realms` lists it.
#[tokio::test]
async fn upstream_credentials_go_only_to_a_listed_token_realm() {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let realm = MirrorServer::start().await;
    realm.put_typed("/token", r#"{"token":"t0k"}"#, "application/json");
    let blob = b"layer".to_vec();
    let digest = format!("sha256:{}", sha256_hex(&blob));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let challenge = format!("Bearer realm=\"{}\",service=\"reg\"", realm.url("/token"));
    let app = axum::Router::new().route(
        "/v2/{*rest}",
        axum::routing::get(move |headers: axum::http::HeaderMap| {
            let (challenge, blob) = (challenge.clone(), blob.clone());
            async move {
                if headers
                    .get("authorization")
                    .is_none_or(|v| v != "Bearer t0k")
                {
                    return (StatusCode::UNAUTHORIZED, [("www-authenticate", challenge)])
                        .into_response();
                }
                blob.into_response()
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    std::env::set_var("MC_TEST_REALM_PASSWORD", "realm-secret");
    for (listed, expect_credentials) in [("", false), ("listed", true)] {
        let token_realms = if listed.is_empty() {
            String::new()
        } else {
            format!("token_realms = [\"{}\"]\n", realm.url(""))
        };
        let remotes = format!(
            "[[remote]]\nname = \"reg{listed}\"\nkind = \"oci\"\nmirrors = [\"http://{addr}\"]\n\
             username = \"puller\"\npassword_env = \"MC_TEST_REALM_PASSWORD\"\n{token_realms}"
        );
        let proxy = AuthProxy::start_with("", &remotes).await;
        let (status, _, _) = proxy
            .get(&format!("/v2/reg{listed}/app/blobs/{digest}"), &[])
            .await;
        assert_eq!(status, 200);
        let asked = realm.last_request().unwrap();
        assert_eq!(
            asked.headers.contains_key("authorization"),
            expect_credentials,
            "token_realms {listed:?}"
        );
    }
}
