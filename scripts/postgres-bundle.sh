#!/usr/bin/env bash
# Pack this machine's Debian PostgreSQL server into .pgbundle/postgres.tar.xz (git-ignored), so a
# GPU host that has no PostgreSQL (the device tool's image) can run the fleet and service benchmarks
# against a real one: carry `.pgbundle`, then on that host `bash scripts/postgres-bundle.sh --install`.
# The server's binaries are unpacked under /usr/lib/postgresql/<v> and /usr/share/postgresql/<v>
# (new folders only), its shared libraries under /opt/pglibs, reached through small wrappers that
# set LD_LIBRARY_PATH for the server alone, so nothing else on that host loads them.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --install ]; then
  tar -C / -xJf .pgbundle/postgres.tar.xz
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
  echo "postgres-bundle: installed $(ls -d /usr/lib/postgresql/*/bin)"
  exit 0
fi
v=$(ls /usr/lib/postgresql | sort -n | tail -1)
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/usr/lib/postgresql/$v/bin" "$stage/usr/share/postgresql" "$stage/opt/pglibs" "$stage/usr/share"
for b in postgres initdb pg_ctl pg_isready psql; do
  cp "/usr/lib/postgresql/$v/bin/$b" "$stage/usr/lib/postgresql/$v/bin/$b.bin"
  printf '#!/bin/sh\nLD_LIBRARY_PATH=/opt/pglibs exec "$0.bin" "$@"\n' > "$stage/usr/lib/postgresql/$v/bin/$b"
  chmod +x "$stage/usr/lib/postgresql/$v/bin/$b"
done
mkdir -p "$stage/usr/lib/postgresql/$v/lib"; (cd "/usr/lib/postgresql/$v/lib" && cp -a $(ls | grep -vE "^(bitcode|llvmjit)") "$stage/usr/lib/postgresql/$v/lib/")
cp -a "/usr/share/postgresql/$v" "$stage/usr/share/postgresql/"
cp -a /usr/share/zoneinfo "$stage/usr/share/"
# Every library the binaries need except glibc's own (the host's newer glibc serves them).
for b in postgres initdb pg_ctl psql; do ldd "/usr/lib/postgresql/$v/bin/$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u \
  | grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv)\.so' | xargs -I{} cp -L {} "$stage/opt/pglibs/"
mkdir -p .pgbundle
tar -C "$stage" -cJf .pgbundle/postgres.tar.xz usr opt
grep -qxF '/.pgbundle/' .git/info/exclude 2>/dev/null || echo '/.pgbundle/' >> .git/info/exclude
du -h .pgbundle/postgres.tar.xz
