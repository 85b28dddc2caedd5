//! NuGet feed fixtures shared by the `it` and `clients` targets: a v2
//! (OData Atom) feed laid out as the gallery serves it, each entry with its
//! `PackageHash`.

use base64::Engine as _;
use sha2::Digest as _;

use super::MirrorServer;

/// `packageHash`: the SHA-512 of the package, base64.
pub fn package_hash(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(bytes))
}

/// One v2 entry of `Acme.Hello`, as the gallery writes it.
fn v2_entry(base: &str, version: &str, published: &str, package: &[u8]) -> String {
    format!(
        "<entry><id>{base}/Packages(Id='Acme.Hello',Version='{version}')</id><title type=\"text\">Acme.Hello</title><content type=\"application/zip\" src=\"{base}/package/Acme.Hello/{version}\" /><m:properties><d:Id>Acme.Hello</d:Id><d:Version>{version}</d:Version><d:Published m:type=\"Edm.DateTime\">{published}</d:Published><d:PackageHash>{}</d:PackageHash><d:PackageHashAlgorithm>SHA512</d:PackageHashAlgorithm></m:properties></entry>",
        package_hash(package)
    )
}

/// A v2 feed at `{mirror}/api/v2`: the service document, each version's
/// `Packages(Id=…,Version=…)` entry (as nuget 2.8 spells it, quotes
/// escaped), `FindPackagesById()` and the downloads.
pub fn v2_feed(mirror: &MirrorServer, versions: &[(&str, &str, &[u8])]) {
    let base = mirror.url("/api/v2");
    let head = format!("<?xml version=\"1.0\" encoding=\"utf-8\"?><feed xml:base=\"{base}/\" xmlns=\"http://www.w3.org/2005/Atom\" xmlns:d=\"http://schemas.microsoft.com/ado/2007/08/dataservices\" xmlns:m=\"http://schemas.microsoft.com/ado/2007/08/dataservices/metadata\"><title type=\"text\">Packages</title>");
    mirror.put_typed("/api/v2/", format!("<?xml version=\"1.0\" encoding=\"utf-8\"?><service xml:base=\"{base}/\" xmlns=\"http://www.w3.org/2007/app\" xmlns:atom=\"http://www.w3.org/2005/Atom\"><workspace><atom:title>Default</atom:title><collection href=\"Packages\"><atom:title>Packages</atom:title></collection></workspace></service>"), "application/atomsvc+xml;charset=utf-8");
    let mut all = head.clone();
    for (v, published, package) in versions {
        let entry = v2_entry(&base, v, published, package);
        let single = entry.replacen("<entry>", "<entry xmlns=\"http://www.w3.org/2005/Atom\" xmlns:d=\"http://schemas.microsoft.com/ado/2007/08/dataservices\" xmlns:m=\"http://schemas.microsoft.com/ado/2007/08/dataservices/metadata\">", 1);
        mirror.put_typed(
            &format!("/api/v2/Packages(Id=%27Acme.Hello%27,Version=%27{v}%27)"),
            format!("<?xml version=\"1.0\" encoding=\"utf-8\"?>{single}"),
            "application/atom+xml;type=entry;charset=utf-8",
        );
        mirror.put_typed(
            &format!("/api/v2/package/Acme.Hello/{v}"),
            package.to_vec(),
            "application/zip",
        );
        all.push_str(&entry);
    }
    all.push_str("</feed>");
    mirror.put_typed(
        "/api/v2/FindPackagesById()",
        all,
        "application/atom+xml;type=feed;charset=utf-8",
    );
}
