#!/usr/bin/env bash
# Build a minimal Debian image from Debian's own packages, for machines that cannot pull images
# from a registry: `debootstrap --variant=minbase` into a directory, then `docker import`.
# Usage: docker/build-base-image.sh [IMAGE (default blocktune-debian:bookworm)] [SUITE] [MIRROR]
# Needs root (debootstrap) and the debootstrap package. Reuses IMAGE when it exists already.
# The host's extra CA certificates (/usr/local/share/ca-certificates/*.crt) are copied in.
set -euo pipefail
image=${1:-blocktune-debian:bookworm}
suite=${2:-bookworm}
mirror=${3:-http://deb.debian.org/debian}

if docker image inspect "$image" >/dev/null 2>&1; then
  echo "build-base-image: $image exists"
  exit 0
fi
rootfs=$(mktemp -d /tmp/blocktune-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "build-base-image: debootstrap $suite from $mirror (about a minute)"
debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
  || { tail -20 "$rootfs.log" >&2; rm -f "$rootfs.log"; exit 1; }
rm -f "$rootfs.log"
# what the official debian:*-slim images do too: no apt lists, no docs, no man pages in the image
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
printf 'path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/locale/*\n' \
  >"$rootfs"/etc/dpkg/dpkg.cfg.d/docker-slim
printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' >"$rootfs"/etc/apt/apt.conf.d/docker-slim
# the host's own certificate authorities (e.g. a TLS-intercepting proxy's): images built on this
# one trust them once they install ca-certificates, as the host does
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$rootfs"/usr/local/share/ca-certificates
  cp /usr/local/share/ca-certificates/*.crt "$rootfs"/usr/local/share/ca-certificates/
fi
tar -C "$rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["bash"]' \
  --message "debootstrap --variant=minbase $suite" - "$image"
echo "build-base-image: $image built"
