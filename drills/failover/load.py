#!/usr/bin/env python3
"""Load for the failover drill: producers and workers against ojsd replicas, and the count.

Producers enqueue without pause (alternating replicas) until the stop file appears; workers
fetch with a short reservation and ACK. Then the workers drain until every acknowledged
enqueue is completed (or the drain deadline passes), and the report says what was lost:

  enqueued_201      enqueues answered 201
  lost_enqueues     of those, jobs the server no longer knows (GET 404)
  acked_200         ACKs answered 200
  lost_acks         of those, jobs not `completed` at the end
  not_completed     acknowledged enqueues not completed at the end (claims never returned)
  redelivered       jobs handed to a worker more than once (at-least-once, expected near a failover)
  statuses          every answer by status (0: no answer at all); a 5xx other than 503 is a bug
  longest_write_gap_s  the longest time without a 201

With --replicas-file instead of --replicas, the replicas are the lines of that file, read
again whenever it changes: a drill that adds and removes replicas (the upgrade drill) edits it
as a load balancer would change its targets.

Standard library only.
"""

import argparse
import collections
import json
import os
import threading
import time
import urllib.error
import urllib.request


def call(base, method, path, body=None, timeout=15):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        base + path, data=data, method=method, headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"null")
        except ValueError:
            return e.code, None
    except Exception:
        return 0, None


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.accepted = {}  # id -> when
        self.statuses = collections.Counter()
        self.deliveries = collections.Counter()
        self.acked = set()

    def status(self, kind, status):
        with self.lock:
            self.statuses[f"{kind} {status}"] += 1


class Replicas:
    """The replicas to send to: a fixed list, or the lines of a file read again when it changes."""

    def __init__(self, fixed=None, path=None):
        self.fixed, self.path = fixed, path
        self.lock = threading.Lock()
        self.seen = None
        self.current = fixed or []

    def now(self):
        if self.path is None:
            return self.fixed
        with self.lock:
            try:
                stamp = os.stat(self.path).st_mtime_ns
                if stamp != self.seen:
                    with open(self.path) as f:
                        lines = [line.strip() for line in f if line.strip()]
                    if lines:
                        self.current, self.seen = lines, stamp
            except OSError:
                pass
            return list(self.current)

    def __getitem__(self, i):
        now = self.now()
        return now[i % len(now)]

    def __len__(self):
        return len(self.now())


def producer(n, replicas, stop_file, tally):
    seq = 0
    while not os.path.exists(stop_file):
        base = replicas[n + seq]
        status, body = call(base, "POST", "/ojs/v1/jobs",
                            {"type": "drill.job", "queue": "drill", "args": [n, seq]})
        tally.status("enqueue", status)
        if status == 201:
            with tally.lock:
                tally.accepted[body["job"]["id"]] = time.monotonic()
        elif status != 409:
            time.sleep(0.05)
        seq += 1


def worker(n, replicas, done, tally):
    name = f"drill-worker-{n}"
    while not done.is_set():
        # The replica is chosen again each round: one that left the list gets no new request.
        base = replicas[n]
        status, body = call(base, "POST", "/ojs/v1/workers/fetch",
                            {"queues": ["drill"], "worker_id": name, "count": 4,
                             "wait_ms": 1000, "visibility_timeout_ms": 5000})
        tally.status("fetch", status)
        if status != 200:
            time.sleep(0.1)
            continue
        for job in body.get("jobs", []):
            with tally.lock:
                tally.deliveries[job["id"]] += 1
            status, _ = call(base, "POST", "/ojs/v1/workers/ack",
                             {"job_id": job["id"], "worker_id": name, "result": {"ok": True}})
            tally.status("ack", status)
            if status == 200:
                with tally.lock:
                    tally.acked.add(job["id"])


def states(replicas, ids):
    found = collections.Counter()
    per_id = {}
    for i, job_id in enumerate(ids):
        status, body = call(replicas[i], "GET", f"/ojs/v1/jobs/{job_id}")
        state = body["job"]["state"] if status == 200 and "job" in body else f"http {status}"
        per_id[job_id] = state
        found[state] += 1
    return found, per_id


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", help="comma-separated base URLs")
    parser.add_argument("--replicas-file", help="a file of base URLs, one per line, read again when it changes")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--drain-seconds", type=int, default=120)
    args = parser.parse_args()
    if bool(args.replicas) == bool(args.replicas_file):
        parser.error("give --replicas or --replicas-file")
    replicas = (Replicas(fixed=args.replicas.split(",")) if args.replicas
                else Replicas(path=args.replicas_file))
    tally = Tally()
    done = threading.Event()
    producers = [threading.Thread(target=producer, args=(n, replicas, args.stop_file, tally))
                 for n in range(args.producers)]
    workers = [threading.Thread(target=worker, args=(n, replicas, done, tally), daemon=True)
               for n in range(args.workers)]
    for t in producers + workers:
        t.start()
    for t in producers:
        t.join()
    deadline = time.monotonic() + args.drain_seconds
    while time.monotonic() < deadline:
        with tally.lock:
            if set(tally.accepted) <= tally.acked:
                break
        time.sleep(0.5)
    done.set()
    for t in workers:
        t.join(timeout=20)

    ids = sorted(tally.accepted)
    found, per_id = states(replicas, ids)
    times = sorted(tally.accepted.values())
    gap = max((b - a for a, b in zip(times, times[1:])), default=0.0)
    report = {
        "enqueued_201": len(ids),
        "lost_enqueues": sum(1 for s in per_id.values() if s == "http 404"),
        "acked_200": len(tally.acked),
        "lost_acks": sum(1 for i in tally.acked if per_id.get(i, "completed") != "completed"),
        "not_completed": sum(1 for s in per_id.values() if s != "completed"),
        "redelivered": sum(1 for c in tally.deliveries.values() if c > 1),
        "final_states": dict(found),
        "statuses": dict(sorted(tally.statuses.items())),
        "longest_write_gap_s": round(gap, 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
