#!/usr/bin/env bash
# ojsd against graphile-worker in one sitting, measured by one tool (ojsd-bench's /proc CPU of
# every postgres process, WAL position, latencies) and alternated round by round, since these
# machines drift 2-3x between sittings: only the ratios within a round mean anything.
#
#   bench/vs-graphile.sh [rounds] [ojsd binary] [ojsd-bench binary]
#
# OJSD_BINS="name:path name2:path2" measures several ojsd builds in each round instead (e.g. the
# commit before a change and after it), each against the same round's graphile-worker, in
# reversed order every other round (so neither build always runs first), and prints each
# build's ratios to the first one's. ONLY=w2-batched keeps the ojsd workloads whose arguments
# name it; GRAPHILE=0 leaves graphile-worker out (a before/after comparison only);
# SETUP_SQL_<name> is SQL run on each fresh database of build <name> before its workload.
#
# Each round, on fresh databases:
#   ojsd             w1-bulk (100k in batches of 1,000), w2-batched (4 x FETCH 500, batch ACK),
#                    w2-sdk as 16 x FETCH 100 with one ACK request per job, w3-latency (200/s,
#                    4 long-polling workers)
#   graphile-worker  graphile-drain (its add_jobs in batches of 1,000, then after VACUUM ANALYZE
#                    and CHECKPOINT a pool of 24 with a local queue of 500 and batched
#                    completion), graphile-latency (200/s, 4 concurrent jobs)
# and prints the ratios. graphile-worker comes from npm (`npm ci` in bench/graphile-worker, run
# here when node_modules is missing). JSON lines go to $OUT (default /tmp/vs-graphile.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
ojsd=${2:-target/release/ojsd}
bench=${3:-target/release/ojsd-bench}
out=${OUT:-/tmp/vs-graphile.jsonl}
pg=${PGURL:-postgres://postgres@127.0.0.1:5432}
port=${PORT:-18600}
[ -d bench/graphile-worker/node_modules ] || (cd bench/graphile-worker && npm ci --no-audit --no-fund)
: > "$out"

psql_() { psql "$pg/postgres" -qAtc "$1" >/dev/null; }

# One fresh database and server per ojsd workload, as the judging run drains "on a fresh
# database".
workloads=("--workloads w2-batched" "--workloads w1-bulk"
           "--workloads w2-sdk --sdk-workers 16 --sdk-fetch 100 --sdk-jobs 100000"
           "--workloads w3-latency --pollers 4")
if [ -n "${ONLY:-}" ]; then
    kept=()
    for spec in "${workloads[@]}"; do [[ $spec == *"$ONLY"* ]] && kept+=("$spec"); done
    workloads=("${kept[@]}")
fi
read -r -a bins <<< "${OJSD_BINS:-ojsd:$ojsd}"
for round in $(seq 1 "$rounds"); do
  order=("${bins[@]}")
  if (( round % 2 == 0 )); then
      order=(); for ((i = ${#bins[@]} - 1; i >= 0; i--)); do order+=("${bins[i]}"); done
  fi
  for named in "${order[@]}"; do
    side=${named%%:*}; ojsd=${named#*:}
    for spec in "${workloads[@]}"; do
        db="ojsd_vs_$round"
        psql_ "drop database if exists $db" && psql_ "create database $db"
        OJS_LISTEN_ADDR=127.0.0.1:$port DATABASE_URL="$pg/$db" OJS_LOG_LEVEL=warn "$ojsd" \
            >/tmp/vs-graphile-ojsd.log 2>&1 &
        pid=$!
        for _ in $(seq 1 100); do
            curl -sf "http://127.0.0.1:$port/ojs/manifest" >/dev/null && break
            sleep 0.1
        done
        # SETUP_SQL_<name> (the build's name, `-` as `_`) runs on its database first, e.g. rows
        # that make the server take another path.
        setup="SETUP_SQL_${side//-/_}"
        [ -n "${!setup:-}" ] && psql "$pg/$db" -qAtc "${!setup}" >/dev/null
        # shellcheck disable=SC2086
        "$bench" --url "http://127.0.0.1:$port" --database-url "$pg/$db" --ojsd-pid "$pid" $spec \
            | grep '^{' | sed "s/^{/{\"round\":$round,\"side\":\"$side\",/" >> "$out"
        kill "$pid"; wait "$pid" || true
        psql_ "drop database $db"
    done
  done

    [ "${GRAPHILE:-1}" = 0 ] && continue
    gdb="graphile_vs_$round"
    psql_ "drop database if exists $gdb" && psql_ "create database $gdb"
    "$bench" --url "http://127.0.0.1:1" --database-url "$pg/$gdb" --workloads graphile-drain,graphile-latency \
        --pollers 4 | grep '^{' | sed "s/^{/{\"round\":$round,\"side\":\"graphile\",/" >> "$out"
    psql_ "drop database $gdb"
done

python3 - "$out" "${bins[0]%%:*}" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first = sys.argv[2]
by = {}
for r in rows:
    by.setdefault((r["round"], r["side"]), {})[r["workload"]] = r
def f(x, k):
    return x.get(k) if x else None
def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"
print("round side | Postgres µs/job W2 (ratio) | W2 jobs/s (ratio) | W1 jobs/s (ratio) | SDK 16x100 jobs/s (÷ graphile W2) | WAL B/job W2 (ratio) | W3 p50/p99 ms (ratios)")
for (n, side), w in sorted(by.items()):
    if side == "graphile":
        continue
    g = by.get((n, "graphile"), {})
    o, s, l, b = w.get("w2-batched"), w.get("w2-sdk"), w.get("w3-latency"), w.get("w1-bulk")
    gd, gl = g.get("graphile-drain"), g.get("graphile-latency")
    print(f"{n} {side} | {f(o,'postgres_cpu_us_per_job')} vs {f(gd,'postgres_cpu_us_per_job')} ({ratio(f(o,'postgres_cpu_us_per_job'), f(gd,'postgres_cpu_us_per_job'))})"
          f" | {f(o,'jobs_per_s')} vs {f(gd,'jobs_per_s')} ({ratio(f(o,'jobs_per_s'), f(gd,'jobs_per_s'))})"
          f" | {f(b,'jobs_per_s')} vs {f(gd,'enqueue_jobs_per_s')} ({ratio(f(b,'jobs_per_s'), f(gd,'enqueue_jobs_per_s'))})"
          f" | {f(s,'jobs_per_s')} ({ratio(f(s,'jobs_per_s'), f(gd,'jobs_per_s'))})"
          f" | {f(o,'wal_bytes_per_job')} vs {f(gd,'wal_bytes_per_job')} ({ratio(f(o,'wal_bytes_per_job'), f(gd,'wal_bytes_per_job'))})"
          f" | {f(l,'p50_ms')}/{f(l,'p99_ms')} vs {f(gl,'p50_ms')}/{f(gl,'p99_ms')} ({ratio(f(l,'p50_ms'), f(gl,'p50_ms'))}/{ratio(f(l,'p99_ms'), f(gl,'p99_ms'))})")
sides = sorted({r["side"] for r in rows} - {"graphile", first})
for side in sides:
    print(f"{side} / {first}, per round: jobs/s and Postgres us/job ratios of each workload")
    for n in sorted({r["round"] for r in rows}):
        a, b = by.get((n, side), {}), by.get((n, first), {})
        cells = [f"{w} {ratio(f(a.get(w), 'jobs_per_s'), f(b.get(w), 'jobs_per_s'))}/"
                 f"{ratio(f(a.get(w), 'postgres_cpu_us_per_job'), f(b.get(w), 'postgres_cpu_us_per_job'))}"
                 for w in sorted(set(a) & set(b))]
        print(f"  {n}: " + ", ".join(cells))
EOF
