#!/usr/bin/env bash
# Builds the exec-server container image around a binary built beforehand (by default
# target/release/exec-server), with the repository's Dockerfile (`--target prebuilt`).
#
# Where no registry image can be pulled, the runtime base is made here: a minimal Debian
# (debootstrap --variant=minbase, from Debian's own packages) imported as $BASE, once.
# Where registries are reachable, `BASE=debian:bookworm-slim deploy/build-image.sh` uses the
# published base instead, and a plain `podman build .` / `docker build .` builds everything,
# the binary included.
#
#   cargo build --release --bin exec-server && deploy/build-image.sh
#
# Environment: ENGINE (podman or docker; default podman), IMAGE (default
# localhost/exec-server:dev), BINARY, BASE (default localhost/exec-server-base:bookworm),
# DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/lib.sh
BINARY=${BINARY:-target/release/exec-server}
BASE=${BASE:-localhost/exec-server-base:bookworm}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

[[ -x $BINARY ]] || { echo "no executable $BINARY; run: cargo build --release --bin exec-server" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! "$ENGINE" image inspect "$BASE" >/dev/null 2>&1; then
  [[ $BASE == localhost/* ]] || { echo "$BASE is not here; pull it, or leave BASE unset to make one" >&2; exit 1; }
  command -v debootstrap >/dev/null || { echo "debootstrap is required: apt-get install debootstrap" >&2; exit 1; }
  echo "== making the base $BASE: debootstrap --variant=minbase $SUITE"
  root=$work/rootfs
  # What the Dockerfile's runtime stage would otherwise install (it says why).
  debootstrap --variant=minbase --include=ca-certificates,tini "$SUITE" "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  # What only a package manager's next run or a human reader would use.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
    "$root"/var/log/* "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
    "$root"/usr/share/locale/*
  tar --numeric-owner -C "$root" -c . | "$ENGINE" import --change 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
  rm -rf "$root"
fi
echo "== base: $BASE ($("$ENGINE" image inspect --format '{{.Size}}' "$BASE") bytes)"

# A context of two files, not the repository (whose target/ holds gigabytes).
mkdir -p "$work/context/target/release"
cp Dockerfile "$work/context/"
# The release profile keeps line tables for profiling; the image does without (~80 MB less).
objcopy --strip-debug "$BINARY" "$work/context/target/release/exec-server"
build_flags=("${ENGINE_FLAGS[@]}")
# podman writes OCI images by default, a format without HEALTHCHECK.
[[ $ENGINE == podman ]] && build_flags+=(--format docker)
"$ENGINE" build "${build_flags[@]}" --target prebuilt --build-arg "BASE=$BASE" -t "$IMAGE" "$work/context"
echo "== image: $IMAGE ($("$ENGINE" image inspect --format '{{.Size}}' "$IMAGE") bytes)"
