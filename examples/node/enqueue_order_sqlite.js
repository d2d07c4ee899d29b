// Places an order and enqueues its charge in one transaction, on SQLite.
//
// failwell's outbox contract (docs/OUTBOX.md): the application inserts the
// message into `failwell_outbox` in the same transaction as its own state
// change, so both commit or neither does; `failwell serve`, whose
// `database_url` names the same file, delivers it.
//
//     npm ci
//     node enqueue_order_sqlite.js DATABASE_FILE ORDER_REFERENCE AMOUNT [--fail-after-enqueue]
//
// Uses better-sqlite3 12 (13 needs a newer Node.js than 20).
// `--fail-after-enqueue` throws after both inserts to show that a
// rolled-back transaction leaves no message.
'use strict';

const Database = require('better-sqlite3');

function main() {
  const [path, reference, amountText, flag] = process.argv.slice(2);
  const amount = Number.parseInt(amountText, 10);
  const payload = { amount, currency: 'eur', reference };
  // timeout: wait up to 5 s for failwell's short writes (busy_timeout).
  const db = new Database(path, { timeout: 5000 });
  const insertOrder = db.prepare('INSERT INTO orders (reference, amount, currency) VALUES (?, ?, ?)');
  const enqueue = db.prepare(
    'INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) VALUES (?, ?, ?, ?, ?)',
  );
  const find = db.prepare('SELECT id FROM failwell_outbox WHERE idempotency_key = ?');
  // A function wrapped by db.transaction runs in one transaction: an
  // exception rolls it back. `.immediate` begins it with BEGIN IMMEDIATE.
  const placeOrder = db.transaction(() => {
    insertOrder.run(reference, amount, 'eur');
    enqueue.run('payments', 'charge', JSON.stringify(payload), reference, reference);
    const { id } = find.get(reference);
    if (flag === '--fail-after-enqueue') {
      throw new Error('failing after the enqueue, on purpose');
    }
    return id;
  });
  try {
    const id = placeOrder.immediate();
    console.log(`order ${reference} placed, outbox message ${id}`);
    return 0;
  } catch (e) {
    if (e instanceof Database.SqliteError) {
      throw e;
    }
    console.error(`rolled back: ${e.message}`);
    return 3;
  } finally {
    db.close();
  }
}

process.exit(main());
