#!/usr/bin/env bash
# Makes a base image for building deploy/Dockerfile on a machine that reaches no container registry: a minimal
# Debian 12 root file system (debootstrap --variant=minbase) with this machine's Node.js (and pnpm, for the build
# stage) copied into /usr/local, as the official node:24-bookworm-slim image has them, imported into podman.
# Prints the image name, to pass as --build-arg BASE_IMAGE=<name>. Kept: the image in podman's store and the
# root file system's tarball in .cache/container-base/ (both reused while this machine's Node.js version is the
# same). Needs root, debootstrap and podman (Debian packages; scripts/start-services.sh installs them).
#
#   podman build --isolation=chroot --format docker -f deploy/Dockerfile \
#     --build-arg BASE_IMAGE="$(bash scripts/container-base-image.sh)" -t boxes .
set -euo pipefail
cd "$(dirname "$0")/.."

NODE_BIN=$(readlink -f "$(command -v node)")
NODE_VERSION=$(node -p 'process.versions.node')
PNPM_DIR=$(dirname "$(readlink -f "$(command -v pnpm)")")
IMAGE="localhost/boxes-base:bookworm-node${NODE_VERSION}"
CACHE=.cache/container-base
TARBALL="$CACHE/bookworm-node${NODE_VERSION}.tar"
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if podman image exists "$IMAGE"; then
  echo "$IMAGE"
  exit 0
fi
mkdir -p "$CACHE"
if [ ! -s "$TARBALL" ]; then
  root=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  trap 'rm -rf "$root"' EXIT
  echo "container-base: debootstrap bookworm (minbase) into $root" >&2
  debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
    { tail -n 20 "$CACHE/debootstrap.log" >&2; exit 1; }
  # Node.js as the official image has it (/usr/local/bin/node), and pnpm for the build stage.
  install -m 0755 "$NODE_BIN" "$root/usr/local/bin/node"
  mkdir -p "$root/usr/local/lib/node_modules"
  cp -a "$PNPM_DIR" "$root/usr/local/lib/node_modules/pnpm"
  ln -s ../lib/node_modules/pnpm/pnpm "$root/usr/local/bin/pnpm"
  # apt's lists and caches are not needed in an image.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" --numeric-owner -cf "$TARBALL.part" .
  mv "$TARBALL.part" "$TARBALL"
fi
podman import --change 'CMD ["/bin/bash"]' "$TARBALL" "$IMAGE" >/dev/null
echo "$IMAGE"
