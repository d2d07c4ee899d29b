"""Places an order and enqueues its charge in one transaction, on SQLite.

failwell's outbox contract (docs/OUTBOX.md): the application inserts the
message into `failwell_outbox` in the same transaction as its own state
change, so both commit or neither does; `failwell serve`, whose
`database_url` names the same file, delivers it.

    python enqueue_order_sqlite.py DATABASE_FILE ORDER_REFERENCE AMOUNT [--fail-after-enqueue]

Needs only the standard library. `--fail-after-enqueue` raises after both
inserts to show that a rolled-back transaction leaves no message behind.
"""

import json
import sqlite3
import sys


def main() -> int:
    path, reference, amount = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fail = "--fail-after-enqueue" in sys.argv[4:]
    payload = {"amount": amount, "currency": "eur", "reference": reference}
    # isolation_level=None: this code opens its transactions itself, with
    # BEGIN IMMEDIATE. timeout: wait up to 5 s for failwell's short writes.
    conn = sqlite3.connect(path, timeout=5.0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO orders (reference, amount, currency) VALUES (?, ?, ?)",
                (reference, amount, "eur"),
            )
            conn.execute(
                "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) "
                "VALUES (?, ?, ?, ?, ?)",
                ("payments", "charge", json.dumps(payload), reference, reference),
            )
            (message_id,) = conn.execute(
                "SELECT id FROM failwell_outbox WHERE idempotency_key = ?", (reference,)
            ).fetchone()
            if fail:
                raise RuntimeError("failing after the enqueue, on purpose")
            conn.execute("COMMIT")
        except BaseException as e:
            conn.execute("ROLLBACK")
            if isinstance(e, RuntimeError):
                print(f"rolled back: {e}", file=sys.stderr)
                return 3
            raise
    finally:
        conn.close()
    print(f"order {reference} placed, outbox message {message_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
