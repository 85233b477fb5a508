#!/bin/sh
# Starts pdns_server with deploy/powerdns/pdns.conf, the database from PDNS_DB_HOST, PDNS_DB_PORT, PDNS_DB_NAME and
# PDNS_DB_USER, and the password from the file PDNS_DB_PASSWORD_FILE (a compose or Kubernetes secret).
set -e
exec pdns_server --config-dir=/etc/powerdns --daemon=no --guardian=no --disable-syslog --write-pid=no \
  --gpgsql-host="${PDNS_DB_HOST:-postgres}" --gpgsql-port="${PDNS_DB_PORT:-5432}" \
  --gpgsql-dbname="${PDNS_DB_NAME:-boxes}" --gpgsql-user="${PDNS_DB_USER:-pdns}" \
  --gpgsql-password="$(cat "${PDNS_DB_PASSWORD_FILE:-/run/secrets/pdns_password}")" "$@"
