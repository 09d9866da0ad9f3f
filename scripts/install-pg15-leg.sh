#!/usr/bin/env bash
# install-pg15-leg.sh — prepare the "Debian PostgreSQL 15 leg" used by the test suite.
#
# Run as root on Debian 12 (bookworm). Idempotent: a second run only checks and
# takes a few seconds.
#
#   1. apt-get install postgresql-15, postgresql-plpython3-15, postgresql-server-dev-15
#      and a build toolchain (apt-get update only when something is missing).
#      Note: postgresql-plpython3-15 depends on the *exact* postgresql-15 version, so when
#      it is missing, postgresql-15 is upgraded to bookworm's current point release too
#      (e.g. 15.18 -> 15.20 from bookworm-security).
#   2. Build pgvector for PG 15 from Debian's *source* package. pgvector is not packaged
#      in bookworm (nor in backports), so its source package is fetched from the trixie
#      suite of the same Debian mirror, through a deb-src-only entry in a private apt
#      configuration (its own sources file and lists dir under $BUILD_ROOT). The system's
#      apt sources and lists are not touched, and no trixie binary can ever be installed
#      from it (installing trixie binaries would drag in a newer libc).
#   3. Leave Debian's default "main" cluster (port 5432) stopped: the tests start their
#      own throwaway clusters.
#   4. Print a one-line summary.
#
# GOTCHA (pgvector 0.6.0 .. 0.8.1, including Debian's 0.8.0): the *parallel* HNSW index
# build has a bug (CVE-2026-3172). On this leg every HNSW build must run with
#     SET max_parallel_maintenance_workers = 0;
# (session-level, or in postgresql.conf of the throwaway cluster) before CREATE INDEX ... USING hnsw.
#
# Environment overrides:
#   RCLL_BUILD_ROOT   build directory (default /var/cache/rcll-build)
#   RCLL_FORCE_BUILD  1 = rebuild/reinstall pgvector even if already installed
set -euo pipefail

PG_MAJOR=15
PG_CONFIG=/usr/lib/postgresql/${PG_MAJOR}/bin/pg_config
EXT_DIR=/usr/share/postgresql/${PG_MAJOR}/extension
BUILD_ROOT=${RCLL_BUILD_ROOT:-/var/cache/rcll-build}
FORCE_BUILD=${RCLL_FORCE_BUILD:-0}
export DEBIAN_FRONTEND=noninteractive

log() { printf '[install-pg15-leg] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ $(id -u) -ne 0 ]]; then
  # Without root: nothing to do when the leg is installed; sudo when it may; else say so in one
  # line and leave it out (the suite then runs pg18 alone and says the same).
  if [[ -x $PG_CONFIG && -f $EXT_DIR/vector.control && -f $EXT_DIR/plpython3u.control && -f $EXT_DIR/pg_trgm.control ]]; then
    echo "pg15 leg ready (installed earlier by root)"
    exit 0
  fi
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    exec sudo -n "$0" "$@"
  fi
  echo "pg15 leg skipped: Debian's PostgreSQL 15 is not installed and installing it needs root (as root: make pg15-leg)"
  exit 0
fi
[[ -r /etc/os-release ]] && . /etc/os-release
[[ ${VERSION_CODENAME:-} == bookworm ]] || log "warning: expected Debian bookworm, found '${VERSION_CODENAME:-unknown}'"

# --------------------------------------------------------------------------------------
# 1. Debian packages
# --------------------------------------------------------------------------------------
PACKAGES=(
  postgresql-${PG_MAJOR}
  postgresql-plpython3-${PG_MAJOR}
  postgresql-server-dev-${PG_MAJOR}
  dpkg-dev          # dpkg-source, used by `apt-get source`
  build-essential   # gcc, make
)

is_installed() {
  [[ $(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true) == installed ]]
}

missing=()
for p in "${PACKAGES[@]}"; do
  is_installed "$p" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing: ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
else
  log "Debian packages already installed"
fi

[[ -x $PG_CONFIG ]] || die "$PG_CONFIG not found after install"
[[ -f $EXT_DIR/plpython3u.control ]] || die "plpython3u.control missing in $EXT_DIR"
[[ -f $EXT_DIR/pg_trgm.control ]] || die "pg_trgm.control missing in $EXT_DIR"

# --------------------------------------------------------------------------------------
# 2. pgvector from Debian's source package (trixie), built with PGXS against PG 15
# --------------------------------------------------------------------------------------
PKGLIBDIR=$("$PG_CONFIG" --pkglibdir)
if [[ $FORCE_BUILD != 1 && -f $EXT_DIR/vector.control && -f $PKGLIBDIR/vector.so \
      && -f $EXT_DIR/plpython3u.control ]]; then
  log "pgvector already installed for PG ${PG_MAJOR}, skipping build"
else
  # Same URI and keyring as the system's Debian (non-security) entry.
  debian_uri=""
  debian_keyring=""
  shopt -s nullglob
  for f in /etc/apt/sources.list.d/*.sources; do
    # deb822 stanzas are separated by blank lines; take the first whose URIs end in /debian.
    read -r uri key < <(awk '
      BEGIN { RS=""; FS="\n" }
      {
        u=""; k="";
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^URIs:/)      { sub(/^URIs:[ \t]*/, "", $i); split($i, a, /[ \t]+/); u = a[1] }
          if ($i ~ /^Signed-By:/) { sub(/^Signed-By:[ \t]*/, "", $i); k = $i }
        }
        if (u ~ /\/debian\/?$/) { print u, (k == "" ? "-" : k); exit }
      }' "$f") || true
    if [[ -n ${uri:-} ]]; then debian_uri=$uri; debian_keyring=$key; break; fi
  done
  shopt -u nullglob
  if [[ -z $debian_uri ]]; then
    # Fallback: one-line sources.list format.
    debian_uri=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ { print $2; exit }' \
                   /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
    debian_keyring=-
  fi
  [[ -n $debian_uri ]] || die "could not find the system's Debian apt entry"
  [[ $debian_keyring == - ]] && debian_keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  log "using $debian_uri (keyring $debian_keyring) for trixie deb-src"

  APT_DIR=$BUILD_ROOT/apt
  SRC_DIR=$BUILD_ROOT/src
  mkdir -p "$APT_DIR/lists/partial" "$SRC_DIR"
  cat >"$APT_DIR/trixie-src.sources" <<EOF
# Written by scripts/install-pg15-leg.sh. Source-only: used for \`apt-get source pgvector\`.
Types: deb-src
URIs: $debian_uri
Suites: trixie
Components: main
Signed-By: $debian_keyring
EOF
  # Private apt configuration: only this sources file, its own lists dir.
  APT_SRC_OPTS=(
    -o "Dir::Etc::SourceList=$APT_DIR/trixie-src.sources"
    -o "Dir::Etc::SourceParts=$APT_DIR/none.d"
    -o "Dir::State::Lists=$APT_DIR/lists"
    -o "APT::Get::List-Cleanup=0"
  )
  mkdir -p "$APT_DIR/none.d"
  log "apt-get update (trixie sources only)"
  apt-get "${APT_SRC_OPTS[@]}" update -qq

  rm -rf "$SRC_DIR"/pgvector-* "$SRC_DIR"/pgvector_*
  # apt downloads as the unprivileged _apt user; let it write here (else a warning).
  chown _apt:root "$SRC_DIR" 2>/dev/null || true
  log "apt-get source pgvector"
  (cd "$SRC_DIR" && apt-get "${APT_SRC_OPTS[@]}" source -qq pgvector >/dev/null)
  srcdir=$(find "$SRC_DIR" -mindepth 1 -maxdepth 1 -type d -name 'pgvector-*' | head -n1)
  [[ -n $srcdir && -f $srcdir/Makefile ]] || die "pgvector source tree not found in $SRC_DIR"
  rm -rf "$APT_DIR/lists"   # ~22 MB of trixie Sources index, no longer needed

  # OPTFLAGS="" as Debian's own packaging does (no -march=native: portable binary).
  log "building $(basename "$srcdir") against $("$PG_CONFIG" --version)"
  make -s -C "$srcdir" -j"$(nproc)" PG_CONFIG="$PG_CONFIG" OPTFLAGS="" >/dev/null
  make -s -C "$srcdir" install PG_CONFIG="$PG_CONFIG" OPTFLAGS="" >/dev/null
  [[ -f $EXT_DIR/vector.control && -f $PKGLIBDIR/vector.so ]] || die "pgvector install failed"
fi

# --------------------------------------------------------------------------------------
# 3. Debian's default cluster must not be running (tests use throwaway clusters)
# --------------------------------------------------------------------------------------
if command -v pg_lsclusters >/dev/null; then
  while read -r ver name _port status _rest; do
    [[ $ver == "$PG_MAJOR" ]] || continue
    if [[ $status == online* ]]; then
      log "stopping Debian cluster $ver/$name"
      pg_ctlcluster "$ver" "$name" stop || true
    fi
    # Keep it from being started again by the init script / a service restart.
    conf=/etc/postgresql/$ver/$name/start.conf
    if [[ -f $conf ]] && grep -qx 'auto' "$conf"; then
      sed -i 's/^auto$/manual/' "$conf"
    fi
  done < <(pg_lsclusters -h 2>/dev/null || true)
fi

# --------------------------------------------------------------------------------------
# 4. Summary
# --------------------------------------------------------------------------------------
pg_version=$("/usr/lib/postgresql/${PG_MAJOR}/bin/postgres" --version | awk '{print $3}')
vector_version=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$EXT_DIR/vector.control")
echo "pg15 leg ready: PostgreSQL ${pg_version} ($(dirname "$PG_CONFIG")), pgvector ${vector_version}, plpython3u, pg_trgm"
