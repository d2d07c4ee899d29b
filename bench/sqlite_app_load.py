"""An application writing the SQLite file `failwell serve` uses, at a steady
rate: each transaction inserts an order row and its message into
`failwell_outbox` (docs/OUTBOX.md), as the SQLite examples do.

    python3 bench/sqlite_app_load.py DATABASE_FILE RATE SECONDS PREFIX

Settings an application needs on a shared file: a busy timeout (5 s here)
and BEGIN IMMEDIATE. Prints one JSON line: transactions committed, errors
by message (`database is locked` among them), and the wait of the longest
transaction and the 99th percentile (BEGIN to COMMIT, in ms). The order
references are PREFIX-0, PREFIX-1, ...
"""

import json
import sqlite3
import sys
import time


def main() -> int:
    path, rate, seconds, prefix = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    conn = sqlite3.connect(path, timeout=5.0, isolation_level=None)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS orders (reference TEXT PRIMARY KEY, amount INTEGER NOT NULL, currency TEXT NOT NULL)"
    )
    waits, errors = [], {}
    start = time.monotonic()
    n = 0
    while True:
        due = start + n / rate
        now = time.monotonic()
        if due - start >= seconds:
            break
        if due > now:
            time.sleep(due - now)
        reference = f"{prefix}-{n}"
        payload = json.dumps({"amount": 1000 + n % 100, "currency": "eur", "reference": reference})
        began = time.monotonic()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "INSERT INTO orders (reference, amount, currency) VALUES (?, ?, 'eur')",
                    (reference, 1000 + n % 100),
                )
                conn.execute(
                    "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) "
                    "VALUES ('payments', 'charge', ?, ?, ?)",
                    (payload, reference, reference),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            waits.append((time.monotonic() - began) * 1000)
        except sqlite3.Error as e:
            errors[str(e)] = errors.get(str(e), 0) + 1
        n += 1
    waits.sort()
    print(
        json.dumps(
            {
                "transactions": len(waits),
                "errors": errors,
                "elapsed_s": round(time.monotonic() - start, 1),
                "max_wait_ms": round(waits[-1], 1) if waits else None,
                "p99_wait_ms": round(waits[int(len(waits) * 0.99)], 1) if waits else None,
            }
        )
    )
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
