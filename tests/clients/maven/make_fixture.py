#!/usr/bin/env python3
"""Build a Maven-Central-looking fixture repository from Debian's /usr/share/maven-repo.

Usage:
  make_fixture.py OUTDIR                 # only the artifacts in MANIFEST (what the project needs)
  make_fixture.py --all OUTDIR           # every artifact Debian ships (used to probe what mvn asks for)
  make_fixture.py --manifest-from-log SERVE_LOG   # print a MANIFEST from a serve.py log (200 responses)
Options:
  --src DIR     Debian repo (default /usr/share/maven-repo)
  -v            also list the test/managed-only <dependency> elements dropped from POMs
Needs: apt-get install -y libmaven-resources-plugin-java libmaven-compiler-plugin-java libsurefire-java
       libmaven-jar-plugin-java libmaven-install-plugin-java libmaven-clean-plugin-java
       (libcommons-lang3-java and junit4 come with maven / those packages)

What it does (stdlib only):
  * Debian's repo has "placeholder" version dirs (``debian``, ``3.x``, ``2.x`` ...) whose files are
    symlinks into /usr/share/java, and its POMs (even those in real-version dirs) refer to parents and
    dependencies by placeholder version (maven-repo-helper rewrote them).  Each placeholder is resolved
    to the real version Debian ships for that groupId:artifactId (taken from the placeholder POM's
    ``debian.originalVersion`` property, else the real version dir holding the same jar, else the only /
    highest non-relocation real version, else the ``debian.G.A.originalVersion`` that consumers record).
  * POMs are rewritten: every <parent>/<dependency>/<plugin>/<extension> (and the project's own
    <version>) with a placeholder version gets the real version; Debian's ``debian.*`` properties are
    dropped.  Jars are copied (symlinks dereferenced).  Placeholder dirs are not emitted.
  * Every file gets ``.sha1`` and ``.md5`` sidecars (bare lowercase hex, as Central writes them).
  * Every artifact dir gets a ``maven-metadata.xml`` (+ sidecars); ``org/apache/maven/plugins`` (and any
    other group holding plugins) gets a group-level ``maven-metadata.xml`` with <plugins> prefixes.
  * File mtimes are copied from the source files so Last-Modified is stable.
"""
import hashlib
import os
import re
import sys
import time
import zipfile

SRC = "/usr/share/maven-repo"
PLACEHOLDER = re.compile(r"^(debian|\d+(\.\d+)*\.x)$")
COORD_ELEMS = {"dependency", "parent", "plugin", "extension", "relocation"}

# path list (relative to repo root, artifact files only; no sidecars/metadata) of what a cold
# `mvn -B package` of project/ fetched. Regenerate with --manifest-from-log.
MANIFEST = """
org/apache/maven/plugins/maven-resources-plugin/3.3.0/maven-resources-plugin-3.3.0.pom
org/apache/maven/plugins/maven-plugins/35/maven-plugins-35.pom
org/apache/maven/maven-parent/35/maven-parent-35.pom
org/apache/apache/29/apache-29.pom
org/apache/maven/plugins/maven-resources-plugin/3.3.0/maven-resources-plugin-3.3.0.jar
org/apache/maven/plugins/maven-compiler-plugin/3.10.1/maven-compiler-plugin-3.10.1.pom
org/apache/maven/plugins/maven-compiler-plugin/3.10.1/maven-compiler-plugin-3.10.1.jar
org/apache/maven/plugins/maven-surefire-plugin/2.22.3/maven-surefire-plugin-2.22.3.pom
org/apache/maven/surefire/surefire/2.22.3/surefire-2.22.3.pom
org/apache/maven/plugins/maven-surefire-plugin/2.22.3/maven-surefire-plugin-2.22.3.jar
org/apache/maven/plugins/maven-jar-plugin/3.3.0/maven-jar-plugin-3.3.0.pom
org/apache/maven/plugins/maven-jar-plugin/3.3.0/maven-jar-plugin-3.3.0.jar
org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.pom
org/apache/commons/commons-parent/56/commons-parent-56.pom
junit/junit/4.13.2/junit-4.13.2.pom
org/hamcrest/hamcrest/2.2/hamcrest-2.2.pom
junit/junit/4.13.2/junit-4.13.2.jar
org/apache/commons/commons-lang3/3.12.0/commons-lang3-3.12.0.jar
org/hamcrest/hamcrest/2.2/hamcrest-2.2.jar
org/codehaus/plexus/plexus-interpolation/1.26/plexus-interpolation-1.26.pom
org/apache/maven/shared/maven-filtering/3.3.0/maven-filtering-3.3.0.pom
org/apache/maven/shared/maven-shared-components/35/maven-shared-components-35.pom
javax/inject/javax.inject/1/javax.inject-1.pom
org/slf4j/slf4j-api/1.7.32/slf4j-api-1.7.32.pom
org/slf4j/slf4j-parent/1.7.32/slf4j-parent-1.7.32.pom
org/sonatype/plexus/plexus-build-api/0.0.7/plexus-build-api-0.0.7.pom
org/codehaus/plexus/plexus-utils/3.4.2/plexus-utils-3.4.2.pom
commons-io/commons-io/2.11.0/commons-io-2.11.0.pom
org/codehaus/plexus/plexus-interpolation/1.26/plexus-interpolation-1.26.jar
javax/inject/javax.inject/1/javax.inject-1.jar
org/apache/maven/shared/maven-filtering/3.3.0/maven-filtering-3.3.0.jar
org/slf4j/slf4j-api/1.7.32/slf4j-api-1.7.32.jar
org/sonatype/plexus/plexus-build-api/0.0.7/plexus-build-api-0.0.7.jar
org/codehaus/plexus/plexus-utils/3.4.2/plexus-utils-3.4.2.jar
commons-io/commons-io/2.11.0/commons-io-2.11.0.jar
org/apache/maven/shared/maven-shared-utils/3.3.4/maven-shared-utils-3.3.4.pom
org/apache/maven/shared/maven-shared-incremental/1.1/maven-shared-incremental-1.1.pom
org/codehaus/plexus/plexus-component-annotations/1.5.5/plexus-component-annotations-1.5.5.pom
org/codehaus/plexus/plexus-component-annotations/2.1.1/plexus-component-annotations-2.1.1.pom
org/codehaus/plexus/plexus-java/1.1.1/plexus-java-1.1.1.pom
org/codehaus/plexus/plexus-languages/1.1.1/plexus-languages-1.1.1.pom
org/ow2/asm/asm/9.4/asm-9.4.pom
com/thoughtworks/qdox/qdox/2.0.3/qdox-2.0.3.pom
org/codehaus/plexus/plexus-compiler-api/2.12.1/plexus-compiler-api-2.12.1.pom
org/codehaus/plexus/plexus-compiler/2.12.1/plexus-compiler-2.12.1.pom
org/junit/junit-bom/5.9.2/junit-bom-5.9.2.pom
org/junit/junit-parent/5.9.2/junit-parent-5.9.2.pom
org/codehaus/plexus/plexus-compiler-manager/2.12.1/plexus-compiler-manager-2.12.1.pom
org/codehaus/plexus/plexus-compiler-javac/2.12.1/plexus-compiler-javac-2.12.1.pom
org/codehaus/plexus/plexus-compilers/2.12.1/plexus-compilers-2.12.1.pom
org/apache/maven/shared/maven-shared-utils/3.3.4/maven-shared-utils-3.3.4.jar
org/codehaus/plexus/plexus-component-annotations/2.1.1/plexus-component-annotations-2.1.1.jar
org/codehaus/plexus/plexus-java/1.1.1/plexus-java-1.1.1.jar
org/apache/maven/shared/maven-shared-incremental/1.1/maven-shared-incremental-1.1.jar
org/ow2/asm/asm/9.4/asm-9.4.jar
com/thoughtworks/qdox/qdox/2.0.3/qdox-2.0.3.jar
org/codehaus/plexus/plexus-compiler-api/2.12.1/plexus-compiler-api-2.12.1.jar
org/codehaus/plexus/plexus-compiler-manager/2.12.1/plexus-compiler-manager-2.12.1.jar
org/codehaus/plexus/plexus-compiler-javac/2.12.1/plexus-compiler-javac-2.12.1.jar
org/apache/maven/surefire/maven-surefire-common/2.22.3/maven-surefire-common-2.22.3.pom
org/apache/maven/maven-plugin-api/3.8.7/maven-plugin-api-3.8.7.pom
org/apache/maven/maven/3.8.7/maven-3.8.7.pom
org/apache/maven/maven-model/3.8.7/maven-model-3.8.7.pom
org/apache/maven/maven-artifact/3.8.7/maven-artifact-3.8.7.pom
org/eclipse/sisu/org.eclipse.sisu.plexus/0.3.4/org.eclipse.sisu.plexus-0.3.4.pom
org/eclipse/sisu/sisu-plexus/0.3.4/sisu-plexus-0.3.4.pom
org/eclipse/sisu/org.eclipse.sisu.inject/0.3.4/org.eclipse.sisu.inject-0.3.4.pom
org/eclipse/sisu/sisu-inject/0.3.4/sisu-inject-0.3.4.pom
org/codehaus/plexus/plexus-classworlds/2.7.0/plexus-classworlds-2.7.0.pom
org/apache/maven/plugin-tools/maven-plugin-annotations/3.7.1/maven-plugin-annotations-3.7.1.pom
org/apache/maven/plugin-tools/maven-plugin-tools/3.7.1/maven-plugin-tools-3.7.1.pom
org/apache/maven/surefire/surefire-api/2.22.3/surefire-api-2.22.3.pom
org/apache/maven/surefire/surefire-logger-api/2.22.3/surefire-logger-api-2.22.3.pom
org/apache/maven/surefire/surefire-booter/2.22.3/surefire-booter-2.22.3.pom
org/apache/maven/maven-compat/3.8.7/maven-compat-3.8.7.pom
org/apache/maven/maven-model-builder/3.8.7/maven-model-builder-3.8.7.pom
org/apache/maven/maven-builder-support/3.8.7/maven-builder-support-3.8.7.pom
javax/enterprise/cdi-api/1.2/cdi-api-1.2.pom
org/apache/geronimo/specs/geronimo-interceptor_3.0_spec/1.0.1/geronimo-interceptor_3.0_spec-1.0.1.pom
org/apache/maven/maven-settings/3.8.7/maven-settings-3.8.7.pom
org/apache/maven/maven-settings-builder/3.8.7/maven-settings-builder-3.8.7.pom
org/codehaus/plexus/plexus-sec-dispatcher/2.0/plexus-sec-dispatcher-2.0.pom
org/codehaus/plexus/plexus-cipher/2.0/plexus-cipher-2.0.pom
org/apache/maven/maven-core/3.8.7/maven-core-3.8.7.pom
org/apache/maven/maven-repository-metadata/3.8.7/maven-repository-metadata-3.8.7.pom
org/apache/maven/maven-resolver-provider/3.8.7/maven-resolver-provider-3.8.7.pom
org/apache/maven/resolver/maven-resolver-api/1.6.3/maven-resolver-api-1.6.3.pom
org/apache/maven/resolver/maven-resolver/1.6.3/maven-resolver-1.6.3.pom
org/apache/maven/resolver/maven-resolver-spi/1.6.3/maven-resolver-spi-1.6.3.pom
org/apache/maven/resolver/maven-resolver-util/1.6.3/maven-resolver-util-1.6.3.pom
org/apache/maven/resolver/maven-resolver-impl/1.6.3/maven-resolver-impl-1.6.3.pom
com/google/inject/guice/4.2.3/guice-4.2.3.pom
com/google/inject/guice-parent/4.2.3/guice-parent-4.2.3.pom
aopalliance/aopalliance/1.0/aopalliance-1.0.pom
com/google/guava/guava/31.1-jre/guava-31.1-jre.pom
com/google/guava/guava-parent/31.1-jre/guava-parent-31.1-jre.pom
org/jsr-305/jsr305/0.1/jsr305-0.1.pom
com/google/errorprone/error_prone_annotations/2.18.0/error_prone_annotations-2.18.0.pom
com/google/errorprone/error_prone_parent/2.18.0/error_prone_parent-2.18.0.pom
org/apache/maven/wagon/wagon-provider-api/3.5.3/wagon-provider-api-3.5.3.pom
org/apache/maven/wagon/wagon/3.5.3/wagon-3.5.3.pom
org/apache/maven/shared/maven-common-artifact-filters/3.3.2/maven-common-artifact-filters-3.3.2.pom
org/eclipse/sisu/org.eclipse.sisu.plexus/0.3.4/org.eclipse.sisu.plexus-0.3.4.jar
org/apache/maven/surefire/maven-surefire-common/2.22.3/maven-surefire-common-2.22.3.jar
org/apache/maven/maven-plugin-api/3.8.7/maven-plugin-api-3.8.7.jar
org/codehaus/plexus/plexus-classworlds/2.7.0/plexus-classworlds-2.7.0.jar
org/apache/maven/plugin-tools/maven-plugin-annotations/3.7.1/maven-plugin-annotations-3.7.1.jar
org/apache/maven/surefire/surefire-booter/2.22.3/surefire-booter-2.22.3.jar
org/apache/maven/maven-artifact/3.8.7/maven-artifact-3.8.7.jar
org/apache/maven/maven-compat/3.8.7/maven-compat-3.8.7.jar
org/apache/maven/surefire/surefire-api/2.22.3/surefire-api-2.22.3.jar
org/apache/maven/surefire/surefire-logger-api/2.22.3/surefire-logger-api-2.22.3.jar
org/apache/maven/maven-model-builder/3.8.7/maven-model-builder-3.8.7.jar
org/apache/maven/maven-settings-builder/3.8.7/maven-settings-builder-3.8.7.jar
org/apache/maven/maven-settings/3.8.7/maven-settings-3.8.7.jar
org/codehaus/plexus/plexus-sec-dispatcher/2.0/plexus-sec-dispatcher-2.0.jar
org/codehaus/plexus/plexus-cipher/2.0/plexus-cipher-2.0.jar
org/apache/maven/maven-resolver-provider/3.8.7/maven-resolver-provider-3.8.7.jar
org/apache/maven/maven-repository-metadata/3.8.7/maven-repository-metadata-3.8.7.jar
org/apache/maven/resolver/maven-resolver-api/1.6.3/maven-resolver-api-1.6.3.jar
org/apache/maven/resolver/maven-resolver-util/1.6.3/maven-resolver-util-1.6.3.jar
org/apache/maven/resolver/maven-resolver-impl/1.6.3/maven-resolver-impl-1.6.3.jar
org/apache/maven/wagon/wagon-provider-api/3.5.3/wagon-provider-api-3.5.3.jar
org/apache/maven/maven-model/3.8.7/maven-model-3.8.7.jar
org/apache/maven/maven-core/3.8.7/maven-core-3.8.7.jar
org/apache/maven/maven-builder-support/3.8.7/maven-builder-support-3.8.7.jar
org/apache/maven/resolver/maven-resolver-spi/1.6.3/maven-resolver-spi-1.6.3.jar
org/eclipse/sisu/org.eclipse.sisu.inject/0.3.4/org.eclipse.sisu.inject-0.3.4.jar
javax/enterprise/cdi-api/1.2/cdi-api-1.2.jar
org/apache/geronimo/specs/geronimo-interceptor_3.0_spec/1.0.1/geronimo-interceptor_3.0_spec-1.0.1.jar
com/google/inject/guice/4.2.3/guice-4.2.3-no_aop.jar
aopalliance/aopalliance/1.0/aopalliance-1.0.jar
com/google/guava/guava/31.1-jre/guava-31.1-jre.jar
org/jsr-305/jsr305/0.1/jsr305-0.1.jar
com/google/errorprone/error_prone_annotations/2.18.0/error_prone_annotations-2.18.0.jar
org/apache/maven/shared/maven-common-artifact-filters/3.3.2/maven-common-artifact-filters-3.3.2.jar
org/apache/maven/surefire/surefire-junit4/2.22.3/surefire-junit4-2.22.3.pom
org/apache/maven/surefire/surefire-providers/2.22.3/surefire-providers-2.22.3.pom
org/apache/maven/surefire/common-junit4/2.22.3/common-junit4-2.22.3.pom
org/apache/maven/surefire/common-junit3/2.22.3/common-junit3-2.22.3.pom
org/apache/maven/surefire/common-java5/2.22.3/common-java5-2.22.3.pom
org/apache/maven/surefire/surefire-junit4/2.22.3/surefire-junit4-2.22.3.jar
org/apache/maven/surefire/common-junit4/2.22.3/common-junit4-2.22.3.jar
org/apache/maven/surefire/common-junit3/2.22.3/common-junit3-2.22.3.jar
org/apache/maven/surefire/common-java5/2.22.3/common-java5-2.22.3.jar
org/apache/maven/shared/file-management/3.0.0/file-management-3.0.0.pom
org/apache/maven/shared/maven-shared-io/3.0.0/maven-shared-io-3.0.0.pom
org/apache/maven/maven-archiver/3.6.0/maven-archiver-3.6.0.pom
org/codehaus/plexus/plexus-io/3.3.1/plexus-io-3.3.1.pom
org/codehaus/plexus/plexus-archiver/4.6.1/plexus-archiver-4.6.1.pom
org/apache/commons/commons-compress/1.22/commons-compress-1.22.pom
org/xerial/snappy/snappy-java/1.1.8.3/snappy-java-1.1.8.3.pom
org/tukaani/xz/1.9/xz-1.9.pom
org/apache/maven/shared/maven-shared-io/3.0.0/maven-shared-io-3.0.0.jar
org/apache/maven/shared/file-management/3.0.0/file-management-3.0.0.jar
org/apache/maven/maven-archiver/3.6.0/maven-archiver-3.6.0.jar
org/codehaus/plexus/plexus-io/3.3.1/plexus-io-3.3.1.jar
org/codehaus/plexus/plexus-archiver/4.6.1/plexus-archiver-4.6.1.jar
org/xerial/snappy/snappy-java/1.1.8.3/snappy-java-1.1.8.3.jar
org/apache/commons/commons-compress/1.22/commons-compress-1.22.jar
org/tukaani/xz/1.9/xz-1.9.jar
""".split()


def vkey(v):
    parts = re.split(r"[.\-]", v)
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts]


class Repo:
    def __init__(self, src):
        self.src = src
        # (g, a) -> {version: dirpath}
        self.arts = {}
        for root, dirs, files in os.walk(src):
            poms = [f for f in files if f.endswith(".pom")]
            if not poms:
                continue
            rel = os.path.relpath(root, src).split(os.sep)
            if len(rel) < 3:
                continue
            v, a, g = rel[-1], rel[-2], ".".join(rel[:-2])
            if not any(f.startswith(a + "-" + v) for f in files):
                continue
            self.arts.setdefault((g, a), {})[v] = root
        self.orig = {}  # (g,a) -> {origversion: count} recorded by consumers
        prop = re.compile(r"<debian\.([^>]+)\.originalVersion>([^<]+)</debian\.")
        for (g, a), vs in self.arts.items():
            for v, d in vs.items():
                txt = self.read_pom(g, a, v)
                for m in prop.finditer(txt):
                    key = m.group(1)
                    self.orig.setdefault(key, {}).setdefault(m.group(2), 0)
                    self.orig[key][m.group(2)] += 1
        # Central serves no -SNAPSHOT versions (and mvn would not take them from a release repo):
        # Debian's "0.1-SNAPSHOT"-style real versions are published as "0.1"
        self.rename = {}
        for (g, a), vs in self.arts.items():
            for v in vs:
                if v.endswith("-SNAPSHOT") and v[:-9] not in vs:
                    self.rename[(g, a, v)] = v[:-9]
        self.vmap = {}
        for (g, a) in self.arts:
            for v in self.arts[(g, a)]:
                if PLACEHOLDER.match(v):
                    self.vmap[(g, a, v)] = self._resolve(g, a, v)

    def pom_path(self, g, a, v):
        return os.path.join(self.arts[(g, a)][v], "%s-%s.pom" % (a, v))

    def read_pom(self, g, a, v):
        try:
            with open(self.pom_path(g, a, v), encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def is_relocation(self, g, a, v):
        return "<relocation>" in self.read_pom(g, a, v)

    def _resolve(self, g, a, p):
        vs = self.arts[(g, a)]
        real = [v for v in vs if not PLACEHOLDER.match(v)]
        m = re.search(r"<debian\.originalVersion>([^<]+)<", self.read_pom(g, a, p))
        if m and m.group(1) in real:
            return m.group(1)
        jar = os.path.join(vs[p], "%s-%s.jar" % (a, p))
        if os.path.exists(jar):
            target = os.path.realpath(jar)
            for v in real:
                j = os.path.join(vs[v], "%s-%s.jar" % (a, v))
                if os.path.exists(j) and os.path.realpath(j) == target:
                    return v
        nonreloc = [v for v in real if not self.is_relocation(g, a, v)]
        if nonreloc:
            return sorted(nonreloc, key=vkey)[-1]
        if m:
            return m.group(1)  # no real dir: synthesize from the placeholder
        o = self.orig.get("%s.%s" % (g, a))
        if o:
            return sorted(o, key=lambda k: (o[k], vkey(k)))[-1]
        return None

    def known(self, g, a):
        """Does Debian ship it, or record an upstream version for it somewhere?"""
        return (g, a) in self.arts or "%s.%s" % (g, a) in self.orig

    def real_version(self, g, a, v):
        if (g, a) in self.arts and PLACEHOLDER.match(v or ""):
            v = self.vmap.get((g, a, v))
        return self.rename.get((g, a, v), v)

    def source_dirs(self, g, a, v):
        """[(dir, version-in-filenames)] holding files for real version v: the real dir first,
        then placeholder dirs that resolve to v."""
        vs = self.arts.get((g, a), {})
        res = [(vs[v], v)] if v in vs else []
        for (g2, a2, sv), nv in self.rename.items():
            if (g2, a2) == (g, a) and nv == v:
                res.append((vs[sv], sv))
        for p, rv in sorted(self.vmap.items()):
            if p[:2] == (g, a) and self.rename.get((g, a, rv), rv) == v:
                res.append((vs[p[2]], p[2]))
        return res

    def source_dir(self, g, a, v):
        r = self.source_dirs(g, a, v)
        return r[0] if r else (None, None)


TAG = re.compile(r"<!--.*?-->|<\?.*?\?>|<!\[CDATA\[.*?\]\]>|<(/?)([A-Za-z_][\w.\-:]*)((?:\s[^>]*?)?)(/?)>", re.S)


def rewrite_pom(repo, text, warn):
    """Replace placeholder versions in coordinates. Returns new text."""
    local_orig = dict((m.group(1), m.group(2)) for m in re.finditer(
        r"<debian\.([^>]+)\.originalVersion>([^<]+)</debian\.", text))
    stack = []  # frames: [name, children{name: (val, start, end)}, content_start]
    repl = []
    drops = []
    own = {}
    for m in TAG.finditer(text):
        if m.group(2) is None:
            continue
        closing, name, selfclose = m.group(1) == "/", m.group(2), m.group(4) == "/"
        if not closing:
            if selfclose:
                continue
            stack.append([name, {}, m.end(), m.start()])
            continue
        if not stack or stack[-1][0] != name:
            continue  # malformed, ignore
        frame = stack.pop()
        val = (text[frame[2]:m.start()].strip(), frame[2], m.start())
        parent = stack[-1] if stack else None
        if parent is not None and name in ("groupId", "artifactId", "version"):
            parent[1][name] = val
        if name in COORD_ELEMS or (name == "project" and not stack):
            ch = frame[1]
            if name == "project":
                g = ch.get("groupId", (None,))[0] or own.get("parent_g")
                a = ch.get("artifactId", (None,))[0]
                own.update(g=g, a=a)
            else:
                g = ch.get("groupId", (None,))[0]
                a = ch.get("artifactId", (None,))[0]
                if g is None and name == "plugin":
                    g = "org.apache.maven.plugins"
            if name == "parent" and len(stack) == 1:
                own["parent_g"] = g
            if g in ("${project.groupId}", "${groupId}", "${pom.groupId}"):
                g = own.get("g") or own.get("parent_g")
            if (name == "dependency" and g and a and "version" not in ch
                    and not repo.known(g, a)):
                # versionless reference to an artifact whose managed entry gets dropped below
                warn("dropped %s %s:%s (managed)" % (name, g, a))
                ls = text.rfind("\n", 0, frame[3]) + 1
                start = ls if not text[ls:frame[3]].strip() else frame[3]
                drops.append((start, m.end() + (1 if text[m.end():m.end() + 1] == "\n" else 0)))
            if "version" in ch and g and a:
                v, s, e = ch["version"]
                if (g, a, v) in repo.rename:
                    repl.append((s, e, repo.rename[(g, a, v)]))
                elif PLACEHOLDER.match(v):
                    rv = repo.real_version(g, a, v) if (g, a) in repo.arts else None
                    if not rv:
                        # not shipped by Debian (test/optional/managed-only dependency): use the
                        # upstream version maven-repo-helper recorded, in this POM or elsewhere
                        rv = local_orig.get("%s.%s" % (g, a))
                        o = repo.orig.get("%s.%s" % (g, a))
                        if not rv and o:
                            rv = sorted(o, key=lambda k: (o[k], vkey(k)))[-1]
                    if rv:
                        repl.append((s, e, rv))
                    elif name in ("dependency", "plugin", "extension"):
                        # neither shipped by Debian nor with a recorded upstream version: only
                        # test/optional/managed entries are like that; drop the element
                        warn("dropped %s %s:%s:%s" % (name, g, a, v))
                        ls = text.rfind("\n", 0, frame[3]) + 1
                        start = ls if not text[ls:frame[3]].strip() else frame[3]
                        drops.append((start, m.end() + (1 if text[m.end():m.end() + 1] == "\n" else 0)))
                    else:
                        warn("unresolved %s:%s:%s" % (g, a, v))
    edits = [(s, e, "") for s, e in drops]
    edits += [(s, e, rv) for s, e, rv in repl if not any(ds <= s and e <= de for ds, de in drops)]
    out = text
    last = None
    for s, e, rv in sorted(edits, reverse=True):
        if last is not None and e > last:
            continue  # nested inside an already-applied drop
        out = out[:s] + rv + out[e:]
        last = s
    out = re.sub(r"[ \t]*<debian\.[\w.\-]+\s*/>[ \t]*\r?\n?", "", out)
    out = re.sub(r"[ \t]*<(debian\.[\w.\-]+)>[^<]*</\1>[ \t]*\r?\n?", "", out)
    return out


def write(path, data, mtime):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.utime(path, (mtime, mtime))
    for alg in ("sha1", "md5"):
        side = path + "." + alg
        with open(side, "w") as f:
            f.write(hashlib.new(alg, data).hexdigest())
        os.utime(side, (mtime, mtime))


def emit_artifact(repo, out, g, a, v, files, warn):
    """files: list of filenames wanted (e.g. a-v.pom, a-v.jar)."""
    dirs = repo.source_dirs(g, a, v)
    if not dirs:
        warn("missing %s:%s:%s" % (g, a, v))
        return []
    dest = os.path.join(out, *g.split("."), a, v)
    written = []
    for n in files:
        sp = None
        for d, sv in dirs:
            cand = os.path.join(d, n.replace("%s-%s" % (a, v), "%s-%s" % (a, sv), 1))
            if os.path.exists(cand):
                sp = cand
                break
        if sp is None:
            warn("missing file %s:%s:%s %s" % (g, a, v, n))
            continue
        mtime = int(os.stat(sp).st_mtime)
        with open(sp, "rb") as f:
            data = f.read()
        if n.endswith(".pom"):
            data = rewrite_pom(repo, data.decode("utf-8", "replace"), warn).encode("utf-8")
        write(os.path.join(dest, n), data, mtime)
        written.append(n)
    return written


def fmt_ts(t):
    return time.strftime("%Y%m%d%H%M%S", time.gmtime(t))


def emit_metadata(out):
    plugins_by_group = {}
    for root, dirs, files in os.walk(out):
        vdirs = [d for d in dirs if any(
            f.endswith(".pom") for f in os.listdir(os.path.join(root, d)))]
        if not vdirs:
            continue
        rel = os.path.relpath(root, out).split(os.sep)
        g, a = ".".join(rel[:-1]), rel[-1]
        vs = sorted(vdirs, key=vkey)
        newest = 0
        for v in vs:
            for f in os.listdir(os.path.join(root, v)):
                newest = max(newest, int(os.stat(os.path.join(root, v, f)).st_mtime))
        rel_vs = [v for v in vs if not v.endswith("-SNAPSHOT")]
        xml = ['<?xml version="1.0" encoding="UTF-8"?>', "<metadata>",
               "  <groupId>%s</groupId>" % g, "  <artifactId>%s</artifactId>" % a,
               "  <versioning>", "    <latest>%s</latest>" % vs[-1]]
        if rel_vs:
            xml.append("    <release>%s</release>" % rel_vs[-1])
        xml.append("    <versions>")
        xml += ["      <version>%s</version>" % v for v in vs]
        xml += ["    </versions>", "    <lastUpdated>%s</lastUpdated>" % fmt_ts(newest),
                "  </versioning>", "</metadata>", ""]
        write(os.path.join(root, "maven-metadata.xml"), "\n".join(xml).encode(), newest)
        # plugin prefix for group-level metadata
        jar = os.path.join(root, vs[-1], "%s-%s.jar" % (a, vs[-1]))
        pom = os.path.join(root, vs[-1], "%s-%s.pom" % (a, vs[-1]))
        is_plugin = os.path.exists(pom) and re.search(
            r"<packaging>\s*maven-plugin\s*</packaging>", open(pom, encoding="utf-8", errors="replace").read())
        if is_plugin and os.path.exists(jar):
            try:
                with zipfile.ZipFile(jar) as z:
                    pd = z.read("META-INF/maven/plugin.xml").decode("utf-8", "replace")
                pfx = re.search(r"<goalPrefix>([^<]+)</goalPrefix>", pd)
                name = re.search(r"<name>([^<]+)</name>", pd)
                if pfx:
                    plugins_by_group.setdefault(g, []).append(
                        (a, pfx.group(1), name.group(1) if name else a, newest))
            except (KeyError, zipfile.BadZipFile):
                pass
    for g, plugins in plugins_by_group.items():
        xml = ['<?xml version="1.0" encoding="UTF-8"?>', "<metadata>", "  <plugins>"]
        for a, p, n, _ in sorted(plugins):
            xml += ["    <plugin>", "      <name>%s</name>" % n, "      <prefix>%s</prefix>" % p,
                    "      <artifactId>%s</artifactId>" % a, "    </plugin>"]
        xml += ["  </plugins>", "</metadata>", ""]
        newest = max(t for *_, t in plugins)
        write(os.path.join(out, *g.split("."), "maven-metadata.xml"), "\n".join(xml).encode(), newest)


def parse_path(p):
    """org/x/a/1.0/a-1.0.jar -> (g, a, v, filename)"""
    parts = p.strip("/").split("/")
    return ".".join(parts[:-3]), parts[-3], parts[-2], parts[-1]


def manifest_from_log(log):
    seen = []
    for line in open(log):
        m = re.search(r'"GET (/\S*) HTTP/[\d.]+" (\d+)', line)
        if not m or m.group(2) != "200":
            continue
        p = m.group(1).split("?")[0]
        p = re.sub(r"^/maven/", "", p)
        if p.endswith((".sha1", ".md5", ".asc", ".sha256", ".sha512")) or p.endswith("maven-metadata.xml"):
            continue
        if p not in seen:
            seen.append(p)
    return seen


def main(argv):
    src, mode, out = SRC, "manifest", None
    args = list(argv)
    while args:
        x = args.pop(0)
        if x == "--src":
            src = args.pop(0)
        elif x == "-v":
            pass
        elif x == "--all":
            mode = "all"
        elif x == "--manifest-from-log":
            for p in manifest_from_log(args.pop(0)):
                print(p)
            return 0
        else:
            out = x
    if not out:
        print(__doc__)
        return 2
    warnings = []
    repo = Repo(src)
    os.makedirs(out, exist_ok=True)
    if mode == "all":
        for (g, a), vs in sorted(repo.arts.items()):
            real = {repo.real_version(g, a, v) for v in vs}
            for v in sorted(x for x in real if x):
                names = set()
                for d, sv in repo.source_dirs(g, a, v):
                    names |= {f.replace("%s-%s" % (a, sv), "%s-%s" % (a, v), 1) for f in os.listdir(d)
                              if f.startswith("%s-%s" % (a, sv)) and os.path.exists(os.path.join(d, f))}
                emit_artifact(repo, out, g, a, v, sorted(names), warnings.append)
    else:
        for p in MANIFEST:
            g, a, v, fn = parse_path(p)
            emit_artifact(repo, out, g, a, v, [fn], warnings.append)
    emit_metadata(out)
    # report leftovers that do not look like Central
    bad = []
    for root, _, files in os.walk(out):
        for f in files:
            fp = os.path.join(root, f)
            if os.path.islink(fp):
                bad.append("symlink " + fp)
            if f.endswith(".pom"):
                t = open(fp, encoding="utf-8", errors="replace").read()
                for m in re.finditer(r"<version>\s*(debian|\d+(\.\d+)*\.x)\s*</version>", t):
                    bad.append("%s: placeholder %s" % (fp, m.group(1)))
    missing = [w for w in set(warnings) if w.startswith("missing")]
    for w in sorted(set(warnings)):
        if not w.startswith("dropped") or "-v" in argv:
            print("warning:", w, file=sys.stderr)
    for b in bad[:50]:
        print("leftover:", b, file=sys.stderr)
    n = sum(len(fs) for _, _, fs in os.walk(out))
    print("wrote %d files to %s (%d warnings, %d leftovers)" % (n, out, len(set(warnings)), len(bad)))
    if missing and mode == "manifest":
        print("error: %d manifest files missing from %s; install the Debian packages: apt-get install -y "
              "libmaven-resources-plugin-java libmaven-compiler-plugin-java libsurefire-java "
              "libmaven-jar-plugin-java libmaven-install-plugin-java libmaven-clean-plugin-java "
              "libcommons-lang3-java junit4" % (len(missing), src), file=sys.stderr)
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
