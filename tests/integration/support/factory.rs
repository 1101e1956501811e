//! Jobs in each state, put there the way production puts them: through the API's own
//! transitions (enqueue, FETCH, ACK, NACK, cancel), never by writing rows. A test that needs
//! "a discarded job" gets one with the error history, events and counters a real one has.

use serde_json::{Value, json};

use super::client::Client;

/// Makes jobs on one queue, claimed by one worker. A claim takes the first available job of
/// the queue, so make the claimed states (active, completed, retryable, discarded) before
/// leaving jobs available on it.
pub struct Factory<'a> {
    api: &'a Client,
    pub queue: String,
    pub worker: String,
    job_type: String,
}

impl Client {
    /// A factory of jobs of type `factory.job` on `queue`, claimed by worker `factory`.
    pub fn factory(&self, queue: &str) -> Factory<'_> {
        Factory {
            api: self,
            queue: queue.to_owned(),
            worker: "factory".to_owned(),
            job_type: "factory.job".to_owned(),
        }
    }
}

impl Factory<'_> {
    /// The same factory with another job type.
    pub fn of_type(mut self, job_type: &str) -> Self {
        self.job_type = job_type.to_owned();
        self
    }

    /// An envelope of this factory's type and queue, with `extra` members.
    fn envelope(&self, extra: Value) -> Value {
        let mut job = json!({"type": self.job_type, "args": [], "queue": self.queue});
        if let (Some(job), Value::Object(extra)) = (job.as_object_mut(), extra) {
            job.extend(extra);
        }
        job
    }

    /// A job `available`, with `extra` envelope members.
    pub async fn available_with(&self, extra: Value) -> Value {
        self.api.push(self.envelope(extra)).await
    }

    /// A job `available`.
    pub async fn available(&self) -> Value {
        self.available_with(json!({})).await
    }

    /// A job `scheduled` an hour from now.
    pub async fn scheduled(&self) -> Value {
        let later = chrono::Utc::now() + chrono::Duration::hours(1);
        let job = self
            .available_with(json!({"scheduled_at": later.to_rfc3339()}))
            .await;
        assert_eq!(job["state"], "scheduled", "{job}");
        job
    }

    /// A job `pending` until activated.
    pub async fn pending(&self) -> Value {
        let job = self.available_with(json!({"pending": true})).await;
        assert_eq!(job["state"], "pending", "{job}");
        job
    }

    /// A job `active`, held by this factory's worker, with `extra` envelope members.
    pub async fn active_with(&self, extra: Value) -> Value {
        let pushed = self.available_with(extra).await;
        let fetched = self
            .api
            .fetch(json!({"queues": [self.queue], "worker_id": self.worker}))
            .await;
        assert_eq!(
            fetched.first().map(|j| &j["id"]),
            Some(&pushed["id"]),
            "the factory's queue {} held other jobs",
            self.queue
        );
        fetched[0].clone()
    }

    /// A job `active`, held by this factory's worker.
    pub async fn active(&self) -> Value {
        self.active_with(json!({})).await
    }

    /// A job `completed` with `result`.
    pub async fn completed_with(&self, result: Value) -> Value {
        let job = self.active().await;
        self.api
            .ack(json!({"job_id": job["id"], "worker_id": self.worker, "result": result}))
            .await
            .expect(200);
        self.api.job(job["id"].as_str().expect("an id")).await
    }

    /// A job `completed`.
    pub async fn completed(&self) -> Value {
        self.completed_with(json!({"done": true})).await
    }

    /// A job `retryable` after one failed attempt of `max_attempts`.
    pub async fn retryable(&self) -> Value {
        let job = self
            .active_with(json!({"retry": {"max_attempts": 3}}))
            .await;
        let failed = self.fail(&job).await;
        assert_eq!(failed["state"], "retryable", "{failed}");
        failed
    }

    /// A job `discarded` (dead-lettered) after its only attempt failed with `error`.
    pub async fn discarded_with(&self, error: Value) -> Value {
        let job = self
            .active_with(json!({"retry": {"max_attempts": 1}}))
            .await;
        let failed = self
            .api
            .nack(json!({"job_id": job["id"], "worker_id": self.worker, "error": error}))
            .await
            .expect(200)
            .json["job"]
            .clone();
        assert_eq!(failed["state"], "discarded", "{failed}");
        failed
    }

    /// A job `discarded` (dead-lettered) after its only attempt failed.
    pub async fn discarded(&self) -> Value {
        self.discarded_with(json!({"code": "factory_error", "message": "it failed"}))
            .await
    }

    /// A job `cancelled` while available.
    pub async fn cancelled(&self) -> Value {
        let job = self.available().await;
        let id = job["id"].as_str().expect("an id");
        self.api
            .delete(&format!("/ojs/v1/jobs/{id}"))
            .await
            .expect(200)
            .json["job"]
            .clone()
    }

    /// NACKs `job`, held by this factory's worker; the job after the failure.
    pub async fn fail(&self, job: &Value) -> Value {
        self.fail_with(
            job,
            json!({"code": "factory_error", "message": "it failed"}),
        )
        .await
    }

    /// NACKs `job`, held by this factory's worker, with `error`; the job after the failure.
    pub async fn fail_with(&self, job: &Value, error: Value) -> Value {
        self.api
            .nack(json!({"job_id": job["id"], "worker_id": self.worker, "error": error}))
            .await
            .expect(200)
            .json["job"]
            .clone()
    }
}

#[tokio::test]
async fn the_factory_puts_jobs_in_every_state_through_the_api() {
    let app = super::TestApp::spawn().await;
    let make = app.factory("made");
    let states = [
        ("active", make.active().await),
        ("completed", make.completed().await),
        ("retryable", make.retryable().await),
        ("discarded", make.discarded().await),
        ("available", make.available().await),
        ("scheduled", make.scheduled().await),
        ("pending", make.pending().await),
        ("cancelled", make.cancelled().await),
    ];
    for (state, job) in &states {
        let id = job["id"].as_str().expect("an id");
        let now = app.job(id).await;
        assert_eq!(now["state"], *state, "{now}");
    }
    let discarded = app.job(states[3].1["id"].as_str().unwrap()).await;
    assert_eq!(discarded["errors"].as_array().map(Vec::len), Some(1));
    let dead = app.get("/ojs/v1/dead-letter").await.expect(200).json;
    assert_eq!(dead["pagination"]["total"], 1, "{dead}");
}
