//! The parameter lists of statements built for a batch of rows: `IN (…)`
//! lists and multi-row `VALUES`, numbered `$n` as both backends take them
//! (or `?` in order, for SQLite alone); and a database error as the
//! proxy's.

use crate::error::ProxyError;

/// `$first, $first+1, …`: `n` placeholders, for an `IN (…)` list.
pub(crate) fn placeholders(first: usize, n: usize) -> String {
    let mut text = String::with_capacity(n * 6);
    push_placeholders(&mut text, Some(first), n);
    text
}

/// Appends `n` placeholders, `, `-separated: numbered from `first`, or
/// each a `?`. One string written in place: every commit batch builds its
/// statements' lists anew.
fn push_placeholders(text: &mut String, first: Option<usize>, n: usize) {
    use std::fmt::Write as _;
    for i in 0..n {
        if i > 0 {
            text.push_str(", ");
        }
        match first {
            Some(first) => {
                let _ = write!(text, "${}", first + i);
            }
            None => text.push('?'),
        }
    }
}

/// `($first, …), ($first+columns, …), …`: the `VALUES` of `rows` rows,
/// numbered from `$first` (`$1` for a statement of its own); `None`: each
/// a `?`, which SQLite numbers in the order they come, on across the
/// statements of a text of several. SQLite finds a parameter's number by
/// name with a scan of the statement's names, when it parses and again
/// when sqlx binds, so a text of a few hundred `$n` costs their square;
/// a `?` has no name.
pub(crate) fn value_rows_from(first: Option<usize>, rows: usize, columns: usize) -> String {
    let mut text = String::with_capacity(rows * (columns * 6 + 4));
    for row in 0..rows {
        if row > 0 {
            text.push_str(", ");
        }
        text.push('(');
        push_placeholders(&mut text, first.map(|f| f + row * columns), columns);
        text.push(')');
    }
    text
}

/// The rows a multi-row `INSERT` of `rows` rows gets in a SQLite text of
/// `?`s ([`inserted_rows`]): the next power of two, so that a group
/// commit's texts come in a few shapes, each prepared once and kept by
/// the connection, not one text a batch size, each parsed anew
/// (BENCHMARKS.md, "Sustained distinct misses").
pub(crate) fn padded_rows(rows: usize) -> usize {
    rows.next_power_of_two()
}

/// What a multi-row `INSERT` takes its `rows` rows from. Numbered from
/// `$first`: their `VALUES`. `None`: a `SELECT` of `?`-rows that drops
/// every row whose first value is NULL, so a batch's rows can be padded
/// to [`padded_rows`] with NULL rows (bound as NULLs: in a text of several
/// statements the values are taken in order across them). A `SELECT`
/// with a `WHERE` also keeps an `ON CONFLICT` after it from being read as
/// a join's.
pub(crate) fn inserted_rows(first: Option<usize>, rows: usize, columns: usize) -> String {
    match first {
        Some(_) => format!("VALUES {}", value_rows_from(first, rows, columns)),
        None => format!(
            "SELECT * FROM (VALUES {}) WHERE column1 IS NOT NULL",
            value_rows_from(None, rows, columns)
        ),
    }
}

/// A database error as the proxy's.
pub(crate) fn db_error(e: sqlx::Error) -> ProxyError {
    ProxyError::Metadata(e.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn lists_number_their_parameters_from_where_they_start() {
        assert_eq!(super::placeholders(3, 2), "$3, $4");
        assert_eq!(
            super::value_rows_from(Some(1), 2, 3),
            "($1, $2, $3), ($4, $5, $6)"
        );
        assert_eq!(super::value_rows_from(Some(5), 1, 2), "($5, $6)");
        assert_eq!(super::value_rows_from(None, 2, 2), "(?, ?), (?, ?)");
        assert_eq!(super::placeholders(1, 0), "");
        assert_eq!(super::value_rows_from(None, 0, 4), "");
        assert_eq!(super::inserted_rows(Some(3), 1, 2), "VALUES ($3, $4)");
        assert_eq!(
            super::inserted_rows(None, 2, 1),
            "SELECT * FROM (VALUES (?), (?)) WHERE column1 IS NOT NULL"
        );
        let padded: Vec<usize> = [1, 2, 3, 5, 16, 17, 64].map(super::padded_rows).into();
        assert_eq!(padded, [1, 2, 4, 8, 16, 32, 64]);
    }
}
