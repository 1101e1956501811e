//! The admin job listing (`GET /ojs/v1/admin/jobs`, `store::job_list`): beside completed jobs,
//! the newest-first listing reads them from the latest completions back, and must answer
//! exactly what a full sort of every match answers, whatever the page, the filter, long-running
//! jobs and ties; past 10,000 matches the total is an estimate, said to be one, and `has_more`
//! stays exact.

use serde_json::{Value, json};

use crate::support::{TestApp, job};

/// Completed jobs written straight into `ojs_job_done`: job `g` of `1..=n` is created `g`
/// seconds after a fixed start (every 7th shares its creation time with the one before) and
/// completes a second later, except every 50th, which ran for a day and completes last of all.
/// Queues `q0`..`q2`, types `a.x` and (every 5th) `b.y`.
async fn insert_completed(app: &TestApp, n: i32) {
    sqlx::query(
        r#"
        insert into ojs_job_done (id, seq, type, queue, args, state, attempt, max_attempts,
                                  retry, timeout_ms, created_at, enqueued_at, started_at,
                                  completed_at, result)
        select gen_random_uuid(), nextval('ojs_job_seq_seq'),
               case when g % 5 = 0 then 'b.y' else 'a.x' end, 'q' || (g % 3),
               json_build_array(g), 'completed', 1, 3, '{}', 1800000, c, c, c,
               case when g % 50 = 0 then now() + interval '1 day' - g * interval '1 second'
                    else c + interval '1 second' end,
               'null'
          from generate_series(1, $1) g,
               lateral (select timestamptz '2026-11-01 00:00:00+00'
                               + (g - (g % 7 = 0)::int) * interval '1 second' as c) x
        "#,
    )
    .bind(n)
    .execute(app.pool())
    .await
    .unwrap();
    sqlx::query("analyze ojs_job_done")
        .execute(app.pool())
        .await
        .unwrap();
}

/// The ids a full sort of every job matching `condition` answers, newest created first.
async fn sorted(app: &TestApp, condition: &str, limit: i64, offset: i64) -> Vec<String> {
    sqlx::query_scalar(&format!(
        "select id::text from ojs_job_all where {condition} \
          order by created_at desc, seq desc limit {limit} offset {offset}"
    ))
    .fetch_all(app.pool())
    .await
    .unwrap()
}

async fn matching(app: &TestApp, condition: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "select count(*) from ojs_job_all where {condition}"
    ))
    .fetch_one(app.pool())
    .await
    .unwrap()
}

fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn the_newest_first_listing_beside_completed_jobs_answers_what_a_full_sort_answers() {
    let app = TestApp::spawn().await;
    insert_completed(&app, 3_000).await;
    // Live jobs, created after every completed one: some waiting, one discarded.
    for n in 0..5 {
        app.push_id(job("a.x", &format!("q{}", n % 3))).await;
    }
    let discarded = app
        .push_id(json!({"type": "b.y", "queue": "dl", "args": [], "options": {"retry": {"max_attempts": 1}}}))
        .await;
    app.fetch_one("dl", "w").await;
    app.nack(json!({"job_id": discarded, "error": {"message": "no"}}))
        .await
        .expect(200);

    let filters = [
        ("", "true"),
        ("state=completed", "state = 'completed'"),
        (
            "state=completed,discarded",
            "state in ('completed', 'discarded')",
        ),
        ("state=available", "state = 'available'"),
        ("queue=q1", "queue = 'q1'"),
        ("queue=q1&type=b.y", "queue = 'q1' and type = 'b.y'"),
        ("type=b*", "type like 'b%'"),
        ("queue=nothing", "queue = 'nothing'"),
        (
            "since=2026-11-01T00:10:00Z&until=2026-11-01T00:20:00Z",
            "created_at >= '2026-11-01T00:10:00Z' and created_at < '2026-11-01T00:20:00Z'",
        ),
    ];
    for (query, condition) in filters {
        let total = matching(&app, condition).await;
        for (per_page, page) in [(20, 1), (7, 3), (100, 2), (100, 30), (25, 121)] {
            let offset = (page - 1) * per_page;
            let answer = app
                .get(&format!(
                    "/ojs/v1/admin/jobs?{query}&per_page={per_page}&page={page}"
                ))
                .await
                .expect(200)
                .json;
            assert_eq!(
                ids(&answer),
                sorted(&app, condition, per_page, offset).await,
                "{query}, page {page} of {per_page}"
            );
            let pagination = &answer["pagination"];
            assert_eq!(pagination["total"], total, "{query}: {pagination}");
            assert_eq!(pagination.get("total_estimated"), None, "{query}");
            assert_eq!(
                pagination["has_more"],
                offset + per_page < total,
                "{query}, page {page} of {per_page}: {pagination}"
            );
        }
    }
    // The other orders sort every match.
    let oldest = app
        .get("/ojs/v1/admin/jobs?state=completed&order=asc&per_page=5")
        .await
        .expect(200)
        .json;
    let expected: Vec<String> =
        sqlx::query_scalar("select id::text from ojs_job_done order by created_at, seq limit 5")
            .fetch_all(app.pool())
            .await
            .unwrap();
    assert_eq!(ids(&oldest), expected);
}

#[tokio::test]
async fn past_ten_thousand_matches_the_total_is_an_estimate_and_has_more_stays_exact() {
    let app = TestApp::spawn().await;
    insert_completed(&app, 12_000).await;

    let first = app
        .get("/ojs/v1/admin/jobs?state=completed")
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&first), sorted(&app, "true", 20, 0).await);
    let pagination = &first["pagination"];
    assert_eq!(pagination["total_estimated"], true, "{pagination}");
    let estimate = pagination["total"].as_i64().unwrap();
    assert!(
        (10_001..=24_000).contains(&estimate),
        "an estimate past the exact count: {pagination}"
    );
    assert_eq!(pagination["has_more"], true);

    // The last page knows the end, so the total is exact again.
    let last = app
        .get("/ojs/v1/admin/jobs?state=completed&offset=11990&limit=20")
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&last), sorted(&app, "true", 20, 11_990).await);
    assert_eq!(last["pagination"]["total"], 12_000, "{last}");
    assert_eq!(last["pagination"]["has_more"], false);
    assert_eq!(last["pagination"].get("total_estimated"), None);
    assert_eq!(last["pagination"].get("next_cursor"), None);

    // Past the end: nothing, and an estimate of what there is.
    let past = app
        .get("/ojs/v1/admin/jobs?state=completed&offset=50000")
        .await
        .expect(200)
        .json;
    assert_eq!(ids(&past), Vec::<String>::new());
    assert_eq!(past["pagination"]["has_more"], false);
    assert_eq!(past["pagination"]["total_estimated"], true);

    // A filter that matches fewer than 10,000 is counted exactly.
    let some = app
        .get("/ojs/v1/admin/jobs?queue=q1&type=b.y")
        .await
        .expect(200)
        .json;
    assert_eq!(
        some["pagination"]["total"],
        matching(&app, "queue = 'q1' and type = 'b.y'").await
    );
    assert_eq!(some["pagination"].get("total_estimated"), None);
}

#[tokio::test]
async fn the_dead_letter_listing_estimates_past_ten_thousand_and_counts_exactly_below() {
    let app = TestApp::spawn().await;
    sqlx::query(
        r#"
        insert into ojs_job (id, type, queue, args, state, attempt, max_attempts, retry,
                             timeout_ms, created_at, enqueued_at, started_at, completed_at,
                             discarded_at, dead_lettered_at, error)
        select gen_random_uuid(), 'a.x', 'q' || (g % 2), '[]', 'discarded', 3, 3, '{}',
               1800000, t, t, t, t, t, t,
               jsonb_build_object('type', case when g % 3 = 0 then 'Timeout' else 'Boom' end)
          from generate_series(1, 10050) g,
               lateral (select timestamptz '2026-11-01 00:00:00+00'
                               + g * interval '1 second' as t) x
        "#,
    )
    .execute(app.pool())
    .await
    .unwrap();
    sqlx::query("analyze ojs_job")
        .execute(app.pool())
        .await
        .unwrap();
    let newest: Vec<String> = sqlx::query_scalar(
        "select id::text from ojs_job order by dead_lettered_at desc, id desc limit 20",
    )
    .fetch_all(app.pool())
    .await
    .unwrap();

    for path in ["/ojs/v1/admin/dead-letter", "/ojs/v1/dead-letter?limit=20"] {
        let first = app.get(path).await.expect(200).json;
        let items = first.get("items").or(first.get("jobs")).unwrap();
        let listed: Vec<&str> = items
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap())
            .collect();
        assert_eq!(listed, newest, "{path}");
        let pagination = &first["pagination"];
        assert_eq!(pagination["total_estimated"], true, "{path}: {pagination}");
        assert!(
            pagination["total"].as_i64().unwrap() > 10_000,
            "{pagination}"
        );
        assert_eq!(pagination["has_more"], true);
    }
    let last = app
        .get("/ojs/v1/admin/dead-letter?offset=10040&limit=20")
        .await
        .expect(200)
        .json;
    assert_eq!(last["items"].as_array().map(Vec::len), Some(10));
    assert_eq!(last["pagination"]["total"], 10_050);
    assert_eq!(last["pagination"]["has_more"], false);
    assert_eq!(last["pagination"].get("total_estimated"), None);

    let timeouts = app
        .get("/ojs/v1/admin/dead-letter?error_type=Timeout&queue=q1")
        .await
        .expect(200)
        .json;
    assert_eq!(timeouts["pagination"]["total"], 1675, "{timeouts}");
    assert_eq!(timeouts["pagination"].get("total_estimated"), None);
}
