//! Multi-row INSERTs in a few fixed shapes: a batch of any size is cut into chunks of
//! [`SHAPES`] rows, and each shape's statement text is built once, so SQLite prepares each
//! statement once per connection (the writes of a group commit and the live counts use them).

use std::sync::OnceLock;

/// The row counts of the multi-row INSERTs of orders and idempotency answers, largest first.
/// A batch of any size is cut into these few shapes, so each statement is prepared once per
/// connection and found in sqlx's statement cache afterwards; with one statement per batch
/// size, most group commits of a storm re-prepared their INSERT.
pub(super) const SHAPES: [usize; 5] = [256, 64, 16, 4, 1];

/// `rows` cut greedily into chunks whose lengths are all in [`SHAPES`].
pub(super) fn shaped<T>(mut rows: &[T]) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        let n = SHAPES.into_iter().find(|&n| n <= rows.len())?;
        let (head, tail) = rows.split_at(n);
        rows = tail;
        Some(head)
    })
}

/// The text of a multi-row INSERT, built once per shape: formatting the statement (and its
/// placeholders) for every batch cost more instructions per won claim than binding its values.
pub(super) struct ShapedSql {
    head: &'static str,
    columns: usize,
    tail: &'static str,
    built: OnceLock<[String; SHAPES.len()]>,
}

impl ShapedSql {
    pub(super) const fn new(head: &'static str, columns: usize, tail: &'static str) -> Self {
        Self {
            head,
            columns,
            tail,
            built: OnceLock::new(),
        }
    }

    /// The statement for `rows` rows; `rows` is one of [`SHAPES`].
    pub(super) fn get(&'static self, rows: usize) -> &'static str {
        let built = self.built.get_or_init(|| {
            SHAPES.map(|n| {
                let row = format!("({})", vec!["?"; self.columns].join(", "));
                format!(
                    "{} VALUES {}{}",
                    self.head,
                    vec![row; n].join(", "),
                    self.tail
                )
            })
        });
        let i = SHAPES
            .iter()
            .position(|&n| n == rows)
            .expect("a fixed shape");
        &built[i]
    }
}
