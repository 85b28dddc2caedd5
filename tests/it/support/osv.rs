//! OSV exports for the quarantine tests: a zip of records, one
//! `<id>.json` each, as the OSV project publishes `all.zip`.

use std::io::Write;

use serde_json::{json, Value};

/// A zip of OSV `records`.
pub fn osv_zip(records: &[Value]) -> Vec<u8> {
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for record in records {
        let name = format!("{}.json", record["id"].as_str().unwrap());
        out.start_file(name, options).unwrap();
        out.write_all(serde_json::to_string_pretty(record).unwrap().as_bytes())
            .unwrap();
    }
    out.finish().unwrap().into_inner()
}

/// An OSV malicious-package record `id` naming `versions` of `name` in
/// OSV ecosystem `ecosystem`.
pub fn malicious(id: &str, ecosystem: &str, name: &str, versions: &[&str]) -> Value {
    json!({
        "schema_version": "1.6.0",
        "id": id,
        "modified": "2025-09-08T12:00:00Z",
        "published": "2025-09-08T12:00:00Z",
        "summary": format!("Malicious code in {name} ({ecosystem})"),
        "details": "The package steals tokens and republishes itself.",
        "affected": [{
            "package": {"ecosystem": ecosystem, "name": name},
            "versions": versions,
            "database_specific": {"source": "fixture"}
        }],
        "database_specific": {"malicious-packages-origins": [{"source": "fixture"}]}
    })
}

/// `/-/status`'s entry for advisory feed `name` at `base`, once `ready`
/// says it is what the test waits for (feeds are read beside the requests,
/// at start and every `refresh`).
pub async fn feed_status(base: &str, name: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let mut found = Value::Null;
    super::wait_until(&format!("advisory feed {name}"), async || {
        let body = reqwest::get(format!("{base}/-/status"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let status: Value = serde_json::from_str(&body).unwrap();
        let feed = status["advisories"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name && ready(f))
            .cloned();
        feed.map(|f| found = f).is_some()
    })
    .await;
    found
}
