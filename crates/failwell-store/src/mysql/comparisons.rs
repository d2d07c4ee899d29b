//! Comparison windows and reports on MySQL: the shared statements
//! ([`crate::comparisons::statements`]), lists bound as JSON arrays
//! (`JSON_TABLE`).

use super::MySqlStore;

crate::comparisons::statements::comparison_statements!(
    store = MySqlStore,
    texts_in = "(SELECT t FROM JSON_TABLE($2, '$[*]' COLUMNS (t LONGTEXT PATH '$')) AS j)",
    discrepancies = "JSON_TABLE($3, '$[*]' COLUMNS (kind LONGTEXT PATH '$[0]', reference LONGTEXT PATH '$[1]', \
                     operation_id BIGINT PATH '$[2]', provider_ref LONGTEXT PATH '$[3]', detail LONGTEXT PATH '$[4]')) AS d",
    returning_id = "",
    new_window = "INSERT IGNORE INTO comparison_runs (provider, window_from_ms, window_to_ms, claimed_at_ms) \
                  VALUES ($1, $2, $3, $4)",
);
