"""The Python tests' checklist: each check printed as it is made, the failed ones kept for the
summary and the exit status."""

FAILS = []


def ok(cond, what):
    print(f"{'ok  ' if cond else 'FAIL'} {what}", flush=True)
    if not cond:
        FAILS.append(what)


def summary():
    """Prints how many checks failed; the exit status: 1 if any did."""
    print(f"\n{len(FAILS)} failed" if FAILS else "\nall passed")
    return 1 if FAILS else 0
