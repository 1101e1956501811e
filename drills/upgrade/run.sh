#!/usr/bin/env bash
# The upgrade drill: a rolling upgrade from an earlier release to this tree, under load, on one
# database, as a Kubernetes rolling update does it (docs/src/operations/upgrading.md):
#   1. a fresh database and two replicas of the earlier release (A, B); producers and workers
#      send to the replicas listed in a file, which the drill edits as a load balancer changes
#      its targets (drills/failover/load.py --replicas-file);
#   2. a replica of this tree (C) starts: it migrates the database under A and B, then joins;
#   3. A leaves the list, and after a pause (Kubernetes' pre-stop) gets SIGTERM;
#   4. a second new replica (D) starts and joins; B leaves and is stopped the same way;
#   5. the producers stop, the workers drain, and the load reports.
# It passes with no answer 5xx, no request left without an answer, no enqueue or ACK lost and
# every accepted job completed (redeliveries are allowed: delivery is at least once).
#
#   drills/upgrade/run.sh v0.1.0       # the earlier release: a tag or commit
#
# Settings: PREV_OJSD (a binary of that release; else it is built from a worktree, once, into
# ~/.cache/ojsd-drill/<rev>), OJSD (this tree's binary, default target/release/ojsd, built if
# missing), PROFILE (release or debug, for what it builds; default release), PHASE_SECONDS
# (load between steps, default 10), DRILL_PORT (default 6300: A..D on +1..+4), DRILL_DB
# (default ojsd_upgrade_drill on 127.0.0.1:5432), DRILL_DIR (default /tmp/ojsd-upgrade-drill).
set -euo pipefail
cd "$(dirname "$0")/../.."

PREV=${1:?usage: drills/upgrade/run.sh <earlier release tag or commit>}
PROFILE=${PROFILE:-release}
PHASE=${PHASE_SECONDS:-10}
PORT=${DRILL_PORT:-6300}
DB=${DRILL_DB:-ojsd_upgrade_drill}
DIR=${DRILL_DIR:-/tmp/ojsd-upgrade-drill}
URL="postgres://postgres@127.0.0.1:5432/$DB"
FLAG=""; [ "$PROFILE" = release ] && FLAG="--release"

say() { printf '\n== %s (%s)\n' "$*" "$(date +%T)"; }

PREV_REV=$(git rev-parse --verify "$PREV^{commit}")
if [ -z "${PREV_OJSD:-}" ]; then
  CACHE="$HOME/.cache/ojsd-drill/$PREV_REV"
  PREV_OJSD="$CACHE/target/$PROFILE/ojsd"
  if [ ! -x "$PREV_OJSD" ]; then
    say "building $PREV ($PREV_REV) into $CACHE"
    mkdir -p "$CACHE"
    [ -d "$CACHE/src" ] || git worktree add --detach "$CACHE/src" "$PREV_REV" >/dev/null
    (cd "$CACHE/src" && SQLX_OFFLINE=true CARGO_TARGET_DIR="$CACHE/target" cargo build -q $FLAG --bin ojsd)
  fi
fi
OJSD=${OJSD:-target/$PROFILE/ojsd}
[ -x "$OJSD" ] || SQLX_OFFLINE=true cargo build -q $FLAG --bin ojsd
echo "earlier release: $PREV_OJSD ($("$PREV_OJSD" --version 2>/dev/null || echo "$PREV"))"
echo "this tree:       $OJSD ($(git describe --tags --always --dirty))"

declare -A PIDS
cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  [ "${KEEP:-0}" = 1 ] || rm -rf "$DIR"
}
trap cleanup EXIT
rm -rf "$DIR"; mkdir -p "$DIR"
psql -h 127.0.0.1 -U postgres -qAt -c "drop database if exists $DB with (force)"

start() { # name binary: a replica on its port; waits until it is ready
  local name=$1 bin=$2 port
  port=$((PORT + $(printf '%d' "'$name") - 64))
  env DATABASE_URL="$URL" OJS_LISTEN_ADDR="127.0.0.1:$port" OJS_INSTANCE_ID="drill-$name" \
    OJS_AUTH=disabled RUST_LOG=warn "$bin" >"$DIR/ojsd-$name.log" 2>&1 &
  PIDS[$name]=$!
  for _ in $(seq 240); do curl -sf "http://127.0.0.1:$port/ready" >/dev/null && break; sleep 0.5; done
  curl -sf "http://127.0.0.1:$port/ready" >/dev/null || { echo "$name never became ready"; cat "$DIR/ojsd-$name.log"; exit 1; }
  echo "http://127.0.0.1:$port" >>"$DIR/replicas"
  echo "$name serving on $port ($bin)"
}
leave_and_stop() { # name: out of the list, a pause, SIGTERM, and its exit awaited
  local name=$1 port
  port=$((PORT + $(printf '%d' "'$name") - 64))
  grep -v ":$port\$" "$DIR/replicas" >"$DIR/replicas.next"; mv "$DIR/replicas.next" "$DIR/replicas"
  sleep 3
  kill -TERM "${PIDS[$name]}"
  local started=$SECONDS
  wait "${PIDS[$name]}" || true
  unset "PIDS[$name]"
  echo "$name stopped $((SECONDS - started)) s after SIGTERM"
}
migrations() { psql -h 127.0.0.1 -U postgres -d "$DB" -qAt -c "select count(*) || ' migrations, newest V' || max(version) from refinery_schema_history"; }

say "two replicas of $PREV"
: >"$DIR/replicas"
start A "$PREV_OJSD"
start B "$PREV_OJSD"
echo "schema: $(migrations)"

say "load: 4 producers, 4 workers"
python3 drills/failover/load.py --replicas-file "$DIR/replicas" --stop-file "$DIR/stop" \
  >"$DIR/report.json" 2>"$DIR/load.log" &
LOAD=$!
sleep "$PHASE"

say "C, of this tree, starts (it migrates under A and B)"
start C "$OJSD"
echo "schema: $(migrations)"
sleep "$PHASE"

say "A leaves and stops"
leave_and_stop A
sleep "$PHASE"

say "D, of this tree, starts"
start D "$OJSD"
sleep "$PHASE"

say "B leaves and stops"
leave_and_stop B
sleep "$PHASE"

say "stopping the producers; draining"
touch "$DIR/stop"
wait "$LOAD"
say "report"
cat "$DIR/report.json"
python3 - "$DIR/report.json" "$PREV" "$(git describe --tags --always --dirty)" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
errors = {k: v for k, v in r["statuses"].items() if k.split()[1].startswith("5")}
unanswered = {k: v for k, v in r["statuses"].items() if k.split()[1] == "0"}
ok = (r["lost_enqueues"] == 0 and r["lost_acks"] == 0 and r["not_completed"] == 0
      and not errors and not unanswered)
print("drill:", "PASSED" if ok else "FAILED",
      f"- {sys.argv[2]} -> {sys.argv[3]}: {r['enqueued_201']} enqueued, {r['lost_enqueues']} lost; "
      f"{r['acked_200']} acked, {r['lost_acks']} acks lost; {r['not_completed']} not completed; "
      f"{r['redelivered']} redelivered; 5xx: {errors or 'none'}; unanswered: {unanswered or 'none'}; "
      f"longest write gap {r['longest_write_gap_s']} s")
sys.exit(0 if ok else 1)
PY
