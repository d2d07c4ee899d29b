"""Places an order and enqueues its charge in one transaction.

failwell's outbox contract (docs/OUTBOX.md): the application inserts the
message into `failwell_outbox` in the same transaction as its own state
change, so both commit or neither does; `failwell serve` delivers it.

    pip install -r requirements.txt
    python enqueue_order.py ORDER_REFERENCE AMOUNT [--fail-after-enqueue]

Connects with libpq's environment (PGHOST, PGPORT, PGUSER, PGDATABASE,
PGOPTIONS for the schema). `--fail-after-enqueue` raises after both inserts
to show that a rolled-back transaction leaves no message behind.
"""

import json
import sys

import psycopg


def main() -> int:
    reference, amount = sys.argv[1], int(sys.argv[2])
    fail = "--fail-after-enqueue" in sys.argv[3:]
    payload = {"amount": amount, "currency": "eur", "reference": reference}
    with psycopg.connect() as conn:
        try:
            with conn.transaction():
                conn.execute(
                    "INSERT INTO orders (reference, amount, currency) VALUES (%s, %s, %s)",
                    (reference, amount, "eur"),
                )
                row = conn.execute(
                    "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) "
                    "VALUES (%s, %s, %s, %s, %s) RETURNING id",
                    ("payments", "charge", json.dumps(payload), reference, reference),
                ).fetchone()
                if fail:
                    raise RuntimeError("failing after the enqueue, on purpose")
        except RuntimeError as e:
            print(f"rolled back: {e}", file=sys.stderr)
            return 3
    print(f"order {reference} placed, outbox message {row[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
