//! What a workflow is once read: its type, its nodes (each a job, held or not, named and waiting
//! on others in a dag), and why a definition is refused.

use crate::job::envelope::{NewJob, Rejection};
use crate::wire::json::{self, Object};
use crate::wire::violation::Violation;
use serde_json::value::RawValue;
use std::fmt;
use uuid::Uuid;

/// Most steps, members and callbacks of one workflow.
pub const MAX_NODES: usize = 1000;

/// What kind of workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkflowType {
    Chain,
    Group,
    Batch,
    /// The dependency form: no `type`, steps with `id` and `depends_on`.
    Dag,
}

impl WorkflowType {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowType::Chain => "chain",
            WorkflowType::Group => "group",
            WorkflowType::Batch => "batch",
            WorkflowType::Dag => "dag",
        }
    }

    pub fn parse(s: &str) -> Option<WorkflowType> {
        match s {
            "chain" => Some(WorkflowType::Chain),
            "group" => Some(WorkflowType::Group),
            "batch" => Some(WorkflowType::Batch),
            "dag" => Some(WorkflowType::Dag),
            _ => None,
        }
    }
}

impl fmt::Display for WorkflowType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a node is in its workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// A chain's step.
    Step,
    /// A group's or batch's member.
    Job,
    OnComplete,
    OnSuccess,
    OnFailure,
}

impl NodeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Step => "step",
            NodeKind::Job => "job",
            NodeKind::OnComplete => "on_complete",
            NodeKind::OnSuccess => "on_success",
            NodeKind::OnFailure => "on_failure",
        }
    }

    pub fn parse(s: &str) -> Option<NodeKind> {
        match s {
            "step" => Some(NodeKind::Step),
            "job" => Some(NodeKind::Job),
            "on_complete" => Some(NodeKind::OnComplete),
            "on_success" => Some(NodeKind::OnSuccess),
            "on_failure" => Some(NodeKind::OnFailure),
            _ => None,
        }
    }

    /// Whether this is one of a batch's callbacks.
    pub fn is_callback(self) -> bool {
        matches!(
            self,
            NodeKind::OnComplete | NodeKind::OnSuccess | NodeKind::OnFailure
        )
    }
}

/// The batch callbacks, in the order their nodes follow the members.
pub const CALLBACKS: [NodeKind; 3] = [
    NodeKind::OnComplete,
    NodeKind::OnSuccess,
    NodeKind::OnFailure,
];

/// One node of a validated definition, with the job it will run.
#[derive(Debug, Clone)]
pub struct NodeDef {
    pub kind: NodeKind,
    /// Its job, held `pending` when it waits for others (or its client asked so).
    pub job: NewJob,
    /// Whether it waits for others: the workflow releases its job.
    pub held: bool,
    /// Dag only: the step's `id`.
    pub name: Option<String>,
    /// Dag only: the indexes of the nodes it depends on, in the definition's order.
    pub depends_on: Vec<usize>,
}

/// A validated workflow definition: its nodes in index order (steps or members, then the
/// callbacks), each job already carrying its workflow keys and held when it must wait.
#[derive(Debug, Clone)]
pub struct Definition {
    pub id: Uuid,
    pub r#type: WorkflowType,
    pub name: Option<String>,
    pub priority: Option<i32>,
    pub nodes: Vec<NodeDef>,
}

impl Definition {
    /// Steps or members: what the workflow's counts are out of.
    pub fn total(&self) -> usize {
        self.nodes.iter().filter(|n| !n.kind.is_callback()).count()
    }
}

/// Why a definition was refused.
#[derive(Debug, Clone)]
pub enum Invalid {
    /// The definition's own shape, or an item's fields (400, `invalid_workflow`).
    Definition(Vec<Violation>),
    /// An item refused otherwise (too large, retry policy, unsupported): the item's rejection,
    /// its paths rooted at the item.
    Item(Rejection),
}

/// Longest dag step `id`.
pub const MAX_STEP_ID_LEN: usize = 255;

/// The workflow a job belongs to, from its `extra`.
pub fn held_by(extra: &RawValue) -> Option<Uuid> {
    let obj = Object::from_raw(extra).ok()?;
    json::decode::<String>(obj.get("workflow_id")?)
        .ok()
        .and_then(|s| Uuid::try_parse(&s).ok())
}
