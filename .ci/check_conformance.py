#!/usr/bin/env python3
"""Compares conformance JSON reports with conformance/known-gaps.txt.

Usage: check_conformance.py KNOWN_GAPS.txt REPORT.json [REPORT.json ...]

Exits 1 when a test failed (or errored) without being listed as a known gap. Listed tests
that passed are reported so their entry can be removed.
"""
import json
import sys


def load_gaps(path):
    gaps = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, reason = line.partition(" ")
            gaps[key] = reason.strip() or "(no reason given)"
    return gaps


def listed(gaps, test):
    for key, reason in gaps.items():
        if key == test["test_id"] or test["file"] == key or test["file"].endswith("/" + key):
            return reason
    return None


def main():
    gaps_path, report_paths = sys.argv[1], sys.argv[2:]
    tests, totals = [], {"passed": 0, "failed": 0, "errored": 0}
    for report_path in report_paths:
        with open(report_path, encoding="utf-8") as fh:
            report = json.load(fh)
        tests.extend(report["tests"])
        for key in totals:
            totals[key] += report["totals"].get(key, 0)
    gaps = load_gaps(gaps_path)
    unexpected, known, fixed = [], [], []
    for test in tests:
        reason = listed(gaps, test)
        failed = test["status"] in ("fail", "error")
        if failed and reason is None:
            unexpected.append(test)
        elif failed:
            known.append((test, reason))
        elif reason is not None and test["status"] == "pass":
            fixed.append(test)
    print(
        f"conformance: {totals['passed']} passed, {totals['failed'] + totals.get('errored', 0)} failed "
        f"({len(known)} known gaps, {len(unexpected)} unexpected)"
    )
    for test, reason in known:
        print(f"  known gap  {test['test_id']:<12} {reason}")
    for test in fixed:
        print(f"  NOW PASSES {test['test_id']:<12} remove it from {gaps_path}")
    for test in unexpected:
        print(f"  UNEXPECTED {test['test_id']:<12} {test['file']}")
        for failure in test.get("failures", [])[:3]:
            print(f"             [{failure.get('step_id')}] {failure.get('message')}")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
