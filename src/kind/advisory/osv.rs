//! OSV records as the OSV project exports them (one JSON file per advisory
//! in a zip), read into the parts the index keeps, and the class of an
//! advisory: `MAL-` ids, `database_specific.severity`, or the band of its
//! CVSS v3 base score computed from the vector.

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
/// severity its database states, else the band of its highest CVSS v3
/// base score; `None` when it gives none of them.
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
        .filter(|s| s.kind == "CVSS_V3")
        .filter_map(|s| cvss3_base_score(&s.score))
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

/// The base score of a CVSS v3.0/v3.1 vector
/// (`CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H`), as the FIRST
/// specification computes it; `None` for a vector missing a base metric.
pub fn cvss3_base_score(vector: &str) -> Option<f64> {
    let mut metrics = vector.split('/');
    if !metrics.next()?.starts_with("CVSS:3") {
        return None;
    }
    let value = |name: &str| {
        vector
            .split('/')
            .filter_map(|m| m.split_once(':'))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    };
    let changed = match value("S")? {
        "U" => false,
        "C" => true,
        _ => return None,
    };
    let av = match value("AV")? {
        "N" => 0.85,
        "A" => 0.62,
        "L" => 0.55,
        "P" => 0.2,
        _ => return None,
    };
    let ac = match value("AC")? {
        "L" => 0.77,
        "H" => 0.44,
        _ => return None,
    };
    let pr = match (value("PR")?, changed) {
        ("N", _) => 0.85,
        ("L", false) => 0.62,
        ("L", true) => 0.68,
        ("H", false) => 0.27,
        ("H", true) => 0.5,
        _ => return None,
    };
    let ui = match value("UI")? {
        "N" => 0.85,
        "R" => 0.62,
        _ => return None,
    };
    let cia = |name: &str| match value(name)? {
        "H" => Some(0.56),
        "L" => Some(0.22),
        "N" => Some(0.0),
        _ => None,
    };
    let iss = 1.0 - (1.0 - cia("C")?) * (1.0 - cia("I")?) * (1.0 - cia("A")?);
    let impact = if changed {
        7.52 * (iss - 0.029) - 3.25 * (iss - 0.02f64).powi(15)
    } else {
        6.42 * iss
    };
    if impact <= 0.0 {
        return Some(0.0);
    }
    let exploitability = 8.22 * av * ac * pr * ui;
    let sum = if changed {
        1.08 * (impact + exploitability)
    } else {
        impact + exploitability
    };
    Some(round_up(sum.min(10.0)))
}

/// CVSS 3.1's `Roundup`: the smallest number of one decimal not below `x`.
fn round_up(x: f64) -> f64 {
    let scaled = (x * 100_000.0).round() as i64;
    if scaled % 10_000 == 0 {
        scaled as f64 / 100_000.0
    } else {
        ((scaled / 10_000) + 1) as f64 / 10.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cvss3_scores_match_the_specification() {
        let score = |v: &str| cvss3_base_score(v).unwrap();
        assert_eq!(score("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"), 9.8);
        assert_eq!(score("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H"), 10.0);
        assert_eq!(score("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N"), 6.1);
        assert_eq!(score("CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H"), 8.8);
        assert_eq!(score("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:L/I:N/A:N"), 5.3);
        assert_eq!(score("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N"), 0.0);
        assert!(cvss3_base_score("CVSS:4.0/AV:N/AC:L").is_none());
    }
}
