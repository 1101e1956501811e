//! `/ojs/v1/cron` ([OJS cron], §8): register (an upsert: 201 new, 200 updated), list, read,
//! change, delete, and an entry's run ledger ([`entries`]); [`ui`] serves the same entries at
//! `/ojs/v1/crons`, in the shapes the OJS admin UI reads.
//!
//! Every client reads its own keys, so one entry object carries them all: the cron extension's
//! (`name`, `cron`, `type`, `args`, `options`, `timezone`, `last_run_at`, `next_run_at`,
//! `run_count`), the contract's (`expression`, `job_template`, `overlap_policy`), the admin
//! UI's (`id`, `schedule`, `queue`, `enabled`) and the SDKs' (`status`). Bodies wrap it twice:
//! as `cron` (the conformance suite) and as `cron_job` (the specification and the SDKs).
//!
//! [OJS cron]: https://github.com/openjobspec/spec/blob/main/spec/ojs-cron.md

mod entries;
mod ui;

use utoipa_axum::router::OpenApiRouter;

use super::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(entries::router())
        .merge(ui::router())
}
