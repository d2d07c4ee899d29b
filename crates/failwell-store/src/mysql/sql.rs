//! The statements of every database, run on MySQL and MariaDB.
//!
//! failwell writes its statements once, with PostgreSQL's numbered
//! parameters (`$1`, `$2`, each one as often as needed), which sqlx binds
//! by number on PostgreSQL and SQLite. MySQL only has positional `?`. The
//! functions here stand in for `sqlx::query`, `sqlx::query_scalar` and
//! `sqlx::query_as` (the shared statement macros call them as
//! `sql::query`): they keep each bound value, and at execution turn every
//! `$N` into `?` and bind the N-th value at that place. They also spell
//! what MySQL writes differently: the casts (`AS text` is `AS CHAR`, `AS
//! bigint` is `AS SIGNED`), quoted names (`"key"` is `` `key` ``), and an
//! aggregate's `FILTER (WHERE c)` (`COUNT(*) FILTER (WHERE c)` is
//! `COUNT(CASE WHEN c THEN 1 END)`); and they drop `NULLS LAST` after
//! `DESC`, where MySQL sorts NULLs last already. Nothing inside a quoted
//! string is changed.

use std::marker::PhantomData;

use sqlx::error::BoxDynError;
use sqlx::mysql::{MySql, MySqlArguments, MySqlQueryResult, MySqlRow};
use sqlx::{Arguments, Encode, Executor, FromRow, SqlSafeStr, Type};

pub(crate) use sqlx::AssertSqlSafe;

/// One bound value, added to the arguments each time its number appears.
type Bind<'q> = Box<dyn Fn(&mut MySqlArguments) -> Result<(), BoxDynError> + Send + Sync + 'q>;

/// A statement and its values, as [`sqlx::query`] keeps them.
pub(crate) struct Query<'q> {
    statement: Translated,
    binds: Vec<Bind<'q>>,
}

/// A statement whose rows are read as `O` (see [`Query`]).
pub(crate) struct QueryAs<'q, O> {
    inner: Query<'q>,
    row: PhantomData<fn() -> O>,
}

/// A statement whose rows are their first column, an `O` (see [`Query`]).
pub(crate) struct QueryScalar<'q, O> {
    inner: Query<'q>,
    value: PhantomData<fn() -> O>,
}

/// Like [`sqlx::query`], for statements with `$N` parameters.
pub(crate) fn query<'q>(sql: impl SqlSafeStr) -> Query<'q> {
    Query { statement: translate(sql.into_sql_str().as_str()), binds: Vec::new() }
}

/// Like [`sqlx::query_as`], for statements with `$N` parameters.
pub(crate) fn query_as<'q, O>(sql: impl SqlSafeStr) -> QueryAs<'q, O> {
    QueryAs { inner: query(sql), row: PhantomData }
}

/// Like [`sqlx::query_scalar`], for statements with `$N` parameters.
pub(crate) fn query_scalar<'q, O>(sql: impl SqlSafeStr) -> QueryScalar<'q, O> {
    QueryScalar { inner: query(sql), value: PhantomData }
}

/// A statement rewritten for MySQL: the SQL with `?` placeholders, and
/// for each placeholder the number of the value it takes (from 1).
struct Translated {
    sql: String,
    order: Vec<usize>,
}

/// Rewrites `sql` for MySQL (see the module's docs).
fn translate(sql: &str) -> Translated {
    let sql = filters_as_case(&sql.replace(" AS text)", " AS CHAR)").replace(" AS bigint)", " AS SIGNED)"))
        .replace(" DESC NULLS LAST", " DESC");
    let mut out = String::with_capacity(sql.len());
    let mut order = Vec::new();
    let mut chars = sql.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
        }
        if c == '$' && !quoted && chars.peek().is_some_and(char::is_ascii_digit) {
            let mut n = 0usize;
            while let Some(d) = chars.next_if(char::is_ascii_digit) {
                n = n * 10 + d.to_digit(10).map_or(0, |d| d as usize);
            }
            out.push('?');
            order.push(n);
        } else if c == '"' && !quoted {
            out.push('`');
        } else {
            out.push(c);
        }
    }
    Translated { sql: out, order }
}

/// `AGG(args) FILTER (WHERE c)` as `AGG(CASE WHEN c THEN args END)` (`1`
/// for `*`), which MySQL reads.
fn filters_as_case(sql: &str) -> String {
    const FILTER: &str = " FILTER (WHERE ";
    let mut sql = sql.to_owned();
    while let Some(at) = sql.find(FILTER) {
        let Some(open) = matching_open(&sql[..at]) else { break };
        let cond_from = at + FILTER.len();
        let Some(cond_len) = matching_close(&sql[cond_from..]) else { break };
        let args = match sql[open + 1..at - 1].trim() {
            "*" => "1".to_owned(),
            args => args.to_owned(),
        };
        let cond = sql[cond_from..cond_from + cond_len].to_owned();
        sql.replace_range(open + 1..cond_from + cond_len + 1, &format!("CASE WHEN {cond} THEN {args} END)"));
    }
    sql
}

/// The position of the `(` that the `)` ending `text` closes.
fn matching_open(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' if depth == 1 => return Some(i),
            '(' => depth = depth.checked_sub(1)?,
            _ => {}
        }
    }
    None
}

/// The length of `text` up to the `)` that closes an already open `(`.
fn matching_close(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return Some(i),
            ')' => depth -= 1,
            _ => {}
        }
    }
    None
}

impl<'q> Query<'q> {
    /// Binds the next numbered value (`$1` first).
    pub(crate) fn bind<T>(mut self, value: T) -> Self
    where
        T: Encode<'q, MySql> + Type<MySql> + Clone + Send + Sync + 'q,
    {
        self.binds.push(Box::new(move |args: &mut MySqlArguments| args.add(value.clone())));
        self
    }

    /// The SQL with `?` placeholders and its arguments in their order.
    /// Errors: a placeholder names a value that was not bound, or a value
    /// cannot be encoded.
    fn arguments(self) -> Result<(String, MySqlArguments), sqlx::Error> {
        let mut args = MySqlArguments::default();
        for &n in &self.statement.order {
            let bind = n.checked_sub(1).and_then(|i| self.binds.get(i)).ok_or_else(|| {
                sqlx::Error::Protocol(format!("statement parameter ${n} has no value bound"))
            })?;
            bind(&mut args).map_err(sqlx::Error::Encode)?;
        }
        Ok((self.statement.sql, args))
    }

    /// Runs the statement; see [`sqlx::query::Query::execute`].
    pub(crate) async fn execute<'c, E>(self, executor: E) -> Result<MySqlQueryResult, sqlx::Error>
    where
        E: Executor<'c, Database = MySql>,
    {
        let (sql, args) = self.arguments()?;
        sqlx::query_with(AssertSqlSafe(sql), args).execute(executor).await
    }

    /// Every row; see [`sqlx::query::Query::fetch_all`].
    pub(crate) async fn fetch_all<'c, E>(self, executor: E) -> Result<Vec<MySqlRow>, sqlx::Error>
    where
        E: Executor<'c, Database = MySql>,
    {
        let (sql, args) = self.arguments()?;
        sqlx::query_with(AssertSqlSafe(sql), args).fetch_all(executor).await
    }

    /// The first row, which must exist; see [`sqlx::query::Query::fetch_one`].
    pub(crate) async fn fetch_one<'c, E>(self, executor: E) -> Result<MySqlRow, sqlx::Error>
    where
        E: Executor<'c, Database = MySql>,
    {
        let (sql, args) = self.arguments()?;
        sqlx::query_with(AssertSqlSafe(sql), args).fetch_one(executor).await
    }

    /// The first row, if any; see [`sqlx::query::Query::fetch_optional`].
    pub(crate) async fn fetch_optional<'c, E>(self, executor: E) -> Result<Option<MySqlRow>, sqlx::Error>
    where
        E: Executor<'c, Database = MySql>,
    {
        let (sql, args) = self.arguments()?;
        sqlx::query_with(AssertSqlSafe(sql), args).fetch_optional(executor).await
    }
}

impl<'q, O> QueryAs<'q, O>
where
    O: for<'r> FromRow<'r, MySqlRow> + Send + Unpin,
{
    /// Binds the next numbered value (see [`Query::bind`]).
    pub(crate) fn bind<T>(self, value: T) -> Self
    where
        T: Encode<'q, MySql> + Type<MySql> + Clone + Send + Sync + 'q,
    {
        Self { inner: self.inner.bind(value), row: PhantomData }
    }

    /// Every row, read as `O`.
    pub(crate) async fn fetch_all<'c, E>(self, executor: E) -> Result<Vec<O>, sqlx::Error>
    where
        E: Executor<'c, Database = MySql>,
    {
        let rows = self.inner.fetch_all(executor).await?;
        rows.iter().map(O::from_row).collect()
    }

    /// The first row, read as `O`, if any.
    pub(crate) async fn fetch_optional<'c, E>(self, executor: E) -> Result<Option<O>, sqlx::Error>
    where
        E: Executor<'c, Database = MySql>,
    {
        self.inner.fetch_optional(executor).await?.as_ref().map(O::from_row).transpose()
    }
}

impl<'q, O> QueryScalar<'q, O>
where
    (O,): for<'r> FromRow<'r, MySqlRow>,
    O: Send + Unpin,
{
    /// Binds the next numbered value (see [`Query::bind`]).
    pub(crate) fn bind<T>(self, value: T) -> Self
    where
        T: Encode<'q, MySql> + Type<MySql> + Clone + Send + Sync + 'q,
    {
        Self { inner: self.inner.bind(value), value: PhantomData }
    }

    /// Every row's first column.
    pub(crate) async fn fetch_all<'c, E>(self, executor: E) -> Result<Vec<O>, sqlx::Error>
    where
        E: Executor<'c, Database = MySql>,
    {
        let rows = self.inner.fetch_all(executor).await?;
        rows.iter().map(|r| <(O,)>::from_row(r).map(|(o,)| o)).collect()
    }

    /// The first row's first column; the row must exist.
    pub(crate) async fn fetch_one<'c, E>(self, executor: E) -> Result<O, sqlx::Error>
    where
        E: Executor<'c, Database = MySql>,
    {
        <(O,)>::from_row(&self.inner.fetch_one(executor).await?).map(|(o,)| o)
    }

    /// The first row's first column, if there is a row.
    pub(crate) async fn fetch_optional<'c, E>(self, executor: E) -> Result<Option<O>, sqlx::Error>
    where
        E: Executor<'c, Database = MySql>,
    {
        match self.inner.fetch_optional(executor).await? {
            Some(row) => <(O,)>::from_row(&row).map(|(o,)| Some(o)),
            None => Ok(None),
        }
    }
}

/// Runs `query`, an `INSERT` of one row, and returns the new row's
/// `AUTO_INCREMENT` id (MySQL has no `RETURNING`).
pub(crate) async fn inserted_id(
    query: Query<'_>,
    conn: &mut sqlx::MySqlConnection,
) -> Result<i64, sqlx::Error> {
    let done = query.execute(conn).await?;
    i64::try_from(done.last_insert_id()).map_err(|e| sqlx::Error::Decode(Box::new(e)))
}

// The batch binds of the inbox and the comparisons: JSON arrays, read
// back with `JSON_TABLE`.
crate::inbox::json_binds::json_inbox_binds!(Query<'_>);
crate::comparisons::json_comparison_binds!(Query<'_>);

#[cfg(test)]
mod tests {
    use super::translate;

    #[test]
    fn numbered_parameters_become_positional_in_the_order_they_appear() {
        let t = translate(
            "UPDATE t SET a = $2, b = '$1 stays', c = CAST($3 AS text) WHERE id = $1 AND d = $2 \
             ORDER BY x DESC NULLS LAST",
        );
        assert_eq!(
            t.sql,
            "UPDATE t SET a = ?, b = '$1 stays', c = CAST(? AS CHAR) WHERE id = ? AND d = ? ORDER BY x DESC"
        );
        assert_eq!(t.order, vec![2, 3, 1, 2]);
    }

    #[test]
    fn quoted_names_and_filtered_aggregates_are_written_as_mysql_reads_them() {
        let t = translate(
            "SELECT o.k AS \"key\", COUNT(*) FILTER (WHERE (a = 1) OR b > $1) AS n, \
             MAX(x.y) FILTER (WHERE z = '\"') FROM t",
        );
        assert_eq!(
            t.sql,
            "SELECT o.k AS `key`, COUNT(CASE WHEN (a = 1) OR b > ? THEN 1 END) AS n, \
             MAX(CASE WHEN z = '\"' THEN x.y END) FROM t"
        );
    }
}
