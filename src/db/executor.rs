//! [`Db`]: the database as every statement of the server reaches it.
//!
//! Connected directly (the default), it is the sqlx pool: a statement runs on a pooled
//! connection with its prepared statement cached, in one round trip.
//!
//! Through a connection pooler in transaction mode (`OJS_DATABASE_POOLER=transaction`, e.g.
//! PgBouncer), a server connection belongs to a client only for the length of a transaction,
//! and nothing of a session survives it. sqlx prepares a statement (Parse, Describe, Sync) and
//! then runs it (Bind, Execute, Sync): two exchanges, each its own implicit transaction, which a
//! pooler may send to two different servers — where the prepared statement does not exist, or
//! where another client's statement of the same name does. So in that mode every statement runs
//! in an explicit transaction, opened by one simple-protocol message that drops the prepared
//! statements left on that server and sets what a direct connection sets at its start
//! (`Db::begin`), and committed before the statement's answer is returned; and no statement is
//! cached on the connection (the pool is opened with a statement cache of 0). Four round trips instead of one: the price of a pooler without protocol-level
//! prepared statements (PgBouncer before 1.21).

use std::sync::Arc;

use futures_core::future::BoxFuture;
use futures_core::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use sqlx::postgres::{PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{Either, Execute, Executor, PgPool, Postgres, Transaction};

/// The database pool as the server's statements use it (see the module docs).
#[derive(Debug, Clone)]
pub struct Db {
    pool: PgPool,
    /// Through a transaction-mode pooler: the simple-protocol message that opens each
    /// transaction (`BEGIN` and the session's settings, made local to it).
    pooled: Option<Arc<str>>,
}

impl Db {
    /// `pool`, connected directly to Postgres.
    pub fn direct(pool: PgPool) -> Db {
        Db { pool, pooled: None }
    }

    /// `pool`, connected through a transaction-mode pooler: each transaction starts with
    /// `BEGIN` and then sets each of `settings` (name, value) for its length.
    pub fn pooled(pool: PgPool, settings: &[(&str, String)]) -> Db {
        // sqlx names the statements it prepares even when it caches none (`sqlx_s_1`, ...,
        // counted per client connection) and never closes them: whatever another client left
        // on the server this transaction lands on is dropped first, so no name collides.
        let mut begin = String::from("BEGIN; DEALLOCATE ALL");
        if !settings.is_empty() {
            begin.push_str("; SELECT ");
            let set: Vec<String> = settings
                .iter()
                .map(|(name, value)| format!("set_config({}, {}, true)", quote(name), quote(value)))
                .collect();
            begin.push_str(&set.join(", "));
        }
        Db {
            pool,
            pooled: Some(begin.into()),
        }
    }

    /// The sqlx pool, for what needs a connection of its own (a listener, kept connections):
    /// such a user runs its statements in transactions itself when [`Db::is_pooled`].
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Whether statements reach Postgres through a transaction-mode pooler.
    pub fn is_pooled(&self) -> bool {
        self.pooled.is_some()
    }

    /// A transaction on a pooled connection (with the session's settings, through a pooler).
    pub async fn begin(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        match &self.pooled {
            None => self.pool.begin().await,
            Some(begin) => self.pool.begin_with(begin.to_string()).await,
        }
    }

    /// Opens, on a connection taken from the pool for a few statements, what [`Db::begin`]
    /// opens, when statements go through a pooler (nothing otherwise): the caller ends it with
    /// [`Db::end_on`].
    pub async fn begin_on(&self, conn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
        if let Some(begin) = &self.pooled {
            conn.execute(&**begin).await?;
        }
        Ok(())
    }

    /// Ends what [`Db::begin_on`] opened: commits it when `commit`, else rolls it back.
    pub async fn end_on(
        &self,
        conn: &mut sqlx::PgConnection,
        commit: bool,
    ) -> Result<(), sqlx::Error> {
        if self.pooled.is_some() {
            conn.execute(if commit { "COMMIT" } else { "ROLLBACK" })
                .await?;
        }
        Ok(())
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

impl From<PgPool> for Db {
    /// The pool, connected directly.
    fn from(pool: PgPool) -> Db {
        Db::direct(pool)
    }
}

/// A string literal of SQL.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// What the store's multi-statement functions take (`store::Pool`): a transaction opened as
/// [`Db::begin`] opens it. `acquire` hands out a connection as the pool has it: behind a
/// pooler, statements on it must run in a transaction of the caller's.
impl<'c> sqlx::Acquire<'c> for &'c Db {
    type Database = Postgres;
    type Connection = sqlx::pool::PoolConnection<Postgres>;

    fn acquire(self) -> BoxFuture<'c, Result<Self::Connection, sqlx::Error>> {
        Box::pin(self.pool.acquire())
    }

    fn begin(self) -> BoxFuture<'c, Result<Transaction<'c, Postgres>, sqlx::Error>> {
        Box::pin(async move {
            let tx: Transaction<'c, Postgres> = Db::begin(self).await?;
            Ok(tx)
        })
    }
}

impl<'c> Executor<'c> for &'c Db {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if self.pooled.is_none() {
            return self.pool.fetch_many(query);
        }
        // Every row is read before the commit, and none is handed out unless it succeeded.
        let db = self.clone();
        futures_util::stream::once(async move {
            let mut tx = db.begin().await?;
            let items: Vec<_> = (&mut *tx).fetch_many(query).try_collect().await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(futures_util::stream::iter(items.into_iter().map(Ok)))
        })
        .try_flatten()
        .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if self.pooled.is_none() {
            return self.pool.fetch_optional(query);
        }
        let db = self.clone();
        Box::pin(async move {
            let mut tx = db.begin().await?;
            let row = (&mut *tx).fetch_optional(query).await?;
            tx.commit().await?;
            Ok(row)
        })
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<sqlx::Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.pool.describe(sql)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pooled_transaction_opens_with_the_sessions_settings_quoted() {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://localhost/x")
            .unwrap();
        let db = Db::pooled(
            pool,
            &[("jit", "off".into()), ("ojs.source", "ojs://a'b".into())],
        );
        assert_eq!(
            db.pooled.as_deref(),
            Some(
                "BEGIN; DEALLOCATE ALL; SELECT set_config('jit', 'off', true), \
             set_config('ojs.source', 'ojs://a''b', true)"
            )
        );
        assert!(db.is_pooled());
    }
}
