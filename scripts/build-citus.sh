#!/usr/bin/env bash
# build-citus.sh — build Citus from ../shared/citus into the venv's embedded PostgreSQL 18.
#
# No registry these machines reach ships Citus, so the tests' and benchmarks' Citus cluster (rcll.citus_cluster) runs
# a build of its source archive, checked against SHA256SUMS, with PGXS against the embedded
# PostgreSQL's own pg_config (pginstall/ inside .venv: run after scripts/bootstrap). Nothing of
# Citus is kept in this repository; the build tree is removed after `make install`.
#
# Cached: a stamp beside citus.so records the archive's sha256 and the server's version, so a
# second run only compares them (~0 s). A new venv (a new pginstall) builds again.
#
# As root it installs the build's Debian dependencies (liblz4-dev, libzstd-dev) when missing.
# Not root and they are missing: one line says so and it exits 0; the Citus tests then skip,
# naming this script.
#
# Environment overrides:
#   RCLL_CITUS_SOURCE  directory holding citus-<version>.tar.gz and SHA256SUMS (default ../shared/citus
#                      beside the repository, then /work/shared/citus)
#   RCLL_CITUS_VERSION the release to build (default 14.0.1: PostgreSQL 16-18)
#   PG_CONFIG          the pg_config of the server to build for (default: the embedded PostgreSQL's)
#   RCLL_FORCE_BUILD   1 = build even when the stamp matches
set -euo pipefail

log() { printf '[build-citus] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

repo=$(cd "$(dirname "$0")/.." && pwd)
version=${RCLL_CITUS_VERSION:-14.0.1}
if [[ -n ${RCLL_CITUS_SOURCE:-} ]]; then
  source_dir=$RCLL_CITUS_SOURCE
elif [[ -f $repo/../shared/citus/SHA256SUMS ]]; then
  source_dir=$repo/../shared/citus
else
  source_dir=/work/shared/citus
fi
archive=$source_dir/citus-$version.tar.gz
[[ -f $archive && -f $source_dir/SHA256SUMS ]] || die "no $archive (or no SHA256SUMS beside it): set RCLL_CITUS_SOURCE"

if [[ -z ${PG_CONFIG:-} ]]; then
  [[ -x $repo/.venv/bin/python ]] || die "no .venv: run scripts/bootstrap first (the embedded PostgreSQL lives in it)"
  PG_CONFIG=$("$repo/.venv/bin/python" -c \
    "from rcll.cluster import embedded_bindir; print(embedded_bindir() / 'pg_config')")
fi
[[ -x $PG_CONFIG ]] || die "$PG_CONFIG is not an executable pg_config"

pkglibdir=$("$PG_CONFIG" --pkglibdir)
pg_version=$("$PG_CONFIG" --version)
expected=$(awk -v f="citus-$version.tar.gz" '$2 == f { print $1 }' "$source_dir/SHA256SUMS")
[[ -n $expected ]] || die "SHA256SUMS has no line for citus-$version.tar.gz"
stamp=$pkglibdir/citus.rcll-build
want="citus $version $expected for $pg_version"

if [[ ${RCLL_FORCE_BUILD:-0} != 1 && -f $pkglibdir/citus.so && -f $stamp && $(cat "$stamp") == "$want" ]]; then
  log "Citus $version already built for $pg_version"
  exit 0
fi

# The build's Debian dependencies: lz4 and zstd headers (configure checks for both; libcurl is
# configured out: Citus uses it only for its anonymous statistics collection).
missing=()
for p in liblz4-dev libzstd-dev; do
  [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true) == installed ]] || missing+=("$p")
done
command -v gcc >/dev/null && command -v make >/dev/null || missing+=(build-essential)
if ((${#missing[@]})); then
  if [[ $(id -u) != 0 ]]; then
    echo "citus: not built (needs ${missing[*]}; run scripts/build-citus.sh as root): the Citus tests skip"
    exit 0
  fi
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_get=(apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends)
  "${apt_get[@]}" "${missing[@]}" >/dev/null 2>&1 || { apt-get update -qq; "${apt_get[@]}" "${missing[@]}" >/dev/null; }
fi

got=$(sha256sum "$archive" | cut -d' ' -f1)
[[ $got == "$expected" ]] || die "$archive: sha256 $got, SHA256SUMS says $expected"

build=$(mktemp -d "${TMPDIR:-/tmp}/rcll-citus-build.XXXXXX")
trap 'rm -rf "$build"' EXIT
tar -xzf "$archive" -C "$build"
src=$(find "$build" -mindepth 1 -maxdepth 1 -type d | head -n1)
[[ -n $src && -x $src/configure ]] || die "no configure in $archive"

started=$(date +%s)
log "building Citus $version against $pg_version ($PG_CONFIG)"
# The embedded build's own CFLAGS carry a clang-only warning flag that gcc refuses: give make
# PostgreSQL's usual gcc flags instead.
(cd "$src" && PG_CONFIG=$PG_CONFIG ./configure --without-libcurl >"$build/configure.log" 2>&1) \
  || { tail -n 30 "$build/configure.log" >&2; die "configure failed"; }
flags="-O2 -fno-strict-aliasing -fwrapv -fexcess-precision=standard"
(cd "$src" && make -j"$(nproc)" CFLAGS="$flags" >"$build/make.log" 2>&1 && make install >>"$build/make.log" 2>&1) \
  || { tail -n 30 "$build/make.log" >&2; die "make failed"; }
[[ -f $pkglibdir/citus.so ]] || die "make install left no citus.so in $pkglibdir"
printf '%s\n' "$want" >"$stamp"
echo "citus $version built for $pg_version in $(( $(date +%s) - started )) s"
