#!/usr/bin/env bash
# The failover drill: three PostgreSQL 15 nodes on loopback under pg_auto_failover (a monitor,
# a primary and two standbys, synchronous replication: ANY 1), two ojsd replicas given all
# three hosts, producers and workers enqueueing and acknowledging throughout. The primary is
# killed (its keeper and postmaster, SIGKILL: a node crash) and the monitor promotes a standby;
# the crashed node comes back as a standby. With FREEZE=1 the new primary's Postgres is then
# frozen (SIGSTOP on its postmaster and backends) and the monitor is waited for to promote
# another -- which pg_auto_failover 2.0 did not do within 2 minutes, with or without its keeper
# frozen too (see the README); ojsd's side of a frozen primary is tested in
# tests/integration/failover.rs, where the standby is promoted by hand. The load's report
# counts what was lost: enqueues answered 201 and gone, ACKs answered 200 and not completed,
# claims that never came back, redeliveries, and every answer by status.
#
#   drills/failover/run.sh            # ~3 minutes; installs pg_auto_failover from apt if missing
#
# Settings: DRILL_DIR (default /tmp/ojsd-failover-drill, removed at the end unless KEEP=1),
# DRILL_PORT (first of five ports, default 6100), OJSD (default target/release/ojsd, built if
# missing), PHASE_SECONDS (load between faults, default 15), FREEZE=1 (the freeze phase).
set -euo pipefail
cd "$(dirname "$0")/../.."

DIR=${DRILL_DIR:-/tmp/ojsd-failover-drill}
PORT=${DRILL_PORT:-6100}
OJSD=${OJSD:-target/release/ojsd}
PHASE=${PHASE_SECONDS:-15}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)

say() { printf '\n== %s (%s)\n' "$*" "$(date +%T)"; }

if ! command -v pg_autoctl >/dev/null; then
  say "installing pg_auto_failover"
  major=$(basename "$(dirname "$PGBIN")")
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "postgresql-$major-auto-failover" pg-auto-failover-cli >/dev/null
fi
[ -x "$OJSD" ] || cargo build --release --bin ojsd

# pg_autoctl and PostgreSQL refuse root: run them as `postgres` then.
export XDG_CONFIG_HOME=$DIR/xdg/config XDG_DATA_HOME=$DIR/xdg/data XDG_RUNTIME_DIR=$DIR/xdg/run
as_pg() {
  local env=(env "XDG_CONFIG_HOME=$XDG_CONFIG_HOME" "XDG_DATA_HOME=$XDG_DATA_HOME"
             "XDG_RUNTIME_DIR=$XDG_RUNTIME_DIR" "PATH=$PGBIN:$PATH")
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "${env[@]}" "$@"; else "${env[@]}" "$@"; fi
}

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  pkill -9 -f "pg_autoctl.*$DIR" 2>/dev/null || true
  pkill -CONT -f "postgres -D $DIR" 2>/dev/null || true
  pkill -9 -f "postgres -D $DIR" 2>/dev/null || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$DIR"
}
trap cleanup EXIT
cleanup
mkdir -p "$DIR"
[ "$(id -u)" != 0 ] || chown postgres "$DIR"
as_pg mkdir -p "$XDG_CONFIG_HOME" "$XDG_DATA_HOME" "$XDG_RUNTIME_DIR"

say "monitor and three nodes"
as_pg pg_autoctl create monitor --pgdata "$DIR/monitor" --pgport "$PORT" --hostname 127.0.0.1 \
  --auth trust --no-ssl >"$DIR/monitor.log" 2>&1
as_pg pg_autoctl run --pgdata "$DIR/monitor" >>"$DIR/monitor.log" 2>&1 &
PIDS+=($!)
MONITOR=postgres://autoctl_node@127.0.0.1:$PORT/pg_auto_failover
for n in 1 2 3; do
  as_pg pg_autoctl create postgres --pgdata "$DIR/node$n" --pgport $((PORT + n)) \
    --hostname 127.0.0.1 --name "node$n" --dbname ojs --monitor "$MONITOR" --auth trust \
    --no-ssl >"$DIR/node$n.log" 2>&1
  as_pg pg_autoctl run --pgdata "$DIR/node$n" >>"$DIR/node$n.log" 2>&1 &
  PIDS+=($!)
  # Each node joins once the one before it is up.
  for _ in $(seq 60); do
    as_pg pg_autoctl show state --pgdata "$DIR/monitor" 2>/dev/null | grep -q "node$n .*| *\(primary\|secondary\) *| *\(primary\|secondary\)$" && break
    sleep 1
  done
done
state() { as_pg pg_autoctl show state --pgdata "$DIR/monitor" 2>/dev/null; }
primary() { state | awk -F'|' '$6 ~ /primary/ && $7 ~ /primary/ {gsub(/ /, "", $1); print $1}'; }
state
URL=$(as_pg pg_autoctl show uri --pgdata "$DIR/monitor" --formation default | sed 's/sslmode=prefer/sslmode=disable/; s|^postgres://|postgres://postgres@|')
echo "ojsd's DATABASE_URL: $URL"

say "two ojsd replicas"
for r in 1 2; do
  env DATABASE_URL="$URL" OJS_LISTEN_ADDR=127.0.0.1:$((PORT + 80 + r)) OJS_INSTANCE_ID="drill-$r" \
    OJS_DB_ACQUIRE_TIMEOUT_MS=1000 RUST_LOG=info "$OJSD" >"$DIR/ojsd-$r.log" 2>&1 &
  PIDS+=($!)
done
for r in 1 2; do
  for _ in $(seq 60); do curl -sf "http://127.0.0.1:$((PORT + 80 + r))/ready" >/dev/null && break; sleep 0.5; done
done

say "load: 4 producers, 4 workers"
STOP=$DIR/stop
python3 drills/failover/load.py --replicas "http://127.0.0.1:$((PORT + 81)),http://127.0.0.1:$((PORT + 82))" \
  --stop-file "$STOP" >"$DIR/report.json" 2>"$DIR/load.log" &
LOAD=$!
sleep "$PHASE"

wait_for_new_primary() {
  local old=$1 started=$SECONDS now
  for _ in $(seq 120); do
    now=$(primary)
    if [ -n "$now" ] && [ "$now" != "$old" ]; then
      echo "$now is primary, $((SECONDS - started)) s after the fault"
      return
    fi
    sleep 1
  done
  echo "no new primary within 120 s"; state; exit 1
}
keeper_pids() { pgrep -f "pg_autoctl.*$DIR/$1\b" || true; }
postgres_pids() { # postmaster of node $1 and its children
  local pm; pm=$(head -1 "$DIR/$1/postmaster.pid" 2>/dev/null || true)
  [ -z "$pm" ] || { echo "$pm"; pgrep -P "$pm" || true; }
}

FIRST=$(primary)
say "killing the primary, $FIRST (SIGKILL on its keeper and postmaster)"
kill -9 $(keeper_pids "$FIRST") $(postgres_pids "$FIRST")
wait_for_new_primary "$FIRST"
sleep "$PHASE"

say "the crashed node comes back ($FIRST rejoins as a standby)"
as_pg pg_autoctl run --pgdata "$DIR/$FIRST" >>"$DIR/$FIRST.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 120); do
  state | grep -q "^ *$FIRST .*| *secondary *| *secondary$" && break
  sleep 1
done
state

if [ "${FREEZE:-0}" = 1 ]; then
SECOND=$(primary)
# Its Postgres freezes on a live host (the keeper runs on and sees its server stop answering):
# the case no TCP timer catches, since the host's kernel still acknowledges every packet.
say "freezing the new primary's Postgres, $SECOND (SIGSTOP on its postmaster and backends)"
FROZEN=$(postgres_pids "$SECOND")
kill -STOP $FROZEN
wait_for_new_primary "$SECOND"
sleep "$PHASE"
fi

say "stopping the producers; draining"
touch "$STOP"
wait "$LOAD"
[ -z "${FROZEN:-}" ] || kill -9 $FROZEN 2>/dev/null || true
state
say "report"
cat "$DIR/report.json"
grep -h '"level":"WARN"\|WARN' "$DIR"/ojsd-*.log | grep -c "following the database" | sed 's/^/ojsd "following the database" warnings: /'
python3 - "$DIR/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
bad5xx = {k: v for k, v in r["statuses"].items() if k.split()[1].startswith("5") and k.split()[1] != "503"}
ok = r["lost_enqueues"] == 0 and r["lost_acks"] == 0 and r["not_completed"] == 0 and not bad5xx
print("drill:", "PASSED" if ok else "FAILED",
      f"- {r['enqueued_201']} enqueued, {r['lost_enqueues']} lost; {r['acked_200']} acked, "
      f"{r['lost_acks']} acks lost; {r['not_completed']} not completed; {r['redelivered']} redelivered; "
      f"longest write gap {r['longest_write_gap_s']} s; 5xx other than 503: {bad5xx or 'none'}")
sys.exit(0 if ok else 1)
PY
