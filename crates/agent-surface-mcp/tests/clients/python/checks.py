"""What every Python client script here shares: a tally of named checks, and the matcher for the
expectations in cases.json.

A script calls `check(name, ok, detail)` for each check and `finish()` at the end, which prints
"N passed, M failed" and exits non-zero on any failure.
"""

import re
import sys

_tally = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    if ok:
        _tally["passed"] += 1
        print(f"ok   {name}")
    else:
        _tally["failed"] += 1
        print(f"FAIL {name}{': ' + detail if detail else ''}")


def finish():
    print(f"{_tally['passed']} passed, {_tally['failed']} failed")
    sys.exit(0 if _tally["failed"] == 0 else 1)


def matches(expected, actual):
    """Whether `actual` is `expected`, where an expected value may be a matcher:
    {"$any": "string" | "integer"} or {"$regex": "..."}; objects must have exactly the expected keys."""
    if isinstance(expected, dict):
        if "$any" in expected:
            if expected["$any"] == "string":
                return isinstance(actual, str) and len(actual) > 0
            if expected["$any"] == "integer":
                return isinstance(actual, int) and not isinstance(actual, bool)
            return False
        if "$regex" in expected:
            return isinstance(actual, str) and re.search(expected["$regex"], actual) is not None
        if not isinstance(actual, dict) or sorted(expected) != sorted(actual):
            return False
        return all(matches(expected[k], actual[k]) for k in expected)
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(
            matches(e, a) for e, a in zip(expected, actual)
        )
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    return expected == actual
