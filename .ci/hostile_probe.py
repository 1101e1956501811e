"""Hostile input at the HTTP level, for every operation of /ojs/openapi.json: the second half of
the fuzzing step (.ci/fuzz), after schemathesis.

Where schemathesis varies values within JSON, this sends what a careless or hostile client
sends around them: path values with encoded NULs, traversal and 5,000 characters; query strings
with absurd numbers, bad cursors and repeated names; bodies that are not JSON, are nested 5,000
deep, are 2 MB or 5 MB, have duplicate keys, NaN, a BOM or invalid UTF-8; wrong and missing
content types; bad OJS headers; with and without the key. Each request is written whole before
its answer is read, on one keep-alive connection, as simple clients do.

It fails on any 5xx, any request left unanswered (a closed connection or 60 s of silence), and
any 4xx after which a table changed (the fingerprints of fuzz_hooks.py).

    python3 .ci/hostile_probe.py <base url> <database url> <key>
"""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import sys
import time
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_hooks  # noqa: E402  (the fingerprints)

STREAMS = ("/events", "/progress/stream")
SOME_ID = "01a21299-177e-7177-8bed-8580ec4a9d2c"

PATH_VALUES = [
    "%00", "..%2F..%2Fetc", "a" * 5000, "%FF%FE", "%C3%A9t%C3%A9", "0", "-1", SOME_ID,
    "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff", "%20", "null",
    "1e309", "%22%3Cscript%3E", "*", "%25", "a%2Fb", "DROP%20TABLE", "%F0%9F%98%80", "%ED%A0%80",
]
QUERIES = [
    "limit=-1", "limit=1e999", "limit=99999999999999999999", "offset=-5", "page=0", "page=-1",
    "per_page=0", "cursor=%%%", "cursor=AAAA", "cursor=" + "A" * 3000, "since=yesterday",
    "until=2026-13-45T99:99:99Z", "state=bogus", "state=%00", "limit=1&limit=2", "queue=%25",
    "queue=_", "sort=;drop", "order=sideways", "confirm=maybe", "older_than=P-1D",
    "older_than=PT99999999999999999999S", "states=active,,", "after=-1", "after=abc", "types=%00",
    "period=1e9", "strategy=x", "target_queue=%00", "limit=%00", "a=" + "b" * 8000,
]
BODIES = [
    b"", b"null", b"[]", b'"str"', b"1", b"{", b"{}}", b'{"a":NaN}', b"\xef\xbb\xbf{}",
    b'{"a":1,"a":2}', b"\xff\xfe", b'{"type":"\xc3\x28"}', b"[" * 5000 + b"]" * 5000,
    b'{"x":' * 3000 + b"1" + b"}" * 3000,
    json.dumps({"type": "a.b", "args": ["x" * 2_000_000]}).encode(),
    json.dumps({"type": "a.b", "args": ["x" * 5_000_000]}).encode(),
    b'{"type":"a.b","args":[1e309]}', b'{"type":"a.b","args":{}}', b'{"type":"","args":[]}',
    b'{"type":null}', b'{"jobs":null}', b'{"jobs":[' + b"{}," * 2000 + b"{}]}",
    b'{"queues":[""]}', b'{"queues":["a"],"count":-1}', b'{"queues":["a"],"count":1e309}',
    b'{"queues":["a"],"wait_ms":99999999999}', b'{"job_id":"nope"}',
    b'{"job_id":"' + SOME_ID.encode() + b'","error":"str"}', b'{"worker_id":"\\u0000"}',
    b'{"worker_id":"' + b"w" * 10000 + b'"}', b'{"priority":-1}', b'{"priority":1e400}',
    b'{"filter":null}', b'{"filter":{"state":"%"}}', b'{"queues":{"a":{"weight":0}}}',
    b'{"role":"admin","queues":["a"]}', b'{"percentage":101}', b'{"meta":{"k":"\\ud800"}}',
]
CONTENT_TYPES = [
    "application/json", "application/openjobspec+json", "text/plain", None,
    "application/json; charset=latin1", "multipart/form-data",
]
EXTRA_HEADERS = [
    {}, {"OJS-Block-Timeout": "-1"}, {"OJS-Block-Timeout": "1e309"}, {"Last-Event-ID": "%%%"},
    {"OJS-Version": "9.9"}, {"X-Request-Id": "\u00e9" * 300}, {"Authorization": "Bearer nope"},
    {"Authorization": None},
]


def operations(doc: dict) -> list[tuple[str, str]]:
    return [
        (method.upper(), path)
        for path, methods in doc["paths"].items()
        if not path.endswith(STREAMS)
        for method in methods
        if method in ("get", "post", "put", "delete", "patch")
    ]


def cases(ops: list[tuple[str, str]], rng: random.Random):
    for method, path in ops:
        params = [seg for seg in path.split("/") if seg.startswith("{")]
        for value in PATH_VALUES if params else []:
            url = path
            for param in params:
                url = url.replace(param, value)
            body = b"{}" if method in ("POST", "PUT", "PATCH") else None
            yield method, url, body, {"Content-Type": "application/json"}
        base = path
        for param in params:
            base = base.replace(param, rng.choice(["x", SOME_ID, "q1"]))
        for query in QUERIES:
            yield method, f"{base}?{query}", None, {}
        if method == "GET":
            continue
        for body in BODIES:
            for content_type in rng.sample(CONTENT_TYPES, 3):
                headers = {"Content-Type": content_type} if content_type else {}
                headers.update(rng.choice(EXTRA_HEADERS))
                yield method, base, body, headers


class Client:
    """One keep-alive connection, reopened only after the server announced its close."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.conn: http.client.HTTPConnection | None = None

    def send(self, method: str, url: str, body: bytes | None, headers: dict) -> tuple[int | None, str]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            self.conn.putrequest(method, url, skip_host=False, skip_accept_encoding=True)
            for name, value in headers.items():
                if value is not None:
                    self.conn.putheader(name, value.encode("utf-8") if isinstance(value, str) else value)
            if body is not None:
                self.conn.putheader("Content-Length", str(len(body)))
            self.conn.endheaders(body)
            response = self.conn.getresponse()
            data = response.read()
            if response.will_close:
                self.conn.close()
                self.conn = None
            return response.status, data[:200].decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as e:
            self.conn.close()
            self.conn = None
            return None, repr(e)


def main() -> int:
    base, database_url, key = sys.argv[1], sys.argv[2], sys.argv[3]
    os.environ["OJS_FUZZ_DATABASE_URL"] = database_url
    target = urlsplit(base)
    client = Client(target.hostname, target.port)
    conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
    conn.request("GET", "/ojs/openapi.json")
    doc = json.loads(conn.getresponse().read())
    conn.close()
    ops = operations(doc)
    all_cases = list(cases(ops, random.Random(20261125)))
    failures: list[str] = []
    started = time.time()
    for method, url, body, headers in all_cases:
        headers = {"Authorization": f"Bearer {key}", **headers}
        before = fuzz_hooks.fingerprint()
        status, answer = client.send(method, url, body, headers)
        shown = f"{method} {url[:100]} ({len(body) if body is not None else 'no'} bytes, {headers.get('Content-Type')})"
        if status is None:
            failures.append(f"unanswered: {shown}: {answer}")
        elif status >= 500:
            failures.append(f"{status}: {shown}: {answer}")
        elif status >= 400:
            after = fuzz_hooks.fingerprint()
            changed = sorted(name for name, digest in after.items() if before.get(name) != digest)
            if changed:
                failures.append(f"{status}, yet changed {', '.join(changed)}: {shown}")
    for failure in failures[:30]:
        print(failure)
    print(
        f"hostile probe: {len(all_cases)} requests over {len(ops)} operations in "
        f"{time.time() - started:.0f} s, {len(failures)} failures"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
