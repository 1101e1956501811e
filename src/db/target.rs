//! Where the database is: one server, or several of which ojsd uses the one that takes writes.
//!
//! `DATABASE_URL` may name several hosts the way libpq does,
//! `postgres://user@db1:5432,db2:5432,db3/ojs?target_session_attrs=read-write`: every host
//! shares the user, password, database and parameters, and each may have its own port (5432
//! if it names none). ojsd connects to whichever host takes writes — a standby answers but is
//! passed over — and, when the one it uses fails or stops taking writes (a failover demoted
//! it), the outage prober ([`super::DbHealth::probe`]) tries every host again and points the
//! pool, and so the notification listener, at the new primary.
//!
//! `target_session_attrs` may be `read-write` (the default: ojsd only ever writes) or its
//! synonym here `primary`, or `any` (the first host that answers, writes or not: for a proxy
//! that routes to the primary itself). libpq's `read-only`, `standby` and `prefer-standby` are
//! refused: a job server cannot run on a standby.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};
use tokio::task::JoinSet;

/// Which hosts a connection may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAttrs {
    /// Only a server whose `transaction_read_only` is off.
    ReadWrite,
    /// Any server that accepts the connection.
    Any,
}

/// The database hosts and which of them the pool uses now.
#[derive(Debug)]
pub struct DbTarget {
    hosts: Vec<PgConnectOptions>,
    attrs: SessionAttrs,
    current: AtomicUsize,
}

/// A `DATABASE_URL` split into one URL per host, and its `target_session_attrs`.
#[derive(Debug, PartialEq, Eq)]
pub struct SplitUrl {
    pub urls: Vec<String>,
    pub attrs: SessionAttrs,
}

/// Splits a libpq-style URL naming several hosts into one URL per host (which sqlx can read),
/// and takes `target_session_attrs` out of its query. A URL naming one host comes back as it
/// was, less that parameter.
pub fn split_url(url: &str) -> Result<SplitUrl, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL sqlx reads either; let it say why.
        return Ok(SplitUrl {
            urls: vec![url.to_owned()],
            attrs: SessionAttrs::ReadWrite,
        });
    };
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.find('/') {
        Some(at) => before_query.split_at(at),
        None => (before_query, ""),
    };
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    let mut attrs = SessionAttrs::ReadWrite;
    let mut kept = Vec::new();
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "target_session_attrs" => {
                attrs = match value {
                    "read-write" | "primary" => SessionAttrs::ReadWrite,
                    "any" => SessionAttrs::Any,
                    other => {
                        return Err(format!(
                            "target_session_attrs={other} is not supported: ojsd writes to the \
                             database, so only read-write (the default), primary or any are \
                             accepted"
                        ));
                    }
                }
            }
            "host" | "hostaddr" | "port" if value.contains(',') || value.contains("%2C") => {
                return Err(format!(
                    "a list in the {key} parameter is not read; name the hosts in the URL \
                     instead: postgres://user@db1:5432,db2:5432/ojs"
                ));
            }
            _ => kept.push(pair),
        }
    }
    let query = if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    };
    let userinfo = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    let urls = hosts
        .split(',')
        .map(|host| {
            if host.is_empty() && hosts.contains(',') {
                return Err("an empty host in the list of DATABASE_URL's hosts".to_owned());
            }
            Ok(format!("{scheme}://{userinfo}{host}{path}{query}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SplitUrl { urls, attrs })
}

/// How a host is named in logs and errors: `host:port`, or the socket directory.
pub fn describe(options: &PgConnectOptions) -> String {
    match options.get_socket() {
        Some(socket) => socket.display().to_string(),
        None => format!("{}:{}", options.get_host(), options.get_port()),
    }
}

/// Whether the server `conn` reached takes writes (`transaction_read_only` off).
pub async fn takes_writes(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    // A bare string: one simple-protocol message (no prepared statement), which a
    // transaction-mode pooler serves as a whole.
    let row = sqlx::Executor::fetch_one(conn, "show transaction_read_only").await?;
    let read_only: String = sqlx::Row::try_get(&row, 0)?;
    Ok(read_only != "on")
}

/// Connects to the server `options` names: to its database, or, when that does not exist yet
/// (ojsd creates it on start), to the `postgres` database.
async fn connect_to_server(options: &PgConnectOptions) -> Result<PgConnection, sqlx::Error> {
    match options.connect().await {
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("3D000") => {
            options.clone().database("postgres").connect().await
        }
        answer => answer,
    }
}

impl DbTarget {
    /// A target of `hosts` (at least one), tried in their order.
    pub fn new(hosts: Vec<PgConnectOptions>, attrs: SessionAttrs) -> DbTarget {
        assert!(!hosts.is_empty(), "a database target needs a host");
        DbTarget {
            hosts,
            attrs,
            current: AtomicUsize::new(0),
        }
    }

    /// The same target with `f` applied to every host's options.
    pub fn map(self, f: impl Fn(PgConnectOptions) -> PgConnectOptions) -> DbTarget {
        DbTarget {
            hosts: self.hosts.into_iter().map(f).collect(),
            attrs: self.attrs,
            current: self.current,
        }
    }

    /// Whether connections must reach a server that takes writes.
    pub fn requires_writes(&self) -> bool {
        self.attrs == SessionAttrs::ReadWrite
    }

    /// Every host, in the order given.
    pub fn hosts(&self) -> &[PgConnectOptions] {
        &self.hosts
    }

    /// The options of the host in use.
    pub fn current(&self) -> PgConnectOptions {
        self.hosts[self.current.load(Ordering::Relaxed)].clone()
    }

    /// Tries every host at once and makes the first to answer as required (see
    /// [`SessionAttrs`]) the one in use; returns its options and whether that changed the host.
    /// Each attempt may take `timeout`. The error names what every host answered.
    pub async fn find(&self, timeout: Duration) -> Result<(PgConnectOptions, bool), String> {
        let mut attempts = JoinSet::new();
        for (index, options) in self.hosts.iter().enumerate() {
            let options = options.clone();
            let writes = self.requires_writes();
            attempts.spawn(async move {
                let attempt = async {
                    let mut conn = connect_to_server(&options)
                        .await
                        .map_err(|e| e.to_string())?;
                    let usable =
                        !writes || takes_writes(&mut conn).await.map_err(|e| e.to_string())?;
                    let _ = conn.close().await;
                    if usable {
                        Ok(())
                    } else {
                        Err("takes no writes (a standby)".to_owned())
                    }
                };
                let answer = match tokio::time::timeout(timeout, attempt).await {
                    Ok(answer) => answer,
                    Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
                };
                (index, answer)
            });
        }
        let mut failures = Vec::new();
        while let Some(joined) = attempts.join_next().await {
            let Ok((index, answer)) = joined else {
                continue;
            };
            match answer {
                Ok(()) => {
                    let before = self.current.swap(index, Ordering::Relaxed);
                    return Ok((self.hosts[index].clone(), before != index));
                }
                Err(why) => failures.push((index, why)),
            }
        }
        failures.sort_by_key(|(index, _)| *index);
        Err(failures
            .into_iter()
            .map(|(index, why)| format!("{}: {why}", describe(&self.hosts[index])))
            .collect::<Vec<_>>()
            .join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> SplitUrl {
        split_url(url).expect("a URL ojsd reads")
    }

    #[test]
    fn a_url_with_one_host_is_kept_as_it_is() {
        let url = "postgres://postgres:pw@127.0.0.1:5432/ojs?sslmode=disable";
        assert_eq!(
            split(url),
            SplitUrl {
                urls: vec![url.to_owned()],
                attrs: SessionAttrs::ReadWrite
            }
        );
        assert_eq!(split("postgres:///ojs").urls, ["postgres:///ojs"]);
    }

    #[test]
    fn several_hosts_share_everything_but_the_host_and_port() {
        let parsed = split(
            "postgresql://u:p@w@db1:5433,db2,[::1]:6000/ojs?sslmode=require&target_session_attrs=any",
        );
        assert_eq!(parsed.attrs, SessionAttrs::Any);
        assert_eq!(
            parsed.urls,
            [
                "postgresql://u:p@w@db1:5433/ojs?sslmode=require",
                "postgresql://u:p@w@db2/ojs?sslmode=require",
                "postgresql://u:p@w@[::1]:6000/ojs?sslmode=require",
            ]
        );
        assert_eq!(
            split("postgres://a,b").urls,
            ["postgres://a", "postgres://b"]
        );
    }

    #[test]
    fn only_session_attributes_that_can_write_are_accepted() {
        for (value, attrs) in [
            ("read-write", SessionAttrs::ReadWrite),
            ("primary", SessionAttrs::ReadWrite),
            ("any", SessionAttrs::Any),
        ] {
            let url = format!("postgres://h/ojs?target_session_attrs={value}");
            assert_eq!(split(&url).attrs, attrs);
            assert_eq!(split(&url).urls, ["postgres://h/ojs"]);
        }
        for value in ["read-only", "standby", "prefer-standby", ""] {
            let url = format!("postgres://a,b/ojs?target_session_attrs={value}");
            assert!(
                split_url(&url)
                    .unwrap_err()
                    .contains("target_session_attrs")
            );
        }
        assert!(split_url("postgres://u@a,,b/ojs").is_err());
        assert!(
            split_url("postgres:///ojs?host=a,b")
                .unwrap_err()
                .contains("name the hosts in the URL")
        );
    }
}
