//! Workflows ([OJS workflows]): a chain (steps one after another, each given the results of
//! the ones before), a group (members at once, independent), a batch (a group whose
//! callbacks `on_complete`, `on_success` and `on_failure` run once every member has finished),
//! or a dag (steps named by an `id`, each run once the steps in its `depends_on` completed).
//!
//! This module validates a definition and turns it into the jobs to write: every node's job is
//! made with the workflow, through the ordinary enqueue; the ones that wait on others are held
//! `pending` until the database releases them (`ojs_workflow_job_finished`, migration V18), in
//! the transaction that finishes the job they waited on.
//!
//! [OJS workflows]: https://github.com/openjobspec/spec/blob/main/spec/ojs-workflows.md

mod definition;
mod parse;

pub use definition::{
    CALLBACKS, Definition, Invalid, MAX_NODES, MAX_STEP_ID_LEN, NodeDef, NodeKind, WorkflowType,
    held_by,
};
pub use parse::{embedded_chain, parse};
