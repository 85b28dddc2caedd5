//! The `rpm` kind (issue 26) against fixture repositories on 127.0.0.1: path
//! classes, the digests `repomd.xml` and `primary.xml` declare (a tampered
//! first mirror refused, the next asked; a package of another length than
//! primary states refused; an `xml:base` on a `files` host relocated through
//! the proxy, checked under `~files/`, with `repomd.xml` restating the
//! relocated primary), the previous generation's data
//! files kept through a regeneration, byte ranges (one range a 206, several
//! a plain 200), and compressed files served as they are, with no
//! `Content-Encoding`.

use std::io::Write as _;

use crate::support::proxy::get;
use crate::support::{
    sha256_hex, tampered, test_bytes, toml_urls, wait_until, MirrorServer, TestProxy,
};

const PKG: &str = "Packages/h/hello-1.0-1.noarch.rpm";

fn remote(mirrors: &[&MirrorServer], extra: &str) -> String {
    format!(
        "[[remote]]\nname = \"el\"\nkind = \"rpm\"\nmirrors = {}\nstrategy = \"single\"\n{extra}\n",
        toml_urls(mirrors, "/os")
    )
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// One generation of a repository: its `repomd.xml`, and every file below
/// the root (data files and packages) with its bytes.
struct Generation {
    repomd: String,
    files: Vec<(String, Vec<u8>)>,
    primary: String,
}

/// A repository of `packages` (href, bytes), with `revision`; `extra` a data
/// file listed under its plain name (not named by its digest).
fn generation(revision: u32, packages: &[(&str, &[u8])], extra: Option<&[u8]>) -> Generation {
    let mut primary = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<metadata xmlns=\"http://linux.duke.edu/metadata/common\">\n");
    for (href, bytes) in packages {
        primary.push_str(&format!(
            "<package type=\"rpm\"><name>{href}</name><checksum type=\"sha256\" pkgid=\"YES\">{}</checksum><location href=\"{href}\"/></package>\n",
            sha256_hex(bytes)
        ));
    }
    primary.push_str("</metadata>\n");
    let gz = gzip(primary.as_bytes());
    let primary_path = format!("repodata/{}-primary.xml.gz", sha256_hex(&gz));
    let mut data = vec![("primary", primary_path.clone(), gz)];
    if let Some(extra) = extra {
        data.push(("comps", "repodata/comps.xml".to_string(), extra.to_vec()));
    }
    let mut repomd = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<repomd xmlns=\"http://linux.duke.edu/metadata/repo\">\n<revision>{revision}</revision>\n");
    for (kind, path, bytes) in &data {
        repomd.push_str(&format!(
            "<data type=\"{kind}\"><checksum type=\"sha256\">{}</checksum><location href=\"{path}\"/><size>{}</size></data>\n",
            sha256_hex(bytes),
            bytes.len()
        ));
    }
    repomd.push_str("</repomd>\n");
    let mut files: Vec<(String, Vec<u8>)> = data.into_iter().map(|(_, p, b)| (p, b)).collect();
    files.extend(packages.iter().map(|(h, b)| (h.to_string(), b.to_vec())));
    Generation {
        repomd,
        files,
        primary: primary_path,
    }
}

fn publish(mirror: &MirrorServer, generation: &Generation) {
    mirror.put("/os/repodata/repomd.xml", generation.repomd.clone());
    for (path, bytes) in &generation.files {
        mirror.put(&format!("/os/{path}"), bytes.clone());
    }
}

/// What a client does: `repomd.xml`, then `primary`.
async fn read_metadata(client: &reqwest::Client, proxy: &TestProxy, generation: &Generation) {
    let (status, _, body) = get(client, &proxy.url("/el/repodata/repomd.xml")).await;
    assert_eq!(status, 200);
    assert_eq!(body.unwrap(), generation.repomd.as_bytes());
    let (status, _, _) = get(client, &proxy.url(&format!("/el/{}", generation.primary))).await;
    assert_eq!(status, 200);
    proxy.settle().await;
}

#[tokio::test]
async fn primary_declares_packages_and_a_tampered_first_mirror_is_refused() {
    let (a, b) = (MirrorServer::start().await, MirrorServer::start().await);
    let rpm = test_bytes(40_000, 26);
    let gen = generation(1, &[(PKG, &rpm)], None);
    publish(&a, &gen);
    publish(&b, &gen);
    // The first mirror sends other bytes under the package's name.
    a.put(&format!("/os/{PKG}"), tampered(&rpm));
    let proxy = TestProxy::start(&remote(&[&a, &b], "")).await;
    let client = reqwest::Client::new();
    read_metadata(&client, &proxy, &gen).await;
    let (status, cache, body) = get(&client, &proxy.url(&format!("/el/{PKG}"))).await;
    assert_eq!((status, cache.as_str()), (200, "MISS"));
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&rpm));
    let pkg = format!("/os/{PKG}");
    assert_eq!((a.hits(&pkg), b.hits(&pkg)), (1, 1));
    assert_eq!(
        proxy.metric("mirrorcache_integrity_failures_total").await,
        1.0
    );
    proxy.settle().await;
    let (status, cache, _) = get(&client, &proxy.url(&format!("/el/{PKG}"))).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!((a.hits(&pkg), b.hits(&pkg)), (1, 1));
}

#[tokio::test]
async fn repomd_declares_data_files_and_digest_named_files_declare_themselves() {
    let (a, b) = (MirrorServer::start().await, MirrorServer::start().await);
    let comps = b"<comps><group><id>core</id></group></comps>".to_vec();
    let gen = generation(1, &[(PKG, b"rpm")], Some(&comps));
    publish(&a, &gen);
    publish(&b, &gen);
    // The first mirror's primary (named by its digest) and comps (declared
    // only by repomd.xml) are other bytes.
    a.put(&format!("/os/{}", gen.primary), gzip(b"<metadata/>"));
    a.put("/os/repodata/comps.xml", tampered(&comps));
    let proxy = TestProxy::start(&remote(&[&a, &b], "")).await;
    let client = reqwest::Client::new();
    read_metadata(&client, &proxy, &gen).await;
    let primary = format!("/os/{}", gen.primary);
    assert_eq!((a.hits(&primary), b.hits(&primary)), (1, 1));
    let (status, _, body) = get(&client, &proxy.url("/el/repodata/comps.xml")).await;
    assert_eq!(status, 200);
    assert_eq!(body.unwrap(), comps);
    assert_eq!(
        (
            a.hits("/os/repodata/comps.xml"),
            b.hits("/os/repodata/comps.xml")
        ),
        (1, 1)
    );
    // The package primary declares is checked too: the good primary was learned.
    let (status, _, _) = get(&client, &proxy.url(&format!("/el/{PKG}"))).await;
    assert_eq!(status, 200);
    assert_eq!(
        proxy.metric("mirrorcache_integrity_failures_total").await,
        2.0
    );
}

fn gunzip(bytes: &[u8]) -> String {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(bytes), &mut text).unwrap();
    text
}

/// The text of the first `<{element}…>…</{element}>` inside the `<data
/// type="{kind}">` of `repomd`.
fn data_field(repomd: &str, kind: &str, element: &str) -> String {
    let data = &repomd[repomd.find(&format!("<data type=\"{kind}\">")).unwrap()..];
    let data = &data[..data.find("</data>").unwrap()];
    let open = data.find(&format!("<{element}")).unwrap();
    let text = &data[open + data[open..].find('>').unwrap() + 1..];
    text[..text.find('<').unwrap()].to_string()
}

#[tokio::test]
async fn an_xml_base_on_a_files_host_is_relocated_through_the_proxy_and_repomd_restates_it() {
    let (mirror, bad, files) = (
        MirrorServer::start().await,
        MirrorServer::start().await,
        MirrorServer::start().await,
    );
    let rpm = test_bytes(8_000, 5);
    // A primary whose package lives on another host (`xml:base`), as a
    // repository whose packages are on a separate download host; a zchunk
    // primary beside it.
    let primary = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<metadata xmlns=\"http://linux.duke.edu/metadata/common\" packages=\"1\">\n<package type=\"rpm\"><name>hello</name><checksum type=\"sha256\">{}</checksum><size package=\"{}\"/><location xml:base=\"{}\" href=\"{PKG}\"/></package>\n</metadata>\n",
        sha256_hex(&rpm),
        rpm.len(),
        files.url("/pub/")
    );
    let gz = gzip(primary.as_bytes());
    let primary_path = format!("repodata/{}-primary.xml.gz", sha256_hex(&gz));
    let zck_path = format!("repodata/{}-primary.xml.zck", sha256_hex(b"zck"));
    let repomd = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<repomd xmlns=\"http://linux.duke.edu/metadata/repo\">\n  <revision>7</revision>\n  <data type=\"primary\">\n    <checksum type=\"sha256\">{}</checksum>\n    <open-checksum type=\"sha256\">{}</open-checksum>\n    <location href=\"{primary_path}\"/>\n    <size>{}</size>\n    <open-size>{}</open-size>\n  </data>\n  <data type=\"primary_zck\">\n    <checksum type=\"sha256\">{}</checksum>\n    <location href=\"{zck_path}\"/>\n  </data>\n</repomd>\n",
        sha256_hex(&gz),
        sha256_hex(primary.as_bytes()),
        gz.len(),
        primary.len(),
        sha256_hex(b"zck"),
    );
    mirror.put("/os/repodata/repomd.xml", repomd.clone());
    mirror.put(&format!("/os/{primary_path}"), gz.clone());
    bad.put(&format!("/pub/{PKG}"), tampered(&rpm));
    files.put(&format!("/pub/{PKG}"), rpm.clone());
    let extra = format!(
        "files = [\"{}\", \"{}\"]",
        bad.url("/pub"),
        files.url("/pub")
    );
    let proxy = TestProxy::start(&remote(&[&mirror], &extra)).await;
    let client = reqwest::Client::new();

    // What dnf reads: repomd.xml, then the primary it lists, checked
    // against what repomd.xml states.
    let (status, _, body) = get(&client, &proxy.url("/el/repodata/repomd.xml")).await;
    assert_eq!(status, 200);
    let served_repomd = String::from_utf8(body.unwrap().to_vec()).unwrap();
    let (status, _, body) = get(&client, &proxy.url(&format!("/el/{primary_path}"))).await;
    assert_eq!(status, 200);
    let served_primary = body.unwrap();
    let xml = gunzip(&served_primary);
    let relocated = format!("xml:base=\"{}\"", proxy.url("/el/~files/"));
    assert!(xml.contains(&relocated), "{xml}");
    assert_eq!(
        xml,
        primary.replace(&format!("xml:base=\"{}\"", files.url("/pub/")), &relocated)
    );
    assert_eq!(
        data_field(&served_repomd, "primary", "checksum"),
        sha256_hex(&served_primary)
    );
    assert_eq!(
        data_field(&served_repomd, "primary", "size"),
        served_primary.len().to_string()
    );
    assert_eq!(
        data_field(&served_repomd, "primary", "open-checksum"),
        sha256_hex(xml.as_bytes())
    );
    assert_eq!(
        data_field(&served_repomd, "primary", "open-size"),
        xml.len().to_string()
    );
    assert!(!served_repomd.contains("primary_zck"), "{served_repomd}");
    assert!(served_repomd.contains("<revision>7</revision>"));
    // Asked again, the same bytes (dnf may read them in separate runs).
    let (_, _, again) = get(&client, &proxy.url("/el/repodata/repomd.xml")).await;
    assert_eq!(again.unwrap(), served_repomd.as_bytes());
    proxy.settle().await;

    // The package, at the relocated address: through the files mirrors,
    // the tampered first one refused by what primary declares.
    let (status, _, body) = get(&client, &format!("{}{PKG}", proxy.url("/el/~files/"))).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&rpm));
    let pkg = format!("/pub/{PKG}");
    assert_eq!((bad.hits(&pkg), files.hits(&pkg)), (1, 1));
    // The primary from the mirror once, as stored.
    assert_eq!(mirror.hits(&format!("/os/{primary_path}")), 1);
}

#[tokio::test]
async fn without_files_mirrors_repomd_and_primary_are_served_as_stored() {
    let mirror = MirrorServer::start().await;
    let gen = generation(1, &[(PKG, b"rpm")], None);
    publish(&mirror, &gen);
    let proxy = TestProxy::start(&remote(&[&mirror], "")).await;
    let client = reqwest::Client::new();
    read_metadata(&client, &proxy, &gen).await;
    let (_, _, body) = get(&client, &proxy.url(&format!("/el/{}", gen.primary))).await;
    assert_eq!(body.unwrap(), gen.files[0].1);
}

#[tokio::test]
async fn a_package_of_another_length_than_primary_states_is_refused() {
    let mirror = MirrorServer::start().await;
    let (right, wrong) = (
        "Packages/r/right-1-1.noarch.rpm",
        "Packages/w/wrong-1-1.noarch.rpm",
    );
    let rpm = test_bytes(6_000, 9);
    // The same bytes under two names; primary states one's length wrongly.
    let primary = format!(
        "<metadata xmlns=\"http://linux.duke.edu/metadata/common\"><package type=\"rpm\"><checksum type=\"sha256\">{sha}</checksum><size package=\"{len}\"/><location href=\"{right}\"/></package><package type=\"rpm\"><checksum type=\"sha256\">{sha}</checksum><size package=\"{bad}\"/><location href=\"{wrong}\"/></package></metadata>",
        sha = sha256_hex(&rpm),
        len = rpm.len(),
        bad = rpm.len() + 1,
    );
    let gz = gzip(primary.as_bytes());
    let primary_path = format!("repodata/{}-primary.xml.gz", sha256_hex(&gz));
    let repomd = format!(
        "<repomd><data type=\"primary\"><checksum type=\"sha256\">{}</checksum><location href=\"{primary_path}\"/><size>{}</size></data></repomd>",
        sha256_hex(&gz),
        gz.len()
    );
    mirror.put("/os/repodata/repomd.xml", repomd);
    mirror.put(&format!("/os/{primary_path}"), gz);
    mirror.put(&format!("/os/{right}"), rpm.clone());
    mirror.put(&format!("/os/{wrong}"), rpm.clone());
    let proxy = TestProxy::start(&remote(&[&mirror], "")).await;
    let client = reqwest::Client::new();
    let (status, _, _) = get(&client, &proxy.url("/el/repodata/repomd.xml")).await;
    assert_eq!(status, 200);
    let (status, _, _) = get(&client, &proxy.url(&format!("/el/{primary_path}"))).await;
    assert_eq!(status, 200);
    proxy.settle().await;
    let (status, _, body) = get(&client, &proxy.url(&format!("/el/{right}"))).await;
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&body.unwrap()), sha256_hex(&rpm));
    let (status, _, body) = get(&client, &proxy.url(&format!("/el/{wrong}"))).await;
    assert_eq!(status, 502);
    let body = String::from_utf8(body.unwrap().to_vec()).unwrap();
    assert!(
        body.contains(&format!("({} bytes)", rpm.len() + 1)),
        "{body}"
    );
    assert_eq!(
        proxy.metric("mirrorcache_integrity_failures_total").await,
        1.0
    );
    proxy.settle().await;
    let (status, _, _) = get(&client, &proxy.url(&format!("/el/{wrong}"))).await;
    assert_eq!(status, 502, "nothing was cached");
}

#[tokio::test]
async fn the_previous_generation_stays_servable_after_a_regeneration() {
    let mirror = MirrorServer::start().await;
    let (old_rpm, new_rpm) = (test_bytes(5_000, 1), test_bytes(5_000, 2));
    let old = generation(1, &[(PKG, &old_rpm)], None);
    let new_pkg = "Packages/h/hello-2.0-1.noarch.rpm";
    let new = generation(2, &[(PKG, &old_rpm), (new_pkg, &new_rpm)], None);
    assert_ne!(old.primary, new.primary);
    publish(&mirror, &old);
    // An old data file this client never fetched (a filelists listed beside).
    let unread = "/os/repodata/0000000000000000000000000000000000000000000000000000000000000000-other.xml.gz";
    mirror.put(unread, gzip(b"<otherdata/>"));
    let proxy = TestProxy::start(&remote(&[&mirror], "revalidate_after = \"1s\"")).await;
    let client = reqwest::Client::new();
    read_metadata(&client, &proxy, &old).await;

    // The upstream regenerates: a new repomd.xml, the old data files deleted.
    publish(&mirror, &new);
    mirror.remove(&format!("/os/{}", old.primary));
    mirror.remove(unread);
    wait_until("the new repomd.xml served", async || {
        let (_, _, body) = get(&client, &proxy.url("/el/repodata/repomd.xml")).await;
        body.unwrap() == new.repomd.as_bytes()
    })
    .await;
    // A client that read the old repomd.xml still gets the old primary, from
    // the cache, without asking upstream.
    let asked = mirror.total();
    let (status, cache, body) = get(&client, &proxy.url(&format!("/el/{}", old.primary))).await;
    assert_eq!((status, cache.as_str()), (200, "HIT"));
    assert_eq!(body.unwrap(), old.files[0].1);
    assert_eq!(mirror.total(), asked);
    // The new generation is served, and what it declares is checked.
    read_metadata(&client, &proxy, &new).await;
    let (status, _, body) = get(&client, &proxy.url(&format!("/el/{new_pkg}"))).await;
    assert_eq!(status, 200);
    assert_eq!(body.unwrap(), new_rpm);
    // An old data file nobody had fetched is gone with the upstream's copy.
    let (status, _, _) = get(&client, &proxy.url(&unread.replace("/os/", "/el/"))).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn compressed_files_have_no_content_encoding_and_ranges_are_right() {
    let mirror = MirrorServer::start().await;
    let rpm = test_bytes(10_000, 3);
    let gen = generation(1, &[(PKG, &rpm)], None);
    publish(&mirror, &gen);
    let zst = "repodata/0123456789abcdef0123456789abcdef01234567-filelists.xml.zst";
    let zst_bytes = test_bytes(3_000, 4);
    mirror.put(&format!("/os/{zst}"), zst_bytes.clone());
    let proxy = TestProxy::start(&remote(&[&mirror], "")).await;
    let client = reqwest::Client::new();
    read_metadata(&client, &proxy, &gen).await;
    let gz = gen.files[0].1.clone();
    for (path, bytes) in [(&gen.primary, &gz), (&zst.to_string(), &zst_bytes)] {
        for round in ["miss", "hit"] {
            let response = client
                .get(proxy.url(&format!("/el/{path}")))
                .header("accept-encoding", "gzip, zstd")
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            assert!(
                response.headers().get("content-encoding").is_none(),
                "{path} {round}: {:?}",
                response.headers()
            );
            assert_eq!(&response.bytes().await.unwrap()[..], &bytes[..], "{path}");
            proxy.settle().await;
        }
    }

    let url = proxy.url(&format!("/el/{PKG}"));
    let (status, _, _) = get(&client, &url).await;
    assert_eq!(status, 200);
    proxy.settle().await;
    // One range: a 206 with those bytes.
    let response = client
        .get(&url)
        .header("range", "bytes=10-20")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 206);
    assert_eq!(
        response.headers()["content-range"],
        format!("bytes 10-20/{}", rpm.len())
    );
    assert_eq!(&response.bytes().await.unwrap()[..], &rpm[10..=20]);
    // Several ranges (zchunk asks so): the whole body as a plain 200, never
    // a 206 of something else.
    let response = client
        .get(&url)
        .header("range", "bytes=0-10,20-30")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("content-range").is_none());
    assert_eq!(&response.bytes().await.unwrap()[..], &rpm[..]);
}

#[test]
fn deny_and_allow_are_refused_on_an_rpm_remote() {
    let text = "[[remote]]\nname = \"el\"\nkind = \"rpm\"\nmirrors = [\"http://127.0.0.1:9/os\"]\ndeny = [\"hello\"]\n";
    let output = crate::support::binary::check(text);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("rpm remote cannot tell packages apart"),
        "{stderr}"
    );
}
