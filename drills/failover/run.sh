#!/usr/bin/env bash
# The failover drill: three PostgreSQL nodes on loopback under Patroni, with etcd as its store
# and synchronous replication (Patroni's synchronous_mode: a primary's commit waits for one
# standby, and only that standby may be promoted), two ojsd replicas given all three hosts,
# producers and workers enqueueing and acknowledging throughout. Then:
#   1. the primary is killed (its Patroni and its postmaster, SIGKILL: a node crash) — Patroni
#      promotes the synchronous standby once the leader key expires;
#   2. the crashed node is started again and rejoins as a standby (pg_rewind if needed);
#   3. the new primary's Postgres is frozen (SIGSTOP on its postmaster and every backend, the
#      host alive: no TCP timer notices) — its Patroni cannot renew the leader key, the key
#      expires and the synchronous standby is promoted; later the frozen node is fenced (its
#      Patroni and Postgres killed, as a watchdog would) while the load goes on.
# The load's report counts what was lost: enqueues answered 201 and gone, ACKs answered 200 and
# not completed, claims that never came back, redeliveries, and every answer by status; the
# drill fails on any loss or on a 5xx other than 503.
#
#   drills/failover/run.sh            # ~3 minutes; installs patroni and etcd from apt if missing
#
# Settings: DRILL_DIR (default /tmp/ojsd-failover-drill, removed at the end unless KEEP=1),
# DRILL_PORT (first of the ports used, default 6100: etcd +90/+91, nodes +1..+3, their REST
# APIs +11..+13, ojsd +81/+82), OJSD (default target/release/ojsd, built if missing),
# PHASE_SECONDS (load between faults, default 15), TTL (Patroni's leader key TTL, default 20).
set -euo pipefail
cd "$(dirname "$0")/../.."

DIR=${DRILL_DIR:-/tmp/ojsd-failover-drill}
PORT=${DRILL_PORT:-6100}
OJSD=${OJSD:-target/release/ojsd}
PHASE=${PHASE_SECONDS:-15}
TTL=${TTL:-20}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)

say() { printf '\n== %s (%s)\n' "$*" "$(date +%T)"; }

if ! command -v patroni >/dev/null || ! command -v etcd >/dev/null; then
  say "installing patroni and etcd"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q patroni etcd-server >/dev/null
fi
[ -x "$OJSD" ] || cargo build --release --bin ojsd

# Patroni and PostgreSQL refuse root: run them as `postgres` then.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  pkill -9 -f "patroni $DIR/" 2>/dev/null || true
  pkill -CONT -f "postgres -D $DIR" 2>/dev/null || true
  pkill -9 -f "postgres -D $DIR" 2>/dev/null || true
  pkill -9 -f "etcd --data-dir $DIR" 2>/dev/null || true
  [ "${KEEP:-0}" = 1 ] || rm -rf "$DIR"
}
trap cleanup EXIT
KEEP=0 cleanup
mkdir -p "$DIR"
[ "$(id -u)" != 0 ] || chown postgres "$DIR"

say "etcd"
as_pg etcd --data-dir "$DIR/etcd" --name drill \
  --listen-client-urls "http://127.0.0.1:$((PORT + 90))" \
  --advertise-client-urls "http://127.0.0.1:$((PORT + 90))" \
  --listen-peer-urls "http://127.0.0.1:$((PORT + 91))" \
  --initial-advertise-peer-urls "http://127.0.0.1:$((PORT + 91))" \
  --initial-cluster "drill=http://127.0.0.1:$((PORT + 91))" >"$DIR/etcd.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 30); do
  etcdctl --endpoints "127.0.0.1:$((PORT + 90))" endpoint health >/dev/null 2>&1 && break
  sleep 0.5
done

node_config() { # node number -> its Patroni configuration
  local n=$1
  cat <<YAML
scope: ojsd-drill
name: node$n
log: {level: INFO}
restapi:
  listen: 127.0.0.1:$((PORT + 10 + n))
  connect_address: 127.0.0.1:$((PORT + 10 + n))
etcd3:
  host: 127.0.0.1:$((PORT + 90))
bootstrap:
  dcs:
    ttl: $TTL
    loop_wait: 1
    retry_timeout: 5
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_log_hints: 'on'
        max_connections: 200
  initdb: [{encoding: UTF8}, {locale: C}]
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$((PORT + n))
  connect_address: 127.0.0.1:$((PORT + n))
  data_dir: $DIR/node$n
  bin_dir: $PGBIN
  pgpass: $DIR/pgpass$n
  authentication:
    superuser: {username: postgres}
    replication: {username: postgres}
    rewind: {username: postgres}
  parameters:
    unix_socket_directories: '$DIR'
YAML
}

start_node() {
  node_config "$1" >"$DIR/node$1.yml"
  as_pg patroni "$DIR/node$1.yml" >>"$DIR/node$1.log" 2>&1 &
  PIDS+=($!)
}

say "three nodes under Patroni"
for n in 1 2 3; do start_node "$n"; done
members() { patronictl -c "$DIR/node1.yml" list -f json 2>/dev/null || echo '[]'; }
role_of() { # role -> member names holding it
  members | python3 -c "import json,sys; print(' '.join(m['Member'] for m in json.load(sys.stdin) if m['Role'] == sys.argv[1] and m['State'] in ('running', 'streaming')))" "$1"
}
primary() { role_of Leader; }
for _ in $(seq 120); do
  [ -n "$(primary)" ] && [ -n "$(role_of 'Sync Standby')" ] && [ "$(members | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 3 ] && break
  sleep 1
done
patronictl -c "$DIR/node1.yml" list
URL="postgres://postgres@127.0.0.1:$((PORT + 1)),127.0.0.1:$((PORT + 2)),127.0.0.1:$((PORT + 3))/ojs?target_session_attrs=read-write"
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
  for _ in $(seq 240); do
    now=$(primary)
    if [ -n "$now" ] && [ "$now" != "$old" ]; then
      echo "$now is primary, $((SECONDS - started)) s after the fault"
      return
    fi
    sleep 0.5
  done
  echo "no new primary within 120 s"; patronictl -c "$DIR/node1.yml" list; exit 1
}
patroni_pid() { pgrep -f "patroni $DIR/$1.yml" || true; }
postgres_pids() { # postmaster of node $1 and its children
  local pm; pm=$(head -1 "$DIR/$1/postmaster.pid" 2>/dev/null || true)
  [ -z "$pm" ] || { echo "$pm"; pgrep -P "$pm" || true; }
}

FIRST=$(primary)
say "killing the primary, $FIRST (SIGKILL on its Patroni and postmaster)"
kill -9 $(patroni_pid "$FIRST") $(postgres_pids "$FIRST")
wait_for_new_primary "$FIRST"
sleep "$PHASE"

say "the crashed node comes back ($FIRST rejoins as a standby)"
start_node "${FIRST#node}"
for _ in $(seq 120); do
  members | grep -q "\"Member\": \"$FIRST\", [^}]*\"State\": \"\(streaming\|running\)\"" && break
  sleep 1
done
patronictl -c "$DIR/node1.yml" list

SECOND=$(primary)
# Its Postgres freezes on a live host (its Patroni runs on and finds its server silent): the
# case no TCP timer catches, since the host's kernel still acknowledges every packet.
say "freezing the new primary's Postgres, $SECOND (SIGSTOP on its postmaster and backends)"
FROZEN=$(postgres_pids "$SECOND")
kill -STOP $FROZEN
wait_for_new_primary "$SECOND"
sleep "$PHASE"
# Fenced as a watchdog would: a Patroni stuck on its frozen server that comes back acts on
# the cluster as it last saw it (in a run without this, the thawed node took the leader key
# back from the promoted one, which demoted itself), which is why Patroni wants a watchdog.
say "fencing the frozen node, $SECOND (SIGKILL on its Patroni and its frozen Postgres)"
kill -9 $(patroni_pid "$SECOND") $FROZEN
sleep 5

say "stopping the producers; draining"
touch "$STOP"
wait "$LOAD"
patronictl -c "$DIR/node1.yml" list || true
say "report"
cat "$DIR/report.json"
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
