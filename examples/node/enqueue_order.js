// Places an order and enqueues its charge in one transaction.
//
// failwell's outbox contract (docs/OUTBOX.md): the application inserts the
// message into `failwell_outbox` in the same transaction as its own state
// change, so both commit or neither does; `failwell serve` delivers it.
//
//     npm ci
//     node enqueue_order.js ORDER_REFERENCE AMOUNT [--fail-after-enqueue]
//
// Connects with libpq's environment variables (PGHOST, PGPORT, PGUSER,
// PGDATABASE; PGOPTIONS for the schema). `--fail-after-enqueue` throws after
// both inserts to show that a rolled-back transaction leaves no message.
'use strict';

const { Client } = require('pg');

async function main() {
  const [reference, amountText, flag] = process.argv.slice(2);
  const amount = Number.parseInt(amountText, 10);
  const payload = { amount, currency: 'eur', reference };
  const client = new Client({ options: process.env.PGOPTIONS });
  await client.connect();
  try {
    await client.query('BEGIN');
    await client.query('INSERT INTO orders (reference, amount, currency) VALUES ($1, $2, $3)', [
      reference,
      amount,
      'eur',
    ]);
    const { rows } = await client.query(
      'INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) ' +
        'VALUES ($1, $2, $3, $4, $5) RETURNING id',
      ['payments', 'charge', JSON.stringify(payload), reference, reference],
    );
    if (flag === '--fail-after-enqueue') {
      throw new Error('failing after the enqueue, on purpose');
    }
    await client.query('COMMIT');
    console.log(`order ${reference} placed, outbox message ${rows[0].id}`);
    return 0;
  } catch (e) {
    await client.query('ROLLBACK');
    console.error(`rolled back: ${e.message}`);
    return 3;
  } finally {
    await client.end();
  }
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
