//! The parameter lists of statements built for a batch of rows: `IN (…)`
//! lists and multi-row `VALUES`, numbered `$n` as both backends take them
//! (or `?` in order, for SQLite alone); and a database error as the
//! proxy's.

use crate::error::ProxyError;

/// `$first, $first+1, …`: `n` placeholders, for an `IN (…)` list.
pub(crate) fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `($first, …), ($first+columns, …), …`: the `VALUES` of `rows` rows,
/// numbered from `$first` (`$1` for a statement of its own); `None`: each
/// a `?`, which SQLite numbers in the order they come, on across the
/// statements of a text of several. SQLite finds a parameter's number by
/// name with a scan of the statement's names, when it parses and again
/// when sqlx binds, so a text of a few hundred `$n` costs their square;
/// a `?` has no name.
pub(crate) fn value_rows_from(first: Option<usize>, rows: usize, columns: usize) -> String {
    let row = |row: usize| match first {
        Some(first) => placeholders(first + row * columns, columns),
        None => vec!["?"; columns].join(", "),
    };
    (0..rows)
        .map(|r| format!("({})", row(r)))
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
            super::value_rows_from(Some(1), 2, 3),
            "($1, $2, $3), ($4, $5, $6)"
        );
        assert_eq!(super::value_rows_from(Some(5), 1, 2), "($5, $6)");
        assert_eq!(super::value_rows_from(None, 2, 2), "(?, ?), (?, ?)");
    }
}
