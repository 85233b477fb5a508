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
