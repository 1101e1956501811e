#!/usr/bin/env bash
# Regenerates migrations/schema.sql, the schema as the migrations leave it.
#
#   migrations/snapshot.sh           rewrite migrations/schema.sql (only if it changed)
#   migrations/snapshot.sh --check   exit 1, printing a diff, if migrations/schema.sql is stale
#
# Migrates a scratch database with `cargo run -q -p ojsd-migrate`, dumps its schema with
# pg_dump, removes what differs between machines and pg_dump builds, and drops the database.
# Connects to PGHOST:PGPORT as PGUSER (default 127.0.0.1:5432, postgres), without a password
# unless PGPASSWORD or ~/.pgpass gives one. Works from any directory.
set -euo pipefail

MODE=write
case "${1:-}" in
    "") ;;
    --check) MODE=check ;;
    -h | --help)
        sed -n '2,10s/^# \{0,1\}//p' "$0"
        exit 0
        ;;
    *)
        echo "usage: $0 [--check]" >&2
        exit 2
        ;;
esac

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SNAPSHOT="$ROOT/migrations/schema.sql"

export PGHOST="${PGHOST:-127.0.0.1}"
export PGPORT="${PGPORT:-5432}"
export PGUSER="${PGUSER:-postgres}"
SCRATCH_DB="ojsd_schema_snapshot_$$"

psql_admin() { PGOPTIONS="-c client_min_messages=warning" psql -d postgres -v ON_ERROR_STOP=1 -qAt "$@"; }

WORK=$(mktemp -d)
cleanup() {
    psql_admin -c "drop database if exists $SCRATCH_DB with (force)" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

psql_admin -c "drop database if exists $SCRATCH_DB with (force)" >/dev/null
psql_admin -c "create database $SCRATCH_DB" >/dev/null
(
    cd "$ROOT"
    DATABASE_URL="postgres://$PGUSER@$PGHOST:$PGPORT/$SCRATCH_DB?sslmode=disable" \
        cargo run -q -p ojsd-migrate 2>"$WORK/migrate.log"
) || {
    cat "$WORK/migrate.log" >&2
    exit 1
}

# refinery_schema_history is refinery's bookkeeping table (its DDL belongs to the refinery
# version, its rows to the database), so it is left out. So are the day partitions of
# ojs_job_done (ojs_job_done_YYYYMMDD): which days exist depends on the day the snapshot is
# taken (the default partition stays).
pg_dump --schema-only --no-owner --no-privileges \
    --exclude-table=public.refinery_schema_history \
    --exclude-table='public.ojs_job_done_2*' \
    -d "$SCRATCH_DB" >"$WORK/dump.sql"

PG_DUMP_MAJOR=$(pg_dump --version | sed -E 's/^[^0-9]*([0-9]+).*/\1/')

{
    cat <<EOF
-- migrations/schema.sql: the ojsd schema after every migration. GENERATED, do not edit.
--
-- The migrations (migrations/V*.sql) are the source of truth; this file only shows their
-- result in one place. Regenerate it after adding a migration:
--
--     migrations/snapshot.sh
--
-- which migrates a scratch database with \`cargo run -q -p ojsd-migrate\` and runs
-- \`pg_dump --schema-only --no-owner --no-privileges\` on it. Left out: refinery's own table
-- refinery_schema_history, the day partitions of ojs_job_done (ojs_job_done_YYYYMMDD, made by
-- date), and pg_dump's version lines and \\restrict keys. CI fails when this
-- file is stale (\`migrations/snapshot.sh --check\`).
-- Written by pg_dump $PG_DUMP_MAJOR; other major versions format some statements differently.

EOF
    # pg_dump's header names the exact server and pg_dump versions, and since 15.14/16.10/17.6
    # it brackets the dump in \restrict / \unrestrict with a random key: both vary per run or
    # per machine. Consecutive blank lines left behind are squeezed.
    grep -v -E '^-- Dumped (from database|by pg_dump) version |^\\(un)?restrict ' "$WORK/dump.sql" |
        cat -s
} >"$WORK/schema.sql"

if [ "$MODE" = check ]; then
    if ! diff -u --label "migrations/schema.sql (committed)" --label "migrations/schema.sql (from the migrations)" \
        "$SNAPSHOT" "$WORK/schema.sql"; then
        echo "migrations/schema.sql is stale: run migrations/snapshot.sh and commit the result." >&2
        exit 1
    fi
    echo "migrations/schema.sql is up to date"
elif [ -f "$SNAPSHOT" ] && cmp -s "$WORK/schema.sql" "$SNAPSHOT"; then
    # Not rewritten: a new mtime would make Cargo rebuild ojsd-migrate (its build script
    # watches this folder).
    echo "migrations/schema.sql is up to date"
else
    cp "$WORK/schema.sql" "$SNAPSHOT"
    echo "wrote migrations/schema.sql"
fi
