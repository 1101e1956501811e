//! The schema as operators see it.

use serde_json::json;

use crate::support::{TestApp, TestDb, job};

#[tokio::test]
async fn job_row_type_matches_the_table_column_for_column() {
    let db = TestDb::new().await;
    let columns: Vec<String> = sqlx::query_scalar(
        "select attname::text from pg_attribute
          where attrelid = 'ojs_job'::regclass and attnum > 0 and not attisdropped
          order by attnum",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(columns, ojsd::job::JOB_COLUMNS);
}

#[tokio::test]
async fn completed_jobs_table_and_the_view_of_all_jobs_have_the_job_columns_in_order() {
    let db = TestDb::new().await;
    for relation in ["ojs_job_done", "ojs_job_all"] {
        let columns: Vec<String> = sqlx::query_scalar(
            "select attname::text from pg_attribute
              where attrelid = $1::regclass and attnum > 0 and not attisdropped
              order by attnum",
        )
        .bind(relation)
        .fetch_all(&db.pool)
        .await
        .unwrap();
        // ojs_job_done has no phase nor in_flight (its jobs are all taken), nor durable (they are
        // never claimed again); the view adds them.
        let expected: Vec<&str> = match relation {
            "ojs_job_done" => ojsd::job::JOB_COLUMNS
                .iter()
                .copied()
                .filter(|c| !matches!(*c, "phase" | "in_flight" | "durable"))
                .collect(),
            _ => ojsd::job::JOB_COLUMNS.to_vec(),
        };
        assert_eq!(columns, expected, "{relation}");
    }
}

/// No index of `ojs_job` reads `state` (the waiting-job indexes read `phase`, the in-flight
/// ones `in_flight`): a change of state after the claim (active to completed, cancelled) must
/// touch no index for the update to be HOT.
#[tokio::test]
async fn no_index_of_the_claim_table_reads_the_state() {
    let db = TestDb::new().await;
    let reading_state: Vec<String> = sqlx::query_scalar(
        "select i.indexrelid::regclass::text
           from pg_index i
          where i.indrelid = 'ojs_job'::regclass
            and (exists (select 1 from pg_attribute a
                          where a.attrelid = i.indrelid and a.attname = 'state'
                            and a.attnum = any(i.indkey))
                 or pg_get_expr(i.indpred, i.indrelid) ~ '\\mstate\\M'
                 or pg_get_expr(i.indexprs, i.indrelid) ~ '\\mstate\\M')
          order by 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(reading_state, Vec::<String>::new());
}

#[tokio::test]
async fn every_table_view_and_column_is_commented() {
    let db = TestDb::new().await;
    let uncommented: Vec<String> = sqlx::query_scalar(
        "select c.relname::text || coalesce('.' || a.attname::text, '')
           from pg_class c
           join pg_namespace n on n.oid = c.relnamespace and n.nspname = 'public'
           left join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
          where c.relkind in ('r', 'p', 'v') and c.relname like 'ojs\\_%'
            -- A day's partition of ojs_job_done is described by its parent.
            and not c.relispartition
            and (obj_description(c.oid, 'pg_class') is null
                 or (a.attnum is not null and col_description(c.oid, a.attnum) is null))",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        uncommented.is_empty(),
        "missing COMMENT ON: {uncommented:?}"
    );
}

#[tokio::test]
async fn every_function_and_trigger_is_commented() {
    let db = TestDb::new().await;
    let uncommented: Vec<String> = sqlx::query_scalar(
        "select 'function ' || p.oid::regprocedure::text
           from pg_proc p
           join pg_namespace n on n.oid = p.pronamespace and n.nspname = 'public'
          where p.proname like 'ojs\\_%'
            and obj_description(p.oid, 'pg_proc') is null
         union all
         select 'trigger ' || t.tgname::text || ' on ' || t.tgrelid::regclass::text
           from pg_trigger t
           join pg_class c on c.oid = t.tgrelid
           join pg_namespace n on n.oid = c.relnamespace and n.nspname = 'public'
          where not t.tgisinternal and t.tgname like 'ojs\\_%'
            -- A partition's copy of its parent's trigger is described by the parent's.
            and t.tgparentid = 0
            and obj_description(t.oid, 'pg_trigger') is null",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        uncommented.is_empty(),
        "missing COMMENT ON: {uncommented:?}"
    );
}

#[tokio::test]
async fn constraints_are_named_for_what_they_protect() {
    let db = TestDb::new().await;
    let unnamed: Vec<String> = sqlx::query_scalar(
        "select conname::text from pg_constraint
          where conrelid in ('ojs_job'::regclass, 'ojs_worker'::regclass)
            and conname not like 'ojs\\_%'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(unnamed.is_empty(), "{unnamed:?}");
    // The state invariants hold against direct SQL too (an available job without enqueued_at).
    let err = sqlx::query("insert into ojs_job (id, type, queue, args, state, max_attempts, retry, timeout_ms) values (gen_random_uuid(), 'a', 'q', '[]', 'available', 3, '{}', 1000)")
        .execute(&db.pool)
        .await
        .unwrap_err();
    let constraint = err
        .as_database_error()
        .and_then(|e| e.constraint())
        .map(str::to_owned);
    assert_eq!(
        constraint.as_deref(),
        Some("ojs_job_available_has_enqueued_at"),
        "{err}"
    );
}

#[tokio::test]
async fn migrations_are_idempotent() {
    let db = TestDb::new().await;
    let report = ojsd_migrate::run_with(&db.options).await.unwrap();
    assert!(report.applied.is_empty(), "{:?}", report.applied);
}

#[tokio::test]
async fn the_fetch_claim_is_a_range_scan_of_the_dispatch_index_with_and_without_aging() {
    let db = TestDb::new().await;
    // A backlog where half the jobs age and half do not, so that the planner has real
    // statistics to choose from (no enable_seqscan games).
    sqlx::raw_sql(
        "insert into ojs_job (id, type, queue, args, meta, priority, state, max_attempts, retry,
                              timeout_ms, extra, enqueued_at, priority_aging_ms)
         select gen_random_uuid(), 'a.b', 'q' || (i % 10), '[]', '{}', i % 5, 'available', 3,
                '{}', 1000, '{}', now() - i * interval '1 ms',
                case when i % 2 = 0 then 60000 end
           from generate_series(1, 20000) i;
         analyze ojs_job;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // The claim's ORDER BY, as written in src/store/job/claim.rs.
    let plan: Vec<String> = sqlx::query_scalar(
        "explain select id from ojs_job where queue = 'q3' and phase = 'available'
            and rate_held is null
          order by (case when priority_aging_ms is null then priority else 0 end),
                   (date_part('epoch', enqueued_at - timestamptz '1970-01-01 00:00:00+00') * 1000
                    + coalesce(priority * priority_aging_ms, 0)),
                   seq
          limit 10 for update skip locked",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let plan = plan.join("\n");
    assert!(
        plan.contains("Index Scan using ojs_job_dispatch_idx"),
        "{plan}"
    );
    assert!(
        !plan.contains("Sort"),
        "the index order is the claim order:\n{plan}"
    );
    let claim_source = include_str!("../../src/store/job/claim.rs");
    assert!(
        claim_source.contains(
            "order by (case when priority_aging_ms is null then priority else 0 end),
                      (date_part('epoch', enqueued_at - timestamptz '1970-01-01 00:00:00+00') * 1000
                       + coalesce(priority * priority_aging_ms, 0)),
                      seq"
        ),
        "the claim orders by the indexed expressions"
    );
}

#[tokio::test]
async fn operator_views_answer_the_usual_questions() {
    let app = TestApp::spawn().await;
    for _ in 0..3 {
        app.push(job("a.b", "mail")).await;
    }
    let active = app.push_id(job("a.b", "reports")).await;
    app.post(
        "/ojs/v1/workers/fetch",
        json!({"queues": ["reports"], "worker_id": "w9", "visibility_timeout_ms": 1000}),
    )
    .await
    .expect(200);
    let dead = app
        .push_id(json!({"type": "a.b", "args": [], "queue": "mail", "retry": {"max_attempts": 1}}))
        .await;
    app.sql(&format!(
        "update ojs_job set priority = 0 where id = '{dead}'"
    ))
    .await;
    app.fetch_one("mail", "w1").await;
    app.nack(json!({"job_id": dead, "error": {"code": "boom", "message": "it broke"}}))
        .await
        .expect(200);

    let counts: Vec<(String, String, i64)> =
        sqlx::query_as("select queue, state::text, jobs from ojs_job_counts order by queue, state")
            .fetch_all(app.pool())
            .await
            .unwrap();
    assert_eq!(
        counts,
        [
            ("mail".to_owned(), "available".to_owned(), 3),
            ("mail".to_owned(), "discarded".to_owned(), 1),
            ("reports".to_owned(), "active".to_owned(), 1),
        ]
    );
    app.sql(&format!(
        "update ojs_job set visible_until = now() - interval '5 seconds' where id = '{active}'"
    ))
    .await;
    let overdue: Vec<(String, Option<String>)> =
        sqlx::query_as("select id::text, worker_id from ojs_job_overdue")
            .fetch_all(app.pool())
            .await
            .unwrap();
    assert_eq!(overdue, [(active, Some("w9".to_owned()))]);
    let dead_letters: Vec<(String, Option<String>, Option<String>)> =
        sqlx::query_as("select id::text, error_code, error_message from ojs_dead_letter")
            .fetch_all(app.pool())
            .await
            .unwrap();
    assert_eq!(
        dead_letters,
        [(dead, Some("boom".to_owned()), Some("it broke".to_owned()))]
    );
}

/// Every enqueue takes the enqueue gate inside the SQL function `ojs_config_generation_locked`,
/// and pool changes take it from Rust: both must name the same key.
#[tokio::test]
async fn the_enqueue_gate_is_the_key_the_sql_function_takes() {
    let db = TestDb::new().await;
    let source: String = sqlx::query_scalar(
        "select prosrc from pg_proc where proname = 'ojs_config_generation_locked'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let (namespace, key) = ojsd::store::locks::ENQUEUE_GATE;
    assert!(
        source.contains(&format!("pg_advisory_xact_lock_shared({namespace}, {key})")),
        "{source}"
    );
}

/// The tenant-fair claim is a range scan of `ojs_job_fair_idx` too: its filter keeps the
/// index's predicate and its order is the index's.
#[tokio::test]
async fn the_fair_claim_is_a_range_scan_of_the_fair_index() {
    let db = TestDb::new().await;
    sqlx::raw_sql(
        "insert into ojs_job (id, type, queue, args, meta, priority, state, max_attempts, retry,
                              timeout_ms, extra, enqueued_at, tenant, fair_key)
         select gen_random_uuid(), 'a.b', 'q' || (i % 10), '[]', '{}', i % 5, 'available', 3,
                '{}', 1000, '{}', now() - i * interval '1 ms', 't' || (i % 100), i / 100.0
           from generate_series(1, 20000) i;
         analyze ojs_job;",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "explain select id from ojs_job
          where queue = 'q3' and phase = 'available' and fair_key is not null
            and rate_held is null
          order by priority, fair_key, seq
          limit 10 for update skip locked",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let plan = plan.join("\n");
    assert!(plan.contains("Index Scan using ojs_job_fair_idx"), "{plan}");
    assert!(
        !plan.contains("Sort"),
        "the index order is the claim order:\n{plan}"
    );
    let claim_source = include_str!("../../src/store/job/claim.rs");
    assert!(
        claim_source.contains(
            "               and fair_key is not null
             -- The order of ojs_job_fair_idx (migration V8): priority, then the tenant-fair
             -- virtual finish time, then seq.
             order by priority, fair_key, seq"
        ),
        "the fair claim filters and orders as the index does"
    );
}

#[tokio::test]
async fn a_claim_writes_the_new_row_version_on_the_jobs_own_page() {
    // ojs_job's fillfactor (migration V17) leaves room on every page for the claim's new row
    // versions; with full pages they would move to other pages, each behind a WAL record of
    // its own that marks the old version locked.
    let app = TestApp::spawn().await;
    let jobs: Vec<serde_json::Value> = (0..300)
        .map(|i| json!({"type": "a.b", "args": [i], "queue": "pages"}))
        .collect();
    app.post("/ojs/v1/jobs/batch", json!({"jobs": jobs}))
        .await
        .expect(201);
    let page_of = |when: &'static str| {
        let pool = app.db.pool.clone();
        async move {
            let pages: Vec<(String, String)> = sqlx::query_as(
                "select id::text, (ctid::text::point)[0]::int8::text from ojs_job order by id",
            )
            .fetch_all(&pool)
            .await
            .unwrap();
            assert_eq!(pages.len(), 300, "{when}");
            pages
        }
    };
    let before = page_of("before the claim").await;
    let distinct: std::collections::HashSet<&String> = before.iter().map(|(_, p)| p).collect();
    assert!(
        distinct.len() > 1,
        "the jobs fill several pages: {distinct:?}"
    );
    let fetched = app
        .fetch(json!({"queues": ["pages"], "count": 300, "worker_id": "w"}))
        .await;
    assert_eq!(fetched.len(), 300);
    let after = page_of("after the claim").await;
    // A claimed row is a little longer (reservation columns set), so a page's last few may not
    // fit; with full pages none would.
    let stayed = before.iter().zip(&after).filter(|(b, a)| b == a).count();
    assert!(
        stayed >= 200,
        "{stayed} of 300 claimed rows stayed on their page"
    );
}
