<?php
// Places an order and enqueues its charge in one transaction, on SQLite.
//
// failwell's outbox contract (docs/OUTBOX.md): the application inserts the
// message into `failwell_outbox` in the same transaction as its own state
// change, so both commit or neither does; `failwell serve`, whose
// `database_url` names the same file, delivers it. The transaction has the
// shape of Laravel's DB::transaction(fn () => ...): an exception inside it
// rolls everything back.
//
//     apt-get install php-cli php-sqlite3
//     php enqueue_order_sqlite.php DATABASE_FILE ORDER_REFERENCE AMOUNT [--fail-after-enqueue]
//
// `--fail-after-enqueue` throws after both inserts to show that a
// rolled-back transaction leaves no message.

declare(strict_types=1);

[$path, $reference, $amount] = [$argv[1], $argv[2], (int) $argv[3]];
$fail = ($argv[4] ?? '') === '--fail-after-enqueue';

$db = new PDO("sqlite:$path", null, null, [
    PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
    // Wait up to 5 s for failwell's short writes (SQLite's busy_timeout).
    PDO::ATTR_TIMEOUT => 5,
]);

/** Runs $work in one write transaction, as DB::transaction does. */
function transaction(PDO $db, callable $work): mixed
{
    // BEGIN IMMEDIATE takes the write lock at once (PDO's beginTransaction
    // would BEGIN DEFERRED): a transaction that reads, then writes, never
    // fails to upgrade its lock.
    $db->exec('BEGIN IMMEDIATE');
    try {
        $result = $work($db);
        $db->exec('COMMIT');
        return $result;
    } catch (Throwable $e) {
        $db->exec('ROLLBACK');
        throw $e;
    }
}

try {
    $id = transaction($db, function (PDO $db) use ($reference, $amount, $fail) {
        $db->prepare('INSERT INTO orders (reference, amount, currency) VALUES (?, ?, ?)')
            ->execute([$reference, $amount, 'eur']);
        $payload = json_encode(['amount' => $amount, 'currency' => 'eur', 'reference' => $reference]);
        $db->prepare(
            'INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) '
            . 'VALUES (?, ?, ?, ?, ?)'
        )->execute(['payments', 'charge', $payload, $reference, $reference]);
        $find = $db->prepare('SELECT id FROM failwell_outbox WHERE idempotency_key = ?');
        $find->execute([$reference]);
        $id = $find->fetchColumn();
        if ($fail) {
            throw new RuntimeException('failing after the enqueue, on purpose');
        }
        return $id;
    });
    echo "order $reference placed, outbox message $id\n";
} catch (RuntimeException $e) {
    fwrite(STDERR, "rolled back: {$e->getMessage()}\n");
    exit(3);
}
