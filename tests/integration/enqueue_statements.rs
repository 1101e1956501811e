//! The enqueue writes one job with a statement of its own (`insert_one`) and several with the
//! batch statement: both must write the same rows and the same events.

use ojsd::job::envelope::{Limits, NewJob, parse};
use ojsd::store::job::{HandTo, Handoffs, insert_many};
use ojsd::wire::json::Object;
use serde_json::{Map, Value};

use crate::support::TestDb;

const LIMITS: Limits = Limits {
    max_priority: 255,
    default_timeout_ms: 1_800_000,
    hyphenated_types: false,
    priority_aging_ms: None,
};

/// Jobs covering each initial state, including two handed to waiting FETCHes, prepared from
/// queue configuration `generation`.
fn jobs(queue: &str, generation: i64) -> Vec<NewJob> {
    [
        r#"{"type":"a.b","args":[1],"meta":{"trace_id":"t1"},"tags":["x","y"]}"#,
        r#"{"type":"a.b","args":[2],"scheduled_at":"2099-01-01T00:00:00Z","priority":7}"#,
        r#"{"type":"a.c","args":[3],"pending":true,"expires_at":"2099-01-01T00:00:00Z"}"#,
        r#"{"type":"a.c","args":[4],"priority":5,"visibility_timeout_ms":5000,"timeout":10}"#,
        r#"{"type":"a.b","args":[5],"unique":{"keys":["args"],"period":"1h"}}"#,
        r#"{"type":"a.b","args":[6],"meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}"#,
    ]
    .iter()
    .map(|text| {
        let mut job = parse(&Object::parse(text).unwrap(), &LIMITS).unwrap();
        job.queue = queue.to_owned();
        job.config_generation = generation;
        job
    })
    .collect()
}

fn hands() -> Vec<Option<HandTo<'static>>> {
    vec![
        Some(HandTo {
            worker_id: Some("w1"),
            visibility_timeout_ms: None,
            pool: None,
        }),
        None,
        None,
        Some(HandTo {
            worker_id: Some("w2"),
            visibility_timeout_ms: Some(9_000),
            pool: Some("p1"),
        }),
    ]
}

/// The queue's jobs in insertion order, without what differs between two runs (ids, the
/// queue, the order column), and timestamps reduced to whether they are set.
async fn rows(db: &TestDb, queue: &str) -> Vec<Map<String, Value>> {
    let rows: Vec<Value> =
        sqlx::query_scalar("select to_jsonb(j) from ojs_job_all j where queue = $1 order by seq")
            .bind(queue)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    rows.into_iter()
        .map(|row| {
            let Value::Object(mut row) = row else {
                panic!("a row")
            };
            for key in ["id", "seq", "queue", "unique_key"] {
                row.remove(key);
            }
            for (key, value) in row.iter_mut() {
                if key.ends_with("_at") || key == "visible_until" || key == "lease_id" {
                    *value = Value::Bool(!value.is_null());
                }
            }
            row
        })
        .collect()
}

/// Each job's events (by the job's place in the queue), in the order they were written.
async fn events(db: &TestDb, queue: &str) -> Vec<Vec<(String, Option<String>, Option<String>)>> {
    let rows: Vec<(i64, String, Option<String>, Option<String>)> = sqlx::query_as(
        "select (select count(*) from ojs_job_all o where o.queue = e.queue and o.seq <= j.seq),
                e.type, e.from_state::text, e.to_state::text
           from ojs_event_log e join ojs_job_all j on j.id = e.job_id
          where e.queue = $1
          order by e.seq",
    )
    .bind(queue)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let mut per_job = vec![Vec::new(); 6];
    for (place, kind, from, to) in rows {
        per_job[place as usize - 1].push((kind, from, to));
    }
    per_job
}

#[tokio::test]
async fn one_job_at_a_time_and_a_batch_write_the_same_rows_and_events() {
    let db = TestDb::new().await;
    let generation: i64 = sqlx::query_scalar("select generation from ojs_queue_config_generation")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let hands = hands();
    for (i, job) in jobs("single", generation).into_iter().enumerate() {
        let to = [hands.get(i).copied().flatten()];
        let (written, _) = insert_many(
            &db.pool,
            std::slice::from_ref(&job),
            false,
            Handoffs {
                to: &to,
                default_visibility_timeout_ms: 30_000,
            },
        )
        .await
        .unwrap();
        assert_eq!(written.len(), 1);
    }
    let (written, created) = insert_many(
        &db.pool,
        &jobs("batch", generation),
        false,
        Handoffs {
            to: &hands,
            default_visibility_timeout_ms: 30_000,
        },
    )
    .await
    .unwrap();
    assert_eq!((written.len(), created), (6, 1));

    let single = rows(&db, "single").await;
    let batch = rows(&db, "batch").await;
    assert_eq!(single, batch);
    let states: Vec<&Value> = single.iter().map(|r| &r["state"]).collect();
    assert_eq!(
        states,
        [
            "active",
            "scheduled",
            "pending",
            "active",
            "available",
            "available"
        ]
    );
    assert_eq!(single[3]["reservation_ms"], 9_000);
    assert_eq!(single[3]["pool"], "p1");
    assert_eq!(single[0]["reservation_ms"], 30_000);

    let single_events = events(&db, "single").await;
    assert_eq!(single_events, events(&db, "batch").await);
    let enqueued_then_started = vec![
        (
            "job.enqueued".to_owned(),
            None,
            Some("available".to_owned()),
        ),
        (
            "job.started".to_owned(),
            Some("available".to_owned()),
            Some("active".to_owned()),
        ),
    ];
    assert_eq!(single_events[0], enqueued_then_started);
    assert_eq!(single_events[3], enqueued_then_started);
    assert_eq!(single_events[2], vec![]);
    assert_eq!(single_events[1][0].0, "job.scheduled");

    // The events' payloads agree as well (the first job's, with its trace id and tags).
    let data: Vec<Value> = sqlx::query_scalar(
        "select e.data - 'job_id' - 'id' - 'queue' from ojs_event_log e
           join ojs_job_all j on j.id = e.job_id
          where j.args::text = '[1]' order by e.queue, e.seq",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(data.len(), 4);
    assert_eq!(data[0], data[2]);
    assert_eq!(data[1], data[3]);
}
