#!/usr/bin/env bash
# Installs what the tests use beyond the machine's services, when missing:
# for the real-client suite (tests/clients) pip's `wheel` (fixture wheels with
# setuptools < 70), dpkg-dev (dpkg-scanpackages), apt, Debian's golang and
# golang-golang-x-mod-dev (a signed checksum database fixture);
# pnpm and yarn 1 (the npm registry), uv and poetry (PyPI);
# for the unit check systemd's `systemd-analyze`; for the browser test
# Debian's `chromium-headless-shell`;
# for the container-image tests (tests/clients/oci.rs) Debian's
# docker-registry (the reference registry), skopeo, umoci and openssl;
# podman (its `login` against a private remote);
# for the container daemons (tests/clients/daemons.rs) Debian's docker.io
# (dockerd 20.10) and containerd 1.6 (with ctr);
# for the RPM tests (tests/clients/rpm.rs) rpm, createrepo-c and dnf;
# for the NuGet test (tests/clients/nuget.rs) Debian's nuget 2.8 under mono;
# for the S3 tests moto's server (PyPI); huggingface_hub in a venv (PyPI);
# for tests/clients/{cran,hex,conda}.rs Debian's r-base-core and rebar3, and
# py-rattler in a venv of its own (PyPI).
# for tests/clients/conan.rs conan and conan-server in a venv of their own (PyPI).
# npm, pip and cargo come with the machine; redis-server and PostgreSQL are
# checked by services.sh.
set -uo pipefail

need_apt=()
command -v dpkg-scanpackages >/dev/null || need_apt+=(dpkg-dev)
command -v apt-get >/dev/null || need_apt+=(apt)
command -v go >/dev/null || need_apt+=(golang-go)
# `systemd-analyze verify` checks contrib/mirrorcache.service (tests/it/service.rs).
command -v systemd-analyze >/dev/null || need_apt+=(systemd)
# The dashboard in a browser (tests/clients/browser.rs): ~95 MB to download,
# about 20 s to install.
command -v chromium-headless-shell >/dev/null || need_apt+=(chromium-headless-shell)
# The go checksum database fixture (tests/clients/sumdb) builds on x/mod's sumdb.
[ -d /usr/share/gocode/src/golang.org/x/mod/sumdb ] || need_apt+=(golang-golang-x-mod-dev)
# Container images (tests/clients/oci.rs, bench/oci-pull.sh): two registries,
# the puller, the image builder, and the token issuer's key and certificate.
command -v docker-registry >/dev/null || need_apt+=(docker-registry)
command -v skopeo >/dev/null || need_apt+=(skopeo)
# `podman login` against a private oci remote (tests/clients/private.rs).
command -v podman >/dev/null || need_apt+=(podman)
command -v umoci >/dev/null || need_apt+=(umoci)
# The Docker Engine and containerd (tests/clients/daemons.rs), each started
# by its test with its own root, socket and config.
command -v dockerd >/dev/null || need_apt+=(docker.io)
command -v ctr >/dev/null || need_apt+=(containerd)
command -v openssl >/dev/null || need_apt+=(openssl)
# Maven (tests/clients/maven.rs): Debian's plugin packages are the fixture
# repository's source (tests/clients/maven/make_fixture.py); mvn 3.8.7 and
# Java 17 come with the machine; Gradle 4.4.1 is Debian's.
command -v mvn >/dev/null || need_apt+=(maven)
for pkg in libmaven-resources-plugin-java libmaven-compiler-plugin-java libsurefire-java \
           libmaven-jar-plugin-java libmaven-install-plugin-java libmaven-clean-plugin-java \
           libcommons-lang3-java junit4; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
command -v gradle >/dev/null || need_apt+=(gradle)
# RPM repositories (tests/clients/rpm.rs): rpmbuild builds the fixture
# packages, createrepo_c the repository, dnf (Debian's 4.14) installs through
# the proxy into a temporary --installroot.
command -v rpmbuild >/dev/null || need_apt+=(rpm)
command -v createrepo_c >/dev/null || need_apt+=(createrepo-c)
command -v dnf >/dev/null || need_apt+=(dnf)
# RubyGems (tests/clients/rubygems.rs): Debian's ruby 3.1 (gem 3.3) and bundler 2.3.
command -v gem >/dev/null || need_apt+=(ruby)
command -v bundle >/dev/null || need_apt+=(ruby-bundler)
# Composer (tests/clients/composer.rs): Debian's composer 2.5 (with php-cli and php-zip).
command -v composer >/dev/null || need_apt+=(composer php-zip)
# NuGet v2 (tests/clients/nuget.rs): Debian's nuget 2.8 (NuGet.Core under mono).
command -v nuget >/dev/null || need_apt+=(nuget)
# Nix binary caches (tests/clients/nix.rs): Debian's nix 2.8 (nix-store, nix copy), each
# test with stores of its own below a temp dir.
command -v nix-store >/dev/null || need_apt+=(nix-bin)
# Ansible Galaxy (tests/clients/galaxy.rs): Debian's ansible-core 2.14 (ansible-galaxy
# builds the fixture collections and installs them).
command -v ansible-galaxy >/dev/null || need_apt+=(ansible-core)
command -v git-lfs >/dev/null || need_apt+=(git-lfs) # tests/clients/lfs.rs: Debian's git-lfs 3.3
# CRAN (tests/clients/cran.rs): Debian's R 4.2 (Rscript, install.packages).
command -v Rscript >/dev/null || need_apt+=(r-base-core)
# Hex (tests/clients/hex.rs): Debian's rebar3 3.19 on the machine's Erlang (openssl,
# above, signs the fixture's registry).
command -v rebar3 >/dev/null || need_apt+=(rebar3)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "installing: ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null \
        || echo "WARNING: could not install ${need_apt[*]}"
fi
command -v moto_server >/dev/null || python3 -m pip install -q --disable-pip-version-check 'moto[server]' \
    || echo "WARNING: could not install moto (the S3 tests need moto_server)"
python3 -c 'import wheel' 2>/dev/null || python3 -m pip install -q --disable-pip-version-check wheel \
    || echo "WARNING: could not install the wheel package"
# Pinned: the versions the client tests were written against (pnpm 12.4.2 is
# the release known to install cleanly here).
command -v pnpm >/dev/null || npm install -g --no-fund --no-audit pnpm@12.4.2 >/dev/null \
    || echo "WARNING: could not install pnpm"
command -v yarn >/dev/null || npm install -g --no-fund --no-audit yarn@1.22.22 >/dev/null \
    || echo "WARNING: could not install yarn"
# huggingface_hub (tests/clients/huggingface.rs, bench/hf-fanout.sh): pinned, in a venv of
# its own (with hf_xet, as pip installs it: the proxy must keep clients off the Xet path).
HF_VENV="${MIRRORCACHE_HF_VENV:-$HOME/.cache/mirrorcache/hf-venv}"
"$HF_VENV/bin/python" -c 'import sys, huggingface_hub as h; sys.exit(h.__version__ != "2.4.0")' 2>/dev/null \
    || { python3 -m venv "$HF_VENV" && "$HF_VENV/bin/python" -m pip install -q --disable-pip-version-check 'huggingface_hub==2.4.0'; } \
    || echo "WARNING: could not install huggingface_hub into $HF_VENV"
# py-rattler (tests/clients/conda.rs): pinned, in a venv of its own beside huggingface_hub's.
RATTLER_VENV="${MIRRORCACHE_RATTLER_VENV:-$HOME/.cache/mirrorcache/rattler-venv}"
"$RATTLER_VENV/bin/python" -c 'import sys, importlib.metadata as m; sys.exit(m.version("py-rattler") != "0.28.0")' 2>/dev/null \
    || { python3 -m venv "$RATTLER_VENV" && "$RATTLER_VENV/bin/python" -m pip install -q --disable-pip-version-check 'py-rattler==0.28.0'; } \
    || echo "WARNING: could not install py-rattler into $RATTLER_VENV"
# conan with conan-server (tests/clients/conan.rs): pinned, in a venv of its own beside py-rattler's.
CONAN_VENV="${MIRRORCACHE_CONAN_VENV:-$HOME/.cache/mirrorcache/conan-venv}"
"$CONAN_VENV/bin/conan" --version 2>/dev/null | grep -q ' 2.33.0$' && [ -x "$CONAN_VENV/bin/conan_server" ] \
    || { python3 -m venv "$CONAN_VENV" && "$CONAN_VENV/bin/python" -m pip install -q --disable-pip-version-check 'conan==2.33.0' 'conan-server==2.33.0'; } \
    || echo "WARNING: could not install conan and conan-server into $CONAN_VENV"
command -v uv >/dev/null || python3 -m pip install -q --disable-pip-version-check uv \
    || echo "WARNING: could not install uv"
command -v poetry >/dev/null || python3 -m pip install -q --disable-pip-version-check poetry \
    || echo "WARNING: could not install poetry"
echo "tools: pnpm $(pnpm --version 2>/dev/null || echo absent), yarn $(yarn --version 2>/dev/null || echo absent), $(uv --version 2>/dev/null || echo 'uv absent'), $(poetry --version 2>/dev/null || echo 'poetry absent')"
echo "tools: $(Rscript --version 2>&1 | head -1 || echo 'Rscript absent'), rebar3 $(rebar3 --version 2>/dev/null | cut -d' ' -f2 || echo absent), py-rattler $("$RATTLER_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("py-rattler"))' 2>/dev/null || echo absent)"
echo "tools: $("$CONAN_VENV/bin/conan" --version 2>/dev/null || echo 'conan absent')"
echo "tools: huggingface_hub $("$HF_VENV/bin/python" -c 'import huggingface_hub as h; print(h.__version__)' 2>/dev/null || echo absent)"
echo "tools: pip $(pip --version | cut -d' ' -f2), npm $(npm --version), $(cargo --version | cut -d' ' -f1-2), $(apt-get --version | head -1), $(go version 2>/dev/null || echo 'go: absent')"
echo "tools: $(mvn --version 2>/dev/null | head -1 || echo 'mvn absent'), gradle $(gradle --version 2>/dev/null | grep -m1 '^Gradle' || echo absent)"
echo "tools: $(ruby --version 2>/dev/null || echo 'ruby absent'), gem $(gem --version 2>/dev/null || echo absent), $(bundle --version 2>/dev/null || echo 'bundler absent'), $(composer --version 2>/dev/null | head -1 || echo 'composer absent')"
echo "tools: $(docker-registry --version 2>/dev/null | cut -d' ' -f2- || echo 'docker-registry absent'), $(skopeo --version 2>/dev/null || echo 'skopeo absent'), $(umoci --version 2>/dev/null || echo 'umoci absent')"
echo "tools: $(nix-store --version 2>/dev/null || echo 'nix absent'), $(ansible-galaxy --version 2>/dev/null | head -1 || echo 'ansible-galaxy absent')"
