//! Pages of listings and their totals: a total is counted exactly up to [`EXACT_COUNT_UP_TO`]
//! matches, and past that the planner's estimate is answered and said to be one. Counting a
//! million finished jobs exactly costs Postgres hundreds of milliseconds, at every poll of an
//! admin UI; whether more follow a page stays exact (a page is read with one row more).

use sqlx::{PgConnection, Postgres, QueryBuilder};

/// Matches counted exactly; past this many a listing answers the planner's estimate.
pub const EXACT_COUNT_UP_TO: i64 = 10_000;

/// A page of a listing.
#[derive(Debug, Clone)]
pub struct Listed<T> {
    pub items: Vec<T>,
    /// How many match in all: exact, or the planner's estimate when `total_estimated`.
    pub total: i64,
    pub total_estimated: bool,
    /// Whether more follow this page.
    pub has_more: bool,
}

impl<T> Listed<T> {
    /// The page of `limit` from `offset` out of `rows`, read with (up to) one row more than
    /// `limit`; `count` gives the total when the page does not tell it (it is full, or past the
    /// end).
    pub async fn of<F>(
        mut rows: Vec<T>,
        limit: i64,
        offset: i64,
        count: F,
    ) -> Result<Self, sqlx::Error>
    where
        F: AsyncFnOnce() -> Result<(i64, bool), sqlx::Error>,
    {
        let has_more = rows.len() as i64 > limit;
        rows.truncate(usize::try_from(limit).unwrap_or(0));
        // A page short of its limit, not past the end, ends the listing: its end is the total.
        let (total, total_estimated) = if !has_more && (!rows.is_empty() || offset == 0) {
            (offset + rows.len() as i64, false)
        } else {
            count().await?
        };
        Ok(Listed {
            items: rows,
            total,
            total_estimated,
            has_more,
        })
    }
}

/// How many rows the `select` that `matches` writes answers (its columns do not matter): exact
/// up to [`EXACT_COUNT_UP_TO`]; past that the planner's estimate, never less than the count it
/// went past, and `true`.
pub async fn count_up_to(
    db: &mut PgConnection,
    matches: impl Fn(&mut QueryBuilder<'_, Postgres>),
) -> Result<(i64, bool), sqlx::Error> {
    let mut q = QueryBuilder::new("select count(*) from (");
    matches(&mut q);
    q.push(" limit ")
        .push_bind(EXACT_COUNT_UP_TO + 1)
        .push(") m");
    let counted: i64 = q.build_query_scalar().fetch_one(&mut *db).await?;
    if counted <= EXACT_COUNT_UP_TO {
        return Ok((counted, false));
    }
    let mut q = QueryBuilder::new("explain (format json) ");
    matches(&mut q);
    let plan: serde_json::Value = q.build_query_scalar().fetch_one(&mut *db).await?;
    let estimate = plan[0]["Plan"]["Plan Rows"].as_f64().unwrap_or(0.0) as i64;
    Ok((estimate.max(counted), true))
}
