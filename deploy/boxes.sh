#!/bin/sh
# `boxes` in the container image: the compiled bundle's CLI (apps/server/dist/cli.mjs).
#   boxes start [server] [worker] [mx] [push] [dns]   run apps (none named: all of them, supervised)
#   boxes migrate                                     create the database if missing, apply migrations, exit
#   boxes admin <command>                             the operator commands (boxes admin for the list)
#   boxes healthcheck                                 exit 0 when this container's process is ready (HEALTHCHECK)
set -e
# `docker run <image> boxes start ...` works as well as `docker run <image> start ...`.
if [ "${1:-}" = boxes ]; then shift; fi
if [ "${1:-}" = healthcheck ]; then
  shift
  exec node /app/deploy/healthcheck.mjs "$@"
fi
exec node /app/apps/server/dist/cli.mjs "$@"
