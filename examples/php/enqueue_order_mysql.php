<?php
// Places an order and enqueues its charge in one transaction, on MySQL or
// MariaDB.
//
// failwell's outbox contract (docs/OUTBOX.md): the application inserts the
// message into the table `failwell_outbox` in the same transaction as its
// own state change, so both commit or neither does; `failwell serve`, whose
// `database_url` names the same database, delivers it. The transaction has
// the shape of Laravel's DB::transaction(fn () => ...): an exception inside
// it rolls everything back.
//
//     apt-get install php-cli php-mysql
//     php enqueue_order_mysql.php mysql://USER:PASSWORD@HOST:PORT/DATABASE ORDER_REFERENCE AMOUNT [--fail-after-enqueue]
//
// `--fail-after-enqueue` throws after both inserts to show that a
// rolled-back transaction leaves no message.

declare(strict_types=1);

[$url, $reference, $amount] = [$argv[1], $argv[2], (int) $argv[3]];
$fail = ($argv[4] ?? '') === '--fail-after-enqueue';

$parts = parse_url($url);
$dsn = sprintf(
    'mysql:host=%s;port=%d;dbname=%s;charset=utf8mb4',
    $parts['host'] ?? '127.0.0.1',
    $parts['port'] ?? 3306,
    ltrim($parts['path'] ?? '', '/'),
);
$db = new PDO($dsn, urldecode($parts['user'] ?? 'root'), urldecode($parts['pass'] ?? ''), [
    PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
]);

/** Runs $work in one transaction, as DB::transaction does. */
function transaction(PDO $db, callable $work): mixed
{
    $db->beginTransaction();
    try {
        $result = $work($db);
        $db->commit();
        return $result;
    } catch (Throwable $e) {
        $db->rollBack();
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
        // The row's operation_id is the message's id in failwell.
        $find = $db->prepare('SELECT operation_id FROM failwell_outbox WHERE id = ?');
        $find->execute([$db->lastInsertId()]);
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
