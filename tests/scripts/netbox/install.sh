#!/usr/bin/env bash
# Installs a real NetBox for fleetd's tests and lab, cached so that later starts take seconds:
#   1. Debian packages: PostgreSQL (server + ltree, bundled), Redis, libpq-dev + a C compiler (psycopg[c]);
#   2. a venv on Python >= 3.12 (pyenv) with netbox==$NETBOX_VERSION from PyPI;
#   3. a migrated PostgreSQL data directory ("template") with an admin user and a v2 API token.
# Everything lands in $FLEETD_CACHE/netbox/<version>-py<python>/ (default ~/.cache/fleetd). The TypeScript
# harness (tests/src/harness/netbox.ts) copies the template per run and starts PostgreSQL, Redis, NetBox and
# its RQ worker on loopback ports of its own. Safe to run concurrently (flock) and again (each step is skipped
# when done). Prints the cache directory on stdout.
set -euo pipefail

NETBOX_VERSION="${NETBOX_VERSION:-4.7.3}"
PYTHON_VERSION="${NETBOX_PYTHON:-3.12}"
CACHE_ROOT="${FLEETD_CACHE:-$HOME/.cache/fleetd}/netbox"
DIR="$CACHE_ROOT/$NETBOX_VERSION-py$PYTHON_VERSION"
HERE="$(cd "$(dirname "$0")" && pwd)"

log() { printf '\033[1m[netbox-install]\033[0m %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

mkdir -p "$DIR"
exec 9>"$CACHE_ROOT/.lock-$NETBOX_VERSION-py$PYTHON_VERSION"
flock 9

if [ -f "$DIR/template/READY" ] && [ -x "$DIR/venv/bin/netbox" ]; then
  echo "$DIR"; exit 0
fi

# ---- 1. Debian packages ------------------------------------------------------------------------------------
DEBS=(postgresql redis-server libpq-dev build-essential)
missing=()
for p in "${DEBS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
PG_BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
[ -x "$PG_BIN/postgres" ] || die "PostgreSQL server binaries not found under /usr/lib/postgresql"
PG_MAJOR="$(basename "$(dirname "$PG_BIN")")"
[ "$PG_MAJOR" -ge 15 ] || die "NetBox $NETBOX_VERSION needs PostgreSQL >= 15, found $PG_MAJOR"

# ---- 2. Python venv with NetBox ----------------------------------------------------------------------------
# shellcheck source=../find-python.sh
. "$(dirname "${BASH_SOURCE[0]}")/../find-python.sh"
if [ ! -x "$DIR/venv/bin/netbox" ]; then
  PY="$(find_python)"
  log "creating venv with $("$PY" --version) and installing netbox==$NETBOX_VERSION from PyPI"
  rm -rf "$DIR/venv"
  "$PY" -m venv "$DIR/venv"
  "$DIR/venv/bin/pip" install -q --disable-pip-version-check --upgrade pip >&2
  "$DIR/venv/bin/pip" install -q --disable-pip-version-check "netbox==$NETBOX_VERSION" >&2
fi
"$DIR/venv/bin/netbox" version >/dev/null 2>&1 || die "netbox CLI does not run from $DIR/venv"

# ---- 3. migrated template ------------------------------------------------------------------------------------
log "building the migrated template database (first start only; takes a few minutes)"
rm -rf "$DIR/template.tmp"
mkdir -p "$DIR/template.tmp"
T="$DIR/template.tmp"
RUN="$(mktemp -d /tmp/fleetd-netbox-template.XXXXXX)"
chmod 755 "$RUN"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$RUN"
}
trap cleanup EXIT

rand() { "$DIR/venv/bin/python" -c "import secrets,string,sys; a=string.ascii_letters+string.digits; print(''.join(secrets.choice(a) for _ in range(int(sys.argv[1]))))" "$1"; }
freeport() { "$DIR/venv/bin/python" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }

PG_USER_OPT=()
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || die "user postgres missing (Debian's postgresql package creates it)"
  PG_USER_OPT=(setpriv --reuid=postgres --regid=postgres --init-groups)
fi
DB_PASSWORD="$(rand 32)"
ADMIN_PASSWORD="$(rand 24)"
TOKEN_KEY="$(rand 12)"
TOKEN_PLAIN="$(rand 40)"
PEPPER="$(rand 64)"
SECRET_KEY="$(rand 60)"
# PostgreSQL runs as "postgres" when we are root, and cannot enter $HOME (0700): build the data directory
# under /tmp and move it into the cache afterwards (runs copy it back out to a directory of their own).
PGDATA="$RUN/pgdata"
mkdir -p "$PGDATA"
printf '%s\n' "$DB_PASSWORD" > "$RUN/pwfile"
if [ "$(id -u)" -eq 0 ]; then chown -R postgres:postgres "$RUN"; fi
chmod 700 "$PGDATA"
"${PG_USER_OPT[@]}" "$PG_BIN/initdb" -D "$PGDATA" -U netbox --pwfile="$RUN/pwfile" --auth=scram-sha-256 \
  -E UTF8 --locale=C.UTF-8 >"$RUN/initdb.log" 2>&1 || { cat "$RUN/initdb.log" >&2; die "initdb failed"; }
rm -f "$RUN/pwfile"
PG_PORT="$(freeport)"
"${PG_USER_OPT[@]}" "$PG_BIN/postgres" -D "$PGDATA" -p "$PG_PORT" -c listen_addresses=127.0.0.1 \
  -c unix_socket_directories="$RUN" -c fsync=off -c full_page_writes=off -c synchronous_commit=off >"$RUN/pg.log" 2>&1 &
PIDS+=($!)
REDIS_PORT="$(freeport)"
REDIS_PASSWORD="$(rand 32)"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$RUN" --requirepass "$REDIS_PASSWORD" >"$RUN/redis.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do
  PGPASSWORD="$DB_PASSWORD" "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U netbox -d postgres -qtAc 'select 1' >/dev/null 2>&1 && break
  sleep 0.2
done
PGPASSWORD="$DB_PASSWORD" "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U netbox -d postgres -qc 'CREATE DATABASE netbox' >&2

cat > "$T/secrets.json" <<JSON
{
  "netboxVersion": "$NETBOX_VERSION",
  "pythonVersion": "$PYTHON_VERSION",
  "pgBin": "$PG_BIN",
  "dbUser": "netbox",
  "dbName": "netbox",
  "dbPassword": "$DB_PASSWORD",
  "adminUser": "admin",
  "adminPassword": "$ADMIN_PASSWORD",
  "tokenKey": "$TOKEN_KEY",
  "tokenPlaintext": "$TOKEN_PLAIN",
  "pepper": "$PEPPER",
  "secretKey": "$SECRET_KEY"
}
JSON
NBROOT="$RUN/root"
mkdir -p "$NBROOT"/{media,reports,scripts,static}
export NETBOX_ROOT="$NBROOT" PYTHONPATH="$HERE" NETBOX_CONFIGURATION=fleetd_configuration
export FLEETD_NB_DB_PORT="$PG_PORT" FLEETD_NB_DB_PASSWORD="$DB_PASSWORD" FLEETD_NB_REDIS_PORT="$REDIS_PORT" \
  FLEETD_NB_REDIS_PASSWORD="$REDIS_PASSWORD" FLEETD_NB_SECRET_KEY="$SECRET_KEY" FLEETD_NB_PEPPER="$PEPPER"
NB="$DIR/venv/bin/netbox"
start=$(date +%s)
"$NB" upgrade --no-input --skip-static >"$RUN/upgrade.log" 2>&1 || { tail -40 "$RUN/upgrade.log" >&2; die "netbox upgrade failed"; }
log "migrations done in $(( $(date +%s) - start )) s"
DJANGO_SUPERUSER_PASSWORD="$ADMIN_PASSWORD" "$NB" createsuperuser --no-input --username admin --email admin@fleetd.invalid >&2
"$NB" shell -c "
from users.models import Token, User
u = User.objects.get(username='admin')
Token.objects.create(user=u, version=2, key='$TOKEN_KEY', token='$TOKEN_PLAIN', write_enabled=True, description='fleetd test harness')
" >&2

kill "${PIDS[0]}"; wait "${PIDS[0]}" 2>/dev/null || true   # clean PostgreSQL shutdown: the data dir is the template
kill "${PIDS[1]}"; wait "${PIDS[1]}" 2>/dev/null || true
PIDS=()
mv "$PGDATA" "$T/pgdata"
touch "$T/READY"
rm -rf "$DIR/template"
mv "$T" "$DIR/template"
log "template ready in $DIR"
echo "$DIR"
