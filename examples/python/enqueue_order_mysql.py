"""Places an order and enqueues its charge in one transaction, on MySQL or MariaDB.

failwell's outbox contract (docs/OUTBOX.md): the application inserts the
message into the table `failwell_outbox` in the same transaction as its
own state change, so both commit or neither does; `failwell serve`, whose
`database_url` names the same database, delivers it.

    pip install -r requirements.txt
    python enqueue_order_mysql.py mysql://USER:PASSWORD@HOST:PORT/DATABASE ORDER_REFERENCE AMOUNT [--fail-after-enqueue]

Uses PyMySQL. `--fail-after-enqueue` raises after both inserts to show
that a rolled-back transaction leaves no message behind.
"""

import json
import sys
from urllib.parse import unquote, urlsplit

import pymysql


def connect(url: str) -> pymysql.connections.Connection:
    """A connection to the database a mysql:// URL names."""
    parts = urlsplit(url)
    return pymysql.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""),
        database=parts.path.lstrip("/"),
        autocommit=False,
    )


def main() -> int:
    url, reference, amount = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fail = "--fail-after-enqueue" in sys.argv[4:]
    payload = {"amount": amount, "currency": "eur", "reference": reference}
    conn = connect(url)
    try:
        conn.begin()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "INSERT INTO orders (reference, amount, currency) VALUES (%s, %s, %s)",
                    (reference, amount, "eur"),
                )
                cur.execute(
                    "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    ("payments", "charge", json.dumps(payload), reference, reference),
                )
                # The row's operation_id is the message's id in failwell.
                cur.execute("SELECT operation_id FROM failwell_outbox WHERE id = LAST_INSERT_ID()")
                (message_id,) = cur.fetchone()
            if fail:
                raise RuntimeError("failing after the enqueue, on purpose")
            conn.commit()
        except BaseException as e:
            conn.rollback()
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
