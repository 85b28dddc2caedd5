//! OSV records as the OSV project exports them (one JSON file per advisory
//! in a zip), read into the parts the index keeps, and the class of an
//! advisory: `MAL-` ids, `database_specific.severity`, or the band of its
//! CVSS v3 or v4 base score computed from the vector.

use std::io::Read;

use serde::Deserialize;

use super::Class;

/// One OSV record, the fields the quarantine reads.
#[derive(Deserialize)]
pub struct Record {
    pub id: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub details: Option<String>,
    #[serde(default)]
    pub withdrawn: Option<String>,
    #[serde(default)]
    pub severity: Vec<Severity>,
    #[serde(default)]
    pub affected: Vec<Affected>,
    #[serde(default)]
    pub database_specific: Option<serde_json::Value>,
}

#[derive(Deserialize)]
pub struct Severity {
    #[serde(rename = "type")]
    pub kind: String,
    pub score: String,
}

#[derive(Deserialize)]
pub struct Affected {
    pub package: Option<Package>,
    #[serde(default)]
    pub ranges: Vec<Range>,
    #[serde(default)]
    pub versions: Vec<String>,
}

#[derive(Deserialize)]
pub struct Package {
    pub ecosystem: String,
    pub name: String,
}

#[derive(Deserialize)]
pub struct Range {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub events: Vec<Event>,
}

/// One event of a range: exactly one of its fields is set.
#[derive(Deserialize)]
pub struct Event {
    pub introduced: Option<String>,
    pub fixed: Option<String>,
    pub last_affected: Option<String>,
    pub limit: Option<String>,
}

/// Bytes of members unpacked before they are parsed, at most (one more
/// member may pass it).
const BATCH: usize = 4 << 20;

/// Hands every record of the zip `bytes` to `each`, or says why the feed
/// cannot be used (not a zip, truncated, a member that is not an OSV
/// record): one bad record refuses the whole feed, so a half-read export
/// never replaces a good one. Members are unpacked a batch at a time into
/// one buffer and then parsed, so the decoder's short-lived state is not
/// interleaved with the records' long-lived allocations (interleaved, each
/// record pinned a freed decoder's block: 13 KiB a record).
pub fn each_record(bytes: &[u8], mut each: impl FnMut(Record)) -> Result<(), String> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| format!("not a readable zip: {e}"))?;
    let mut buffer = Vec::with_capacity(BATCH + (64 << 10));
    let mut members: Vec<(String, usize, usize)> = Vec::new();
    let parse = |buffer: &mut Vec<u8>,
                 members: &mut Vec<(String, usize, usize)>,
                 each: &mut dyn FnMut(Record)| {
        for (name, start, end) in members.drain(..) {
            let record: Record = serde_json::from_slice(&buffer[start..end])
                .map_err(|e| format!("{name} is not an OSV record: {e}"))?;
            each(record);
        }
        buffer.clear();
        Ok::<(), String>(())
    };
    for i in 0..archive.len() {
        let mut file = archive
            .by_index(i)
            .map_err(|e| format!("member {i} cannot be read: {e}"))?;
        if file.is_dir() || !file.name().ends_with(".json") {
            continue;
        }
        let name = file.name().to_string();
        let start = buffer.len();
        file.read_to_end(&mut buffer)
            .map_err(|e| format!("{name} cannot be read: {e}"))?;
        members.push((name, start, buffer.len()));
        if buffer.len() >= BATCH {
            drop(file);
            parse(&mut buffer, &mut members, &mut each)?;
        }
    }
    parse(&mut buffer, &mut members, &mut each)
}

/// The class of `record`: malicious for a `MAL-` id (or alias), else the
/// severity its database states, else the band of its highest CVSS v3 or
/// v4 base score; `None` when it gives none of them.
pub fn class(record: &Record) -> Option<Class> {
    let malicious = std::iter::once(&record.id)
        .chain(&record.aliases)
        .any(|id| id.starts_with("MAL-"));
    if malicious {
        return Some(Class::Malicious);
    }
    let stated = record
        .database_specific
        .as_ref()
        .and_then(|d| d.get("severity"))
        .and_then(|s| s.as_str())
        .and_then(|s| match s.to_ascii_lowercase().as_str() {
            "critical" => Some(Class::Critical),
            "high" => Some(Class::High),
            "moderate" | "medium" => Some(Class::Medium),
            "low" => Some(Class::Low),
            _ => None,
        });
    if stated.is_some() {
        return stated;
    }
    let score = record
        .severity
        .iter()
        .filter(|s| s.kind == "CVSS_V3" || s.kind == "CVSS_V4")
        .filter_map(|s| cvss_base_score(&s.score))
        .fold(None, |best: Option<f64>, s| {
            Some(best.map_or(s, |b| b.max(s)))
        })?;
    match score {
        s if s >= 9.0 => Some(Class::Critical),
        s if s >= 7.0 => Some(Class::High),
        s if s >= 4.0 => Some(Class::Medium),
        s if s > 0.0 => Some(Class::Low),
        _ => None,
    }
}

/// The base score of a CVSS v3.0/v3.1 or v4.0 vector
/// (`CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H`), as the FIRST
/// specifications compute it (RustSec's `cvss`: v4 from the
/// specification's macro-vector table); `None` for a vector that does not
/// parse.
pub fn cvss_base_score(vector: &str) -> Option<f64> {
    if vector.starts_with("CVSS:3") {
        Some(vector.parse::<cvss::v3::Vector>().ok()?.score().value())
    } else if vector.starts_with("CVSS:4") {
        Some(vector.parse::<cvss::v4::Vector>().ok()?.score().value())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cvss_scores_match_the_specification() {
        let score = |v: &str| cvss_base_score(v).unwrap();
        assert_eq!(score("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"), 9.8);
        assert_eq!(score("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H"), 10.0);
        assert_eq!(score("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N"), 6.1);
        assert_eq!(score("CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H"), 8.8);
        assert_eq!(score("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:L/I:N/A:N"), 5.3);
        assert_eq!(score("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N"), 0.0);
        // v4.0 (FIRST's calculator): 9.3 critical, 6.9 medium.
        let v4 = "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N";
        assert_eq!(score(v4), 9.3);
        let v4 = "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:L/VI:N/VA:N/SC:N/SI:N/SA:N";
        assert_eq!(score(v4), 6.9);
        assert!(cvss_base_score("CVSS:4.0/AV:N/AC:L").is_none());
        assert!(cvss_base_score("AV:N/AC:L/Au:N/C:P/I:P/A:P").is_none());
    }

    #[test]
    fn a_record_with_only_a_cvss_v4_vector_is_classed_by_its_score() {
        let record: Record = serde_json::from_value(serde_json::json!({
            "id": "GHSA-v4v4-v4v4-v4v4",
            "severity": [{"type": "CVSS_V4",
                          "score": "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N"}]
        }))
        .unwrap();
        assert_eq!(class(&record), Some(Class::Critical));
    }
}
