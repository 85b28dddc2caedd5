//! NuGet v3 JSON documents read for what the proxy needs: a registration
//! index, page or leaf (`RegistrationsBaseUrl`) gives each version's
//! `packageContent`, `published` and, where the server writes them into the
//! `catalogEntry`, `packageHash` and `packageHashAlgorithm`; the flat
//! container's `{id}/index.json` lists `versions`. Filters take refused
//! versions out of both.

use serde_json::{Map, Value};

/// One version a registration document lists.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Leaf {
    pub version: String,
    pub published: Option<String>,
    pub content: Option<String>,
    /// `packageHash` (base64) and `packageHashAlgorithm`.
    pub hash: Option<(String, String)>,
}

fn text(object: &Map<String, Value>, key: &str) -> Option<String> {
    object.get(key)?.as_str().map(str::to_string)
}

fn leaf(object: &Map<String, Value>) -> Option<Leaf> {
    let entry = object.get("catalogEntry")?;
    let catalog = entry.as_object();
    let of_entry = |key: &str| catalog.and_then(|c| text(c, key));
    // A leaf document's `catalogEntry` is a URL; its version is the last
    // segment of its own `@id` (`…/{id}/{version}.json`).
    let version = of_entry("version").or_else(|| {
        let id = text(object, "@id")?;
        Some(id.rsplit('/').next()?.strip_suffix(".json")?.to_string())
    })?;
    let hash = of_entry("packageHash").map(|hash| {
        let algo = of_entry("packageHashAlgorithm").unwrap_or_else(|| "SHA512".into());
        (hash, algo)
    });
    Some(Leaf {
        version,
        published: of_entry("published").or_else(|| text(object, "published")),
        content: text(object, "packageContent").or_else(|| of_entry("packageContent")),
        hash,
    })
}

/// The leaves of a registration index (its inlined pages), page or leaf.
fn leaf_objects(doc: &Value) -> Vec<&Map<String, Value>> {
    let Some(object) = doc.as_object() else {
        return Vec::new();
    };
    if object.contains_key("catalogEntry") {
        return vec![object];
    }
    let items = object.get("items").and_then(Value::as_array);
    items
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .flat_map(|item| {
            if item.contains_key("catalogEntry") {
                vec![item]
            } else {
                let leaves = item.get("items").and_then(Value::as_array);
                leaves
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_object)
                    .collect()
            }
        })
        .collect()
}

/// Every version `body` (a registration document) lists.
pub fn leaves(body: &[u8]) -> Vec<Leaf> {
    let Ok(doc) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    leaf_objects(&doc).into_iter().filter_map(leaf).collect()
}

/// What filtering a document left.
pub enum Left {
    /// Nothing refused.
    All,
    /// Some refused: the document without them.
    Some(Vec<u8>),
    /// Every version refused.
    None,
}

/// The registration index or page `body` without the leaves `refused`
/// picks (each page's `count` following).
pub fn without_leaves(body: &[u8], mut refused: impl FnMut(&Leaf) -> bool) -> Left {
    let Ok(mut doc) = serde_json::from_slice::<Value>(body) else {
        return Left::All;
    };
    let (mut kept, mut gone) = (0, 0);
    let mut keep = |item: &Value| match item.as_object().and_then(leaf) {
        Some(leaf) if refused(&leaf) => {
            gone += 1;
            false
        }
        _ => {
            kept += 1;
            true
        }
    };
    let Some(items) = doc.get_mut("items").and_then(Value::as_array_mut) else {
        return Left::All;
    };
    for item in items.iter_mut() {
        if item.get("catalogEntry").is_some() {
            continue;
        }
        if let Some(page) = item.get_mut("items").and_then(Value::as_array_mut) {
            page.retain(&mut keep);
            let count = page.len();
            item["count"] = Value::from(count);
        }
    }
    items.retain(|item| item.get("catalogEntry").is_none() || keep(item));
    finish(doc, kept, gone)
}

/// The flat container's `{"versions": […]}` without the versions
/// `refused` picks.
pub fn without_versions(body: &[u8], mut refused: impl FnMut(&str) -> bool) -> Left {
    let Ok(mut doc) = serde_json::from_slice::<Value>(body) else {
        return Left::All;
    };
    let Some(versions) = doc.get_mut("versions").and_then(Value::as_array_mut) else {
        return Left::All;
    };
    let before = versions.len();
    versions.retain(|v| !v.as_str().is_some_and(&mut refused));
    let kept = versions.len();
    finish(doc, kept, before - kept)
}

fn finish(doc: Value, kept: usize, gone: usize) -> Left {
    match (kept, gone) {
        (_, 0) => Left::All,
        (0, _) => Left::None,
        _ => serde_json::to_vec(&doc).map_or(Left::All, Left::Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> Value {
        let leaf = |v: &str, published: &str| {
            serde_json::json!({
                "@id": format!("https://api.nuget.org/v3/registration5-gz-semver2/acme.hello/{v}.json"),
                "catalogEntry": {"id": "Acme.Hello", "version": v, "published": published,
                                 "packageHash": "q83vEjRWeJA=", "packageHashAlgorithm": "SHA512"},
                "packageContent": format!("https://api.nuget.org/v3-flatcontainer/acme.hello/{v}/acme.hello.{v}.nupkg")
            })
        };
        serde_json::json!({"count": 1, "items": [{"count": 2, "lower": "1.0.0", "upper": "2.0.0",
            "items": [leaf("1.0.0", "2024-01-01T00:00:00+00:00"), leaf("2.0.0", "2024-02-01T00:00:00+00:00")]}]})
    }

    #[test]
    fn an_index_gives_its_leaves_and_loses_the_refused_ones() {
        let body = index().to_string();
        let got = leaves(body.as_bytes());
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].version, "2.0.0");
        assert_eq!(got[0].hash, Some(("q83vEjRWeJA=".into(), "SHA512".into())));
        assert!(got[0]
            .content
            .as_deref()
            .unwrap()
            .ends_with("acme.hello.1.0.0.nupkg"));
        let Left::Some(out) = without_leaves(body.as_bytes(), |l| l.version == "2.0.0") else {
            panic!("not filtered");
        };
        let out: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(out["items"][0]["count"], 1);
        assert!(matches!(
            without_leaves(body.as_bytes(), |_| true),
            Left::None
        ));
        // A leaf document: its catalogEntry is a URL, its version in `@id`.
        let leaf_doc = serde_json::json!({"@id": "https://x/v3/registration5-semver1/acme.hello/1.0.0.json",
            "catalogEntry": "https://x/catalog0/data/acme.hello.1.0.0.json", "published": "2024-01-01T00:00:00Z",
            "packageContent": "https://x/acme.hello.1.0.0.nupkg"});
        let got = leaves(leaf_doc.to_string().as_bytes());
        assert_eq!(got[0].version, "1.0.0");
        assert_eq!(got[0].published.as_deref(), Some("2024-01-01T00:00:00Z"));
    }

    #[test]
    fn flat_container_versions_are_filtered() {
        let body = br#"{"versions":["1.0.0","2.0.0"]}"#;
        let Left::Some(out) = without_versions(body, |v| v == "2.0.0") else {
            panic!("not filtered");
        };
        assert_eq!(out, br#"{"versions":["1.0.0"]}"#);
        assert!(matches!(without_versions(body, |_| false), Left::All));
        assert!(matches!(without_versions(body, |_| true), Left::None));
    }
}
