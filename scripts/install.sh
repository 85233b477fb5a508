#!/usr/bin/env bash
# Installs what Boxes needs to run on this machine, idempotently: Node 24 (when the node on PATH is older or
# missing), pnpm 12.21.0, and the workspace's dependencies. Each step says what it does, and is skipped when
# already done. `pnpm start` then starts PostgreSQL and Redis itself when they are local and not running.
#
#   bash scripts/install.sh            # newcomers
#   CI=true bash scripts/install.sh    # CI: the lockfile must be up to date (pnpm install --frozen-lockfile)
set -euo pipefail
cd "$(dirname "$0")/.."

NODE_MAJOR=24
PNPM_VERSION=12.21.0

# Global npm installs go to /usr/local (ahead of /usr/bin on PATH) when we are root, else to ~/.local. Passing
# --prefix matters: once node itself comes from the `node` package, npm would otherwise derive its global prefix
# from that package's folder and put pnpm where PATH does not look.
if [ "$(id -u)" = 0 ]; then PREFIX=/usr/local; else PREFIX="$HOME/.local"; fi
case ":$PATH:" in *":$PREFIX/bin:"*) ;; *) export PATH="$PREFIX/bin:$PATH" ;; esac

node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

if [ "$(node_major)" -lt "$NODE_MAJOR" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "install: no npm on this machine; installing Debian's nodejs and npm to bootstrap Node $NODE_MAJOR"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
    else
      echo "install: Boxes needs Node $NODE_MAJOR (found $(node --version 2>/dev/null || echo none)) and there is no npm to fetch it; install Node $NODE_MAJOR LTS first" >&2
      exit 1
    fi
  fi
  echo "install: node is $(node --version 2>/dev/null || echo missing); installing Node $NODE_MAJOR from the npm registry into $PREFIX"
  npm install -g --prefix "$PREFIX" --no-fund --no-audit --loglevel=error "node@$NODE_MAJOR" >/dev/null
  hash -r
  [ "$(node_major)" -ge "$NODE_MAJOR" ] || { echo "install: Node $NODE_MAJOR is in $PREFIX/bin but not first on PATH; put $PREFIX/bin first" >&2; exit 1; }
fi

if [ "$(pnpm --version 2>/dev/null)" != "$PNPM_VERSION" ]; then
  echo "install: installing pnpm $PNPM_VERSION into $PREFIX"
  npm install -g --prefix "$PREFIX" --no-fund --no-audit --loglevel=error "pnpm@$PNPM_VERSION" >/dev/null
  hash -r
fi

echo "install: node $(node --version), pnpm $(pnpm --version)"
if [ "${CI:-}" = "true" ]; then pnpm install --frozen-lockfile; else pnpm install; fi
if [ "$PREFIX" != /usr/local ]; then echo "install: add $PREFIX/bin to your PATH (export PATH=\"$PREFIX/bin:\$PATH\")"; fi
