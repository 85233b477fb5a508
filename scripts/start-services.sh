#!/usr/bin/env bash
# Starts the local PostgreSQL and Redis that Boxes needs, if they are not already answering.
# Used by .ci/run and by newcomers on a Debian machine; on other systems start them your own way and set
# DATABASE_URL / REDIS_URL. With --services-only (what `pnpm start` runs when the local defaults do not answer)
# it skips the Debian clients that only the tests need.
set -euo pipefail
SERVICES_ONLY=false
[ "${1:-}" = "--services-only" ] && SERVICES_ONLY=true

pg_up() { (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; }
redis_up() { [ "$(printf 'PING\r\n' | timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/6379; cat >&3; head -c 5 <&3' 2>/dev/null)" = "+PONG" ]; }

install_if_missing() {
  if ! command -v "$1" >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing $2 from Debian packages"
    # One package-list refresh per run, however many tools are missing.
    if [ -z "${APT_UPDATED:-}" ]; then apt-get update -qq && APT_UPDATED=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
  fi
}

if ! pg_up; then
  install_if_missing pg_ctlcluster postgresql
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n 1)" main start || true
  fi
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
  pg_up || { echo "PostgreSQL is not running on 127.0.0.1:5432 and could not be started" >&2; exit 1; }
fi

if ! redis_up; then
  install_if_missing redis-server redis-server
  echo "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no >/dev/null
  for _ in $(seq 1 30); do redis_up && break; sleep 1; done
  redis_up || { echo "Redis is not running on 127.0.0.1:6379 and could not be started" >&2; exit 1; }
fi
echo "PostgreSQL and Redis are up"
$SERVICES_ONLY && exit 0

# The e2e mail tests (tests/e2e/mail-receive*.test.ts) talk SMTP to the MX with swaks and curl as well as
# nodemailer. Installed only when missing, and only where root and apt-get are available; elsewhere install them.
for tool in swaks curl; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    install_if_missing "$tool" "$tool" || true
    command -v "$tool" >/dev/null 2>&1 || echo "$tool is not installed: the mail-receive e2e tests need it (apt-get install -y $tool)" >&2
  fi
done

# The IMAP client tests (tests/e2e/imap-clients.test.ts) sync with mbsync (Debian isync), collect with fetchmail
# and drive neomutt under script(1); Python's imaplib comes with python3.
for pair in mbsync:isync fetchmail:fetchmail neomutt:neomutt script:bsdutils python3:python3; do
  tool=${pair%%:*}; pkg=${pair##*:}
  if ! command -v "$tool" >/dev/null 2>&1; then
    install_if_missing "$tool" "$pkg" || true
    command -v "$tool" >/dev/null 2>&1 || echo "$tool is not installed: the IMAP client tests need it (apt-get install -y $pkg)" >&2
  fi
done

# The e2e MQTT tests (tests/e2e/push-mqtt.test.ts) subscribe with mosquitto_sub (Debian package mosquitto-clients).
if ! command -v mosquitto_sub >/dev/null 2>&1; then
  install_if_missing mosquitto_sub mosquitto-clients || true
  command -v mosquitto_sub >/dev/null 2>&1 || echo "mosquitto_sub is not installed: the MQTT e2e tests need it (apt-get install -y mosquitto-clients)" >&2
fi

# The /docs browser test (tests/e2e/docs-browser.test.ts) drives Debian's Chromium through playwright-core
# (executablePath /usr/bin/chromium; playwright's own browser download cannot be used here).
if ! command -v chromium >/dev/null 2>&1; then
  install_if_missing chromium chromium || true
  command -v chromium >/dev/null 2>&1 || echo "chromium is not installed: the /docs browser test needs it (apt-get install -y chromium)" >&2
fi

# The spam tests (tests/e2e/trust-spam.test.ts) run Debian's rspamd on an ephemeral port with a temporary
# configuration (the package's own rules; its system service is not used).
if ! command -v rspamd >/dev/null 2>&1; then
  install_if_missing rspamd rspamd || true
  command -v rspamd >/dev/null 2>&1 || echo "rspamd is not installed: the spam e2e tests need it (apt-get install -y rspamd)" >&2
fi

# The DNS tests (tests/e2e/dns-*.test.ts) ask with dig (Debian bind9-dnsutils) and compare apps/dns with PowerDNS
# (pdns-server with its generic PostgreSQL backend, pdns-backend-pgsql) on the same rows.
if ! command -v dig >/dev/null 2>&1; then
  install_if_missing dig bind9-dnsutils || true
  command -v dig >/dev/null 2>&1 || echo "dig is not installed: the DNS e2e tests need it (apt-get install -y bind9-dnsutils)" >&2
fi
pdns_installed() { [ -x /usr/sbin/pdns_server ] && ls /usr/lib/*/pdns/libgpgsqlbackend.so >/dev/null 2>&1; }
if ! pdns_installed && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing pdns-server and pdns-backend-pgsql from Debian packages"
  if [ -z "${APT_UPDATED:-}" ]; then apt-get update -qq && APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pdns-server pdns-backend-pgsql >/dev/null || true
fi
pdns_installed || echo "PowerDNS is not installed: tests/e2e/dns-powerdns.test.ts is skipped (apt-get install -y pdns-server pdns-backend-pgsql)" >&2

# The fault tests (tests/e2e/faults.test.ts) start a PostgreSQL cluster of their own (initdb and pg_ctl from
# /usr/lib/postgresql/<version>/bin) and a Redis server of their own (redis-server), and stop and restart them.
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing postgresql from Debian packages"
    if [ -z "${APT_UPDATED:-}" ]; then apt-get update -qq && APT_UPDATED=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null || true
  fi
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || echo "PostgreSQL's server binaries are missing: the fault tests need them (apt-get install -y postgresql)" >&2
fi
if ! command -v redis-server >/dev/null 2>&1; then
  install_if_missing redis-server redis-server || true
  command -v redis-server >/dev/null 2>&1 || echo "redis-server is missing: the fault tests need it (apt-get install -y redis-server)" >&2
fi
# The Sentinel failover test (tests/e2e/redis-sentinel.test.ts) runs its sentinels as `redis-server --sentinel`
# (Debian's redis-sentinel package is the same binary): nothing more to install.

# The pooler test (tests/e2e/pgbouncer.test.ts) runs Debian's pgbouncer (in /usr/sbin) on an ephemeral port with a
# generated configuration (transaction pooling); its system service is not used.
pgbouncer_installed() { command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; }
if ! pgbouncer_installed; then
  install_if_missing pgbouncer pgbouncer || true
  pgbouncer_installed || echo "pgbouncer is not installed: the PgBouncer e2e test needs it (apt-get install -y pgbouncer)" >&2
fi

# The container tests: tests/e2e/container-image.test.ts builds deploy/Dockerfile with podman (chroot isolation) on a
# Debian base made by debootstrap (scripts/container-base-image.sh); tests/e2e/deploy-manifests.test.ts renders
# deploy/k8s with kubectl's kustomize and validates deploy/compose.yaml with docker-compose.
for pair in podman:podman debootstrap:debootstrap unshare:util-linux docker-compose:docker-compose; do
  tool=${pair%%:*}; pkg=${pair##*:}
  if ! command -v "$tool" >/dev/null 2>&1; then
    install_if_missing "$tool" "$pkg" || true
    command -v "$tool" >/dev/null 2>&1 || echo "$tool is not installed: the container and deployment tests need it (apt-get install -y $pkg)" >&2
  fi
done
if ! command -v kubectl >/dev/null 2>&1; then
  echo "kubectl is not installed: tests/e2e/deploy-manifests.test.ts needs it (kubectl kustomize renders deploy/k8s)" >&2
fi
