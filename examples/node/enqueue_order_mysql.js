// Places an order and enqueues its charge in one transaction, on MySQL or
// MariaDB.
//
// failwell's outbox contract (docs/OUTBOX.md): the application inserts the
// message into the table `failwell_outbox` in the same transaction as its
// own state change, so both commit or neither does; `failwell serve`, whose
// `database_url` names the same database, delivers it.
//
//     npm ci
//     node enqueue_order_mysql.js mysql://USER:PASSWORD@HOST:PORT/DATABASE ORDER_REFERENCE AMOUNT [--fail-after-enqueue]
//
// Uses mysql2. `--fail-after-enqueue` throws after both inserts to show
// that a rolled-back transaction leaves no message.
'use strict';

const mysql = require('mysql2/promise');

async function main() {
  const [url, reference, amountText, flag] = process.argv.slice(2);
  const amount = Number.parseInt(amountText, 10);
  const payload = { amount, currency: 'eur', reference };
  const conn = await mysql.createConnection(url);
  try {
    await conn.beginTransaction();
    try {
      await conn.execute('INSERT INTO orders (reference, amount, currency) VALUES (?, ?, ?)', [
        reference,
        amount,
        'eur',
      ]);
      const [inserted] = await conn.execute(
        'INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) VALUES (?, ?, ?, ?, ?)',
        ['payments', 'charge', JSON.stringify(payload), reference, reference],
      );
      // The row's operation_id is the message's id in failwell.
      const [[{ operation_id: id }]] = await conn.execute(
        'SELECT operation_id FROM failwell_outbox WHERE id = ?',
        [inserted.insertId],
      );
      if (flag === '--fail-after-enqueue') {
        throw new Error('failing after the enqueue, on purpose');
      }
      await conn.commit();
      console.log(`order ${reference} placed, outbox message ${id}`);
      return 0;
    } catch (e) {
      await conn.rollback();
      if (e.sqlState !== undefined) {
        throw e;
      }
      console.error(`rolled back: ${e.message}`);
      return 3;
    }
  } finally {
    await conn.end();
  }
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
