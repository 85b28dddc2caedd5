//! The parameter lists of statements built for a batch of rows: `IN (…)`
//! lists and multi-row `VALUES`, numbered `$n` as both backends take them;
//! and a database error as the proxy's.

use crate::error::ProxyError;

/// `$first, $first+1, …`: `n` placeholders, for an `IN (…)` list.
pub(crate) fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `($first, …), ($first+columns, …), …`: the `VALUES` of `rows` rows,
/// numbered from `$first` (`$1` for a statement of its own; on from the
/// last statement's in a text of several).
pub(crate) fn value_rows_from(first: usize, rows: usize, columns: usize) -> String {
    (0..rows)
        .map(|row| format!("({})", placeholders(first + row * columns, columns)))
        .collect::<Vec<_>>()
        .join(", ")
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
            super::value_rows_from(1, 2, 3),
            "($1, $2, $3), ($4, $5, $6)"
        );
        assert_eq!(super::value_rows_from(5, 1, 2), "($5, $6)");
    }
}
