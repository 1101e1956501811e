"""Schemathesis hooks of the API fuzzing step of .ci/run: a refused request changes no stored data.

Before every request the hook fingerprints each table of the server's database (its row count
and the sum of a 64-bit hash of each row); after a 4xx answer the check fingerprints them again
and fails, naming the tables, when any differs. The fuzzed server runs with OJS_MAINTENANCE=false so that nothing
but requests writes: no promotion, reaping, expiry, pruning or leader lease renewal.

Left out of the fingerprint:
- `ojs_dispatch_second`: per-second dispatch counts, written by a background flusher about a
  second after a successful FETCH, so they may land during any later request;
- `ojs_listener`: each replica's listener registration, renewed by its ping every 2 s;
- `refinery_schema_history`: the migrations, written at start only.

Generated identifiers almost never name anything, so most requests would only meet "not found".
Every SEED_EVERY requests the hook makes real things through the API (jobs available, scheduled,
active under a registered worker, completed, dead-lettered and cancelled, and a cron entry), and
before each request it puts their ids, at random, in the request's path parameters (`id`,
`worker_id`, `name`; an entry's name on the cron routes) and in
its body's `job_id`, `worker_id` and `id` fields, so that refusals of real jobs in every state are
fuzzed too. The randomness is seeded: the same seed makes the same choices.

The database comes from OJS_FUZZ_DATABASE_URL, the API from OJS_FUZZ_BASE_URL, and the key the
hook sends (the fuzzed server requires one) from OJS_FUZZ_KEY. Requests are sent one at a time
(`--workers 1`), so the fingerprint taken before a request is the state that request found.
"""

from __future__ import annotations

import base64
import json
import os
import random
from datetime import datetime, timedelta, timezone

import psycopg
import requests
import schemathesis

ASYNC_BOOKKEEPING = {"ojs_dispatch_second", "ojs_listener", "refinery_schema_history"}
# Columns a refused request may set: a result wait that answers 408 has flagged its job as
# awaited (so that its end is announced), as documented.
WAIT_BOOKKEEPING = {"ojs_job": "result_awaited", "ojs_job_done": "result_awaited"}

SEED_EVERY = 40
KEEP_SEEDS = 3
WORKER = "fuzz-worker"
QUEUES = ["fuzz", "fuzz-held"]
CRONS = ["fuzz-cron"]

_rng = random.Random(20261125)
_calls = 0
_jobs: list[list[str]] = []
_connection: psycopg.Connection | None = None
_statement: str | None = None
_before: dict[str, str] | None = None
# The last ojs_event seq before the request.
_before_event = 0
_known: tuple[str, dict[str, str]] | None = None
_event: str | None = None


def _db() -> psycopg.Connection:
    global _connection
    if _connection is None or _connection.closed:
        _connection = psycopg.connect(os.environ["OJS_FUZZ_DATABASE_URL"], autocommit=True)
    return _connection


def _fingerprint_statement(db: psycopg.Connection) -> str:
    """One statement giving (table, md5 of its rows) for every table (partitioned ones whole)."""
    tables = [
        name
        for (name,) in db.execute(
            """
            select c.relname
              from pg_class c
              join pg_namespace n on n.oid = c.relnamespace
             where n.nspname = current_schema()
               and c.relkind in ('r', 'p')
               and not c.relispartition
             order by c.relname
            """
        )
        if name not in ASYNC_BOOKKEEPING
    ]
    def rows(name: str) -> str:
        """The table, or its columns but the bookkeeping one (as cheap to hash as the table)."""
        column = WAIT_BOOKKEEPING.get(name)
        if column is None:
            return name
        (columns,) = db.execute(
            """
            select string_agg(quote_ident(attname), ', ' order by attnum)
              from pg_attribute
             where attrelid = %s::regclass and attnum > 0 and not attisdropped and attname <> %s
            """,
            (name, column),
        ).fetchone()
        return f"(select {columns} from {name})"

    parts = [
        f"select '{name}', count(*) || ':' || coalesce(sum(hashtextextended(t::text, 0)), 0)"
        f" from {rows(name)} t"
        for name in tables
    ]
    return " union all ".join(parts)


def fingerprint() -> dict[str, str]:
    """Every table's fingerprint. Recomputed only when a transaction has been given an id
    since the last time (anything that writes gets one, reads do not), else the last one."""
    global _statement, _known
    db = _db()
    (next_xid,) = db.execute("select pg_snapshot_xmax(pg_current_snapshot())::text").fetchone()
    if _known is not None and _known[0] == next_xid:
        return _known[1]
    if _statement is None:
        _statement = _fingerprint_statement(db)
    tables = dict(db.execute(_statement).fetchall())
    _known = (next_xid, tables)
    return tables


def _api(method: str, path: str, body: object | None = None) -> dict:
    response = requests.request(
        method,
        os.environ["OJS_FUZZ_BASE_URL"] + path,
        json=body,
        headers={"Authorization": f"Bearer {os.environ['OJS_FUZZ_KEY']}"},
        timeout=30,
    )
    if response.status_code >= 500:
        raise AssertionError(f"seeding {method} {path}: {response.status_code} {response.text}")
    try:
        return response.json()
    except ValueError:
        return {}


def _enqueue(queue: str, **options: object) -> str | None:
    body = {"type": "fuzz.seed", "args": [_calls], "options": {"queue": queue, **options}}
    return _api("POST", "/ojs/v1/jobs", body).get("job", {}).get("id")


def _seed() -> None:
    """Real jobs in each state, and the worker holding the active ones (best effort: fuzzed
    requests may have paused a queue or removed the worker, and seeding repairs that)."""
    held = QUEUES[1]
    _api("POST", f"/ojs/v1/queues/{held}/resume")
    _api("POST", "/ojs/v1/workers/register", {"worker_id": WORKER, "queues": [held]})
    later = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    ids = [
        _enqueue(QUEUES[0]),
        _enqueue(QUEUES[0], scheduled_at=later),
        cancelled := _enqueue(QUEUES[0]),
    ]
    _api("DELETE", f"/ojs/v1/jobs/{cancelled}")
    for _ in range(4):
        ids.append(_enqueue(held, max_attempts=1))
    fetched = _api(
        "POST",
        "/ojs/v1/workers/fetch",
        {"queues": [held], "worker_id": WORKER, "count": 4, "visibility_timeout_ms": 3_600_000},
    ).get("jobs", [])
    if fetched:
        _api("POST", "/ojs/v1/workers/ack", {"job_id": fetched[0]["id"], "worker_id": WORKER})
    if len(fetched) > 1:
        nack = {"job_id": fetched[1]["id"], "worker_id": WORKER, "error": {"message": "seed"}}
        _api("POST", "/ojs/v1/workers/nack", nack)
    # A cron entry (registered again each time: fuzzed requests may change or delete it).
    template = {"type": "fuzz.seed", "args": [], "options": {"queue": QUEUES[0]}}
    _api("POST", "/ojs/v1/cron", {"name": CRONS[0], "expression": "0 0 1 1 *", "job_template": template})
    _jobs.append([i for i in ids if i])
    del _jobs[:-KEEP_SEEDS]
    global _event
    _event = _api("GET", "/ojs/v1/events?limit=1").get("cursor") or _event


def _maybe(value: object, choices: list[str]) -> object:
    return _rng.choice(choices) if choices and _rng.random() < 0.5 else value


def _aim(case) -> None:
    """Points the request, at random, at the seeded jobs, worker and queues, and replaces what
    only the server issues (page cursors, event ids) with values it issued."""
    jobs = [i for seed in _jobs for i in seed]
    names = {"id": jobs, "worker_id": [WORKER], "name": QUEUES, "job_id": jobs}
    if case.path.startswith("/ojs/v1/cron"):
        names = {**names, "id": CRONS, "name": CRONS}
    if case.path_parameters:
        for key in case.path_parameters:
            case.path_parameters[key] = _maybe(case.path_parameters[key], names.get(key, []))
    bodies = [case.body] if isinstance(case.body, dict) else []
    if isinstance(case.body, dict):
        for value in case.body.values():
            if isinstance(value, list):
                bodies.extend(item for item in value if isinstance(item, dict))
    for body in bodies:
        for key in ("job_id", "worker_id", "id"):
            if key in body:
                body[key] = _maybe(body[key], names[key])
    _issued(case)


def _storable(value: object) -> object:
    """`value` without what no request may carry anywhere (the document's own rule): U+0000,
    which PostgreSQL cannot store, and halves of UTF-16 surrogate pairs, which stand for no
    character."""
    if isinstance(value, str):
        out, i = [], 0
        while i < len(value):
            c = value[i]
            pair = (
                "\ud800" <= c <= "\udbff" and i + 1 < len(value) and "\udc00" <= value[i + 1] <= "\udfff"
            )
            if pair:
                out.append(value[i : i + 2])
                i += 2
                continue
            # Replaced rather than dropped, so a string keeps its length.
            out.append("?" if c == "\x00" or "\ud800" <= c <= "\udfff" else c)
            i += 1
        return "".join(out)
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable(v) for v in value]
    return value


def _issued(case) -> None:
    """Rules the document states but a schema cannot: no string holds U+0000 or half a
    surrogate pair, a page cursor and an event id are the server's own (any other is a 400 by
    design), the paged event list takes no `job_id`, a pool body's `id` and `name` name the
    pool of its path and its weights its own queues, a bulk action picks its own states, a purge
    is confirmed and a queue deletion has a strategy, in the body or the query, a queue is neither moved into itself nor its own
    dead-letter queue, tenant-fair pools agree on their tenant weights, a FETCH by a worker of no pool names its queues, and maintenance mode is only ever turned off. Long polls and result waits are kept short."""
    if isinstance(case.body, (dict, list)):
        case.body = _storable(case.body)
    if isinstance(case.query, dict):
        case.query = _storable(case.query)
    query = case.query if isinstance(case.query, dict) else {}
    if "cursor" in query and case.path.endswith("/history"):
        # A history page's cursor is an event id, as `after` is.
        if _event:
            query["cursor"] = _event
        else:
            del query["cursor"]
    elif "cursor" in query:
        offset = _rng.randrange(0, 100)
        cursor = json.dumps({"o": offset}, separators=(",", ":")).encode()
        query["cursor"] = base64.urlsafe_b64encode(cursor).decode().rstrip("=")
    if "after" in query:
        if _event:
            query["after"] = _event
        else:
            del query["after"]
    if case.path == "/ojs/v1/events" and ("page" in query or "per_page" in query):
        query.pop("job_id", None)
    if "/pools/" in case.path and isinstance(case.body, dict) and case.path_parameters:
        pool = case.path_parameters.get("name")
        for key in ("id", "name"):
            if key in case.body:
                case.body[key] = pool
        # Weights are for the pool's own queues.
        queues, weights = case.body.get("queues"), case.body.get("weights")
        if isinstance(queues, (list, dict)) and isinstance(weights, dict):
            case.body["weights"] = {q: w for q, w in weights.items() if q in queues}
        # Pools sharing a queue must agree on its tenant weights: every tenant-fair pool the
        # fuzz makes uses the same ones.
        fairness = case.body.get("tenant_fairness")
        if isinstance(fairness, dict) and fairness.get("enabled") is True:
            fairness["weights"] = {}
            fairness["default_weight"] = 1
    if case.headers and "OJS-Block-Timeout" in case.headers:
        case.headers["OJS-Block-Timeout"] = "0"
    if case.path == "/ojs/v1/workers/fetch" and isinstance(case.body, dict):
        # Only a member of a configured pool may leave `queues` out.
        if not case.body.get("queues"):
            case.body["queues"] = [QUEUES[0]]
    if case.path == "/ojs/v1/jobs/{id}/result" and "wait" in query:
        # A result wait holds the request until the job ends, as documented.
        query["timeout"] = 0
    if isinstance(case.body, dict) and isinstance(case.body.get("wait_ms"), int):
        # A long poll is served as documented; the fuzz need not wait for it.
        case.body["wait_ms"] = min(case.body["wait_ms"], 50)
    purges = ("/ojs/v1/dead-letter", "/ojs/v1/admin/dead-letter", "/ojs/v1/admin/queues/{name}/jobs")
    if case.method == "DELETE" and case.path in purges:
        # `confirm` is required, in the body or (when the body is left out) the query.
        if not (isinstance(case.body, dict) and "confirm" in case.body) and "confirm" not in query:
            query["confirm"] = "true"
            case.query = query
    if case.method == "DELETE" and case.path == "/ojs/v1/queues/{name}":
        # `strategy` is required, in the body or (when the body is left out) the query.
        if not (isinstance(case.body, dict) and "strategy" in case.body) and "strategy" not in query:
            query["strategy"] = "reject"
            case.query = query
    if case.method == "DELETE" and case.path == "/ojs/v1/queues/{name}" and case.path_parameters:
        # `move` needs a target other than the queue deleted.
        name = case.path_parameters.get("name")
        for holder in (case.body if isinstance(case.body, dict) else {}, query):
            if holder.get("target_queue") == name:
                holder["target_queue"] = name + "-target" if len(name) < 120 else "target"
    if case.path.endswith("/queues/{name}/config") and isinstance(case.body, dict):
        # A queue's dead letters go to another queue.
        name = (case.path_parameters or {}).get("name")
        if name and case.body.get("dead_letter_queue") == name:
            case.body["dead_letter_queue"] = name + "-dlq" if len(name) < 120 else "dlq"
    if case.path == "/ojs/v1/admin/system/maintenance" and isinstance(case.body, dict):
        # Maintenance mode left on would stop the seeding's FETCHes, and one with a duration
        # ends by itself (a background write) during some later request: the fuzz only turns
        # it off, which still validates every field.
        if case.body.get("enabled") is True:
            case.body["enabled"] = False
    if case.path.startswith("/ojs/v1/admin/jobs/bulk/") and isinstance(case.body, dict):
        # Each action applies to its own states; a filter naming only others selects nothing.
        if isinstance(case.body.get("filter"), dict):
            case.body["filter"].pop("state", None)


@schemathesis.hook
def before_call(context, case, kwargs):
    global _before, _calls
    if _calls % SEED_EVERY == 0:
        _seed()
    _calls += 1
    _aim(case)
    _before = fingerprint()
    global _before_event
    (_before_event,) = _db().execute("select coalesce(max(seq), 0) from ojs_event").fetchone()


@schemathesis.check
def refused_requests_change_nothing(ctx, response, case):
    """A 4xx answer leaves every table as the request found it. Documented exceptions: a
    PUSH refused for a full queue (429) records `queue.full` and `backpressure.rejected` (the
    backpressure extension's events, at most a pair per queue per second), and one refused for
    a tenant's limit records `tenant.limit_exceeded` (the multi-tenancy extension's event), and
    nothing else."""
    if not 400 <= response.status_code < 500 or _before is None:
        return None
    after = fingerprint()
    changed = sorted(name for name, digest in after.items() if _before.get(name) != digest)
    if response.status_code == 429 and changed == ["ojs_event"]:
        (others,) = _db().execute(
            "select count(*) from ojs_event"
            " where seq > %s and type not in ('queue.full', 'backpressure.rejected',"
            " 'tenant.limit_exceeded')",
            (_before_event,),
        ).fetchone()
        if others == 0:
            return None
    if changed:
        raise AssertionError(
            f"answered {response.status_code}, yet changed stored data in: {', '.join(changed)}"
        )
    return None
