//! Maven and Gradle files read by `warm`: a `pom.xml`'s dependencies
//! (`${…}` properties resolved from its `<properties>` and the project's own
//! coordinates) and a `gradle.lockfile`'s resolved `group:artifact:version`
//! lines, each into the `.pom` and the file itself (`.jar` unless the
//! dependency names another `<type>`, with its `<classifier>`). The proxy
//! checks each against its sidecars, so no digest is given here.

use std::collections::HashMap;

use quick_xml::events::Event;

use super::artifact::{Artifact, Check, Failure, Location};

/// One dependency as the file names it.
#[derive(Default)]
struct Coordinates {
    group: String,
    artifact: String,
    version: String,
    kind: String,
    classifier: String,
    scope: String,
}

/// `group:artifact:version` as the `.pom` and its file (and `extension`).
fn artifacts_of(c: &Coordinates, out: &mut Vec<Artifact>) {
    let dir = format!("{}/{}/{}", c.group.replace('.', "/"), c.artifact, c.version);
    let stem = format!("{}-{}", c.artifact, c.version);
    let name = format!("{}:{}:{}", c.group, c.artifact, c.version);
    let unchecked = |name: String, path: String| Artifact {
        name,
        location: Location::Path(path),
        check: Check::Unchecked,
    };
    out.push(unchecked(
        format!("{name} pom"),
        format!("{dir}/{stem}.pom"),
    ));
    let kind = if c.kind.is_empty() {
        "jar"
    } else {
        c.kind.as_str()
    };
    if kind != "pom" && c.scope != "import" {
        let classifier = if c.classifier.is_empty() {
            String::new()
        } else {
            format!("-{}", c.classifier)
        };
        let path = format!("{dir}/{stem}{classifier}.{kind}");
        out.push(unchecked(format!("{name} {kind}"), path));
    }
}

/// `pom.xml`: `project/dependencies/dependency` entries with a version
/// (`${name}` taken from `<properties>`, `project.version`,
/// `project.groupId`, or the parent's when the project has none).
pub fn pom_xml(text: &str) -> Result<Vec<Artifact>, Failure> {
    let mut reader = quick_xml::Reader::from_str(text);
    let mut path: Vec<String> = Vec::new();
    let mut properties: HashMap<String, String> = HashMap::new();
    let mut dependencies: Vec<(usize, Coordinates)> = Vec::new();
    let mut current: Option<(usize, Coordinates)> = None;
    loop {
        let at = reader.buffer_position() as usize;
        let event = reader
            .read_event()
            .map_err(|e| (super::artifact::line_at(text, at), format!("not XML: {e}")))?;
        match event {
            Event::Start(e) => {
                path.push(String::from_utf8_lossy(e.name().as_ref()).into_owned());
                if path == ["project", "dependencies", "dependency"] {
                    current = Some((super::artifact::line_at(text, at), Coordinates::default()));
                }
            }
            Event::End(_) => {
                if path == ["project", "dependencies", "dependency"] {
                    dependencies.extend(current.take());
                }
                path.pop();
            }
            Event::Text(t) => {
                let value = String::from_utf8_lossy(&t).trim().to_string();
                let names: Vec<&str> = path.iter().map(String::as_str).collect();
                match names.as_slice() {
                    ["project", "properties", name] => {
                        properties.insert(name.to_string(), value);
                    }
                    ["project", field @ ("version" | "groupId")] => {
                        properties.insert(format!("project.{field}"), value);
                    }
                    ["project", "parent", field @ ("version" | "groupId")] => {
                        properties
                            .entry(format!("project.{field}"))
                            .or_insert(value);
                    }
                    ["project", "dependencies", "dependency", field] => {
                        if let Some((_, c)) = &mut current {
                            let slot = match *field {
                                "groupId" => &mut c.group,
                                "artifactId" => &mut c.artifact,
                                "version" => &mut c.version,
                                "type" => &mut c.kind,
                                "classifier" => &mut c.classifier,
                                "scope" => &mut c.scope,
                                _ => continue,
                            };
                            *slot = value;
                        }
                    }
                    _ => {}
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    let resolve = |text: &str, line: usize| -> Result<String, Failure> {
        let mut out = text.to_string();
        while let Some(start) = out.find("${") {
            let end = out[start..]
                .find('}')
                .ok_or((line, format!("unclosed property in {text:?}")))?;
            let name = &out[start + 2..start + end];
            let value = properties
                .get(name)
                .ok_or((line, format!("property {name:?} is not defined")))?;
            out.replace_range(start..start + end + 1, value);
        }
        Ok(out)
    };
    let mut artifacts = Vec::new();
    for (line, mut c) in dependencies {
        if c.version.is_empty() || c.scope == "system" {
            // Managed by a parent or a BOM (not resolved here), or not in a repository.
            continue;
        }
        c.group = resolve(&c.group, line)?;
        c.artifact = resolve(&c.artifact, line)?;
        c.version = resolve(&c.version, line)?;
        if c.version.starts_with(['[', '(']) {
            return Err((line, format!("{} is a version range: pin it", c.version)));
        }
        artifacts_of(&c, &mut artifacts);
    }
    Ok(artifacts)
}

/// `gradle.lockfile`: `group:artifact:version=configurations` lines;
/// comments and the `empty=` line are skipped.
pub fn gradle_lockfile(text: &str) -> Result<Vec<Artifact>, Failure> {
    let mut artifacts = Vec::new();
    for (idx, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with("empty=") {
            continue;
        }
        let coordinates = line.split('=').next().unwrap_or(line);
        let parts: Vec<&str> = coordinates.split(':').collect();
        let [group, artifact, version] = parts.as_slice() else {
            return Err((
                idx + 1,
                "expected `group:artifact:version=configurations`".into(),
            ));
        };
        let c = Coordinates {
            group: group.to_string(),
            artifact: artifact.to_string(),
            version: version.to_string(),
            ..Coordinates::default()
        };
        artifacts_of(&c, &mut artifacts);
    }
    Ok(artifacts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(artifacts: &[Artifact]) -> Vec<String> {
        artifacts
            .iter()
            .map(|a| match &a.location {
                Location::Path(p) => p.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn pom_dependencies_with_properties_classifiers_and_types() {
        let pom = r#"<project>
  <groupId>org.example</groupId><artifactId>app</artifactId><version>2.0</version>
  <properties><lang3.version>3.12.0</lang3.version></properties>
  <dependencies>
    <dependency><groupId>org.apache.commons</groupId><artifactId>commons-lang3</artifactId><version>${lang3.version}</version></dependency>
    <dependency><groupId>org.example</groupId><artifactId>core</artifactId><version>${project.version}</version><classifier>tests</classifier></dependency>
    <dependency><groupId>org.example</groupId><artifactId>bom</artifactId><version>1</version><type>pom</type></dependency>
    <dependency><groupId>org.example</groupId><artifactId>managed</artifactId></dependency>
  </dependencies>
  <dependencyManagement><dependencies><dependency><groupId>x</groupId><artifactId>y</artifactId><version>1</version></dependency></dependencies></dependencyManagement>
</project>"#;
        assert_eq!(
            paths(&pom_xml(pom).unwrap()),
            [
                "org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.pom",
                "org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.jar",
                "org/example/core/2.0/core-2.0.pom",
                "org/example/core/2.0/core-2.0-tests.jar",
                "org/example/bom/1/bom-1.pom",
            ]
        );
        let bad = "<project>\n<dependencies>\n<dependency><groupId>a</groupId><artifactId>b</artifactId><version>${nope}</version></dependency></dependencies></project>";
        let (line, message) = pom_xml(bad).unwrap_err();
        assert_eq!(line, 3);
        assert!(message.contains("\"nope\""), "{message}");
    }

    #[test]
    fn gradle_lockfile_lines() {
        let lock = "# This is a Gradle generated file\ncom.google.guava:guava:32.1.2-jre=compileClasspath,runtimeClasspath\nempty=annotationProcessor\n";
        assert_eq!(
            paths(&gradle_lockfile(lock).unwrap()),
            [
                "com/google/guava/guava/32.1.2-jre/guava-32.1.2-jre.pom",
                "com/google/guava/guava/32.1.2-jre/guava-32.1.2-jre.jar",
            ]
        );
        assert_eq!(gradle_lockfile("a:b\n").unwrap_err().0, 1);
    }
}
