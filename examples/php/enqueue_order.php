<?php
// Places an order and enqueues its charge in one transaction.
//
// failwell's outbox contract (docs/OUTBOX.md): the application inserts the
// message into `failwell_outbox` in the same transaction as its own state
// change, so both commit or neither does; `failwell serve` delivers it.
//
//     apt-get install php-cli php-pgsql
//     php enqueue_order.php ORDER_REFERENCE AMOUNT [--fail-after-enqueue]
//
// Connects with libpq's environment variables (PGHOST, PGPORT, PGUSER,
// PGDATABASE; PGOPTIONS for the schema). `--fail-after-enqueue` throws after
// both inserts to show that a rolled-back transaction leaves no message.

declare(strict_types=1);

[$reference, $amount] = [$argv[1], (int) $argv[2]];
$fail = ($argv[3] ?? '') === '--fail-after-enqueue';

$dsn = sprintf(
    'pgsql:host=%s;port=%s;dbname=%s',
    getenv('PGHOST') ?: '127.0.0.1',
    getenv('PGPORT') ?: '5432',
    getenv('PGDATABASE') ?: 'postgres',
);
$db = new PDO($dsn, getenv('PGUSER') ?: 'postgres', null, [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);

$db->beginTransaction();
try {
    $db->prepare('INSERT INTO orders (reference, amount, currency) VALUES (?, ?, ?)')
        ->execute([$reference, $amount, 'eur']);
    $enqueue = $db->prepare(
        'INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) '
        . 'VALUES (?, ?, ?, ?, ?) RETURNING id'
    );
    $payload = json_encode(['amount' => $amount, 'currency' => 'eur', 'reference' => $reference]);
    $enqueue->execute(['payments', 'charge', $payload, $reference, $reference]);
    $id = $enqueue->fetchColumn();
    if ($fail) {
        throw new RuntimeException('failing after the enqueue, on purpose');
    }
    $db->commit();
    echo "order $reference placed, outbox message $id\n";
} catch (RuntimeException $e) {
    $db->rollBack();
    fwrite(STDERR, "rolled back: {$e->getMessage()}\n");
    exit(3);
}
