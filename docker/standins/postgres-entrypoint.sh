#!/bin/sh
# The official image's contract, in short: on an empty $PGDATA create the cluster with
# $POSTGRES_USER as superuser (password $POSTGRES_PASSWORD, required) and the database
# $POSTGRES_DB, accept password logins over the network, then run the server as user postgres.
set -eu
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
: "${PGDATA:=/var/lib/postgresql/data}"
# setpriv execs (no parent left behind), so the server is PID 1 and gets `docker stop`'s signal
as_postgres() { if [ "$(id -u)" = 0 ]; then setpriv --reuid=postgres --regid=postgres --init-groups "$@"; else "$@"; fi; }

if [ "${1:-postgres}" != postgres ]; then exec "$@"; fi
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" && chown postgres:postgres "$PGDATA" && chmod 700 "$PGDATA"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "postgres: POSTGRES_PASSWORD is not set (the official image refuses to start without it too)" >&2
    exit 1
  fi
  pwfile=$(mktemp) && printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile" && chown postgres "$pwfile"
  as_postgres initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 -E UTF8 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    as_postgres psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres -q \
      -c "CREATE DATABASE \"$POSTGRES_DB\"" 
    as_postgres pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  fi
  echo "postgres: initialized $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
shift || true
exec_as_postgres() { if [ "$(id -u)" = 0 ]; then exec setpriv --reuid=postgres --regid=postgres --init-groups "$@"; fi; exec "$@"; }
exec_as_postgres postgres -D "$PGDATA" -c listen_addresses='*' "$@"
