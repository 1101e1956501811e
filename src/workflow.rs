//! Workflows ([OJS workflows]): a chain (steps one after another, each given the results of
//! the ones before), a group (members at once, independent) or a batch (a group whose
//! callbacks `on_complete`, `on_success` and `on_failure` run once every member has finished).
//!
//! This module validates a definition and turns it into the jobs to write: every node's job is
//! made with the workflow, through the ordinary enqueue; the ones that wait on others are held
//! `pending` until the database releases them (`ojs_workflow_job_finished`, migration V18), in
//! the transaction that finishes the job they waited on.
//!
//! [OJS workflows]: https://github.com/openjobspec/spec/blob/main/spec/ojs-workflows.md

use std::fmt;

use serde_json::value::RawValue;
use uuid::Uuid;

use crate::job::envelope::{self, Limits, NewJob, Rejection};
use crate::wire::json::{self, Kind, Object};
use crate::wire::violation::Violation;

/// Most steps, members and callbacks of one workflow.
pub const MAX_NODES: usize = 1000;

/// What kind of workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkflowType {
    Chain,
    Group,
    Batch,
}

impl WorkflowType {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowType::Chain => "chain",
            WorkflowType::Group => "group",
            WorkflowType::Batch => "batch",
        }
    }

    pub fn parse(s: &str) -> Option<WorkflowType> {
        match s {
            "chain" => Some(WorkflowType::Chain),
            "group" => Some(WorkflowType::Group),
            "batch" => Some(WorkflowType::Batch),
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
    pub job: NewJob,
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

/// Validates a whole definition (`POST /ojs/v1/workflows`, typed form) before anything is
/// written: every problem of the shape and of every item, with its path.
pub fn parse(obj: &Object<'_>, limits: &Limits) -> Result<Definition, Invalid> {
    let mut v: Vec<Violation> = Vec::new();
    let r#type = match obj.get("type") {
        None => {
            v.push(Violation::new(
                "$.type",
                "'type' is required: chain, group or batch",
            ));
            None
        }
        Some(raw) => match json::decode::<String>(raw)
            .ok()
            .and_then(|s| WorkflowType::parse(&s))
        {
            Some(t) => Some(t),
            None => {
                v.push(Violation::new(
                    "$.type",
                    "'type' must be one of chain, group, batch",
                ));
                None
            }
        },
    };
    let name = match obj.get("name") {
        None => None,
        Some(raw) => match json::decode::<Option<String>>(raw) {
            Ok(name) => name,
            Err(_) => {
                v.push(Violation::new("$.name", "'name' must be a string"));
                None
            }
        },
    };
    let priority = match obj.get("priority") {
        None => None,
        Some(raw) => match json::as_integer(raw) {
            Some(p) if (0..=i64::from(limits.max_priority)).contains(&p) => Some(p as i32),
            _ => {
                v.push(Violation::new(
                    "$.priority",
                    format!(
                        "'priority' must be an integer from 0 to {}",
                        limits.max_priority
                    ),
                ));
                None
            }
        },
    };
    let defaults = match obj.get("options") {
        None => None,
        Some(raw) => match Object::from_raw(raw) {
            Ok(o) => Some(o),
            Err(_) => {
                v.push(Violation::new("$.options", "'options' must be an object"));
                None
            }
        },
    };
    let Some(r#type) = r#type else {
        return Err(Invalid::Definition(v));
    };

    // (path, kind, item) in node order.
    let mut items: Vec<(String, NodeKind, &RawValue)> = Vec::new();
    let (list, kind, other) = match r#type {
        WorkflowType::Chain => ("steps", NodeKind::Step, "jobs"),
        WorkflowType::Group | WorkflowType::Batch => ("jobs", NodeKind::Job, "steps"),
    };
    if obj.get(other).is_some() {
        v.push(Violation::new(
            format!("$.{other}"),
            format!("a {type} lists its jobs in '{list}', not '{other}'"),
        ));
    }
    match obj
        .get(list)
        .map(|raw| (raw, serde_json::from_str::<Vec<&RawValue>>(raw.get())))
    {
        None => v.push(Violation::new(
            format!("$.{list}"),
            format!("'{list}' is required: at least one job"),
        )),
        Some((_, Ok(list_items))) if list_items.is_empty() => v.push(Violation::new(
            format!("$.{list}"),
            format!("'{list}' must hold at least one job"),
        )),
        Some((_, Ok(list_items))) => {
            for (i, item) in list_items.into_iter().enumerate() {
                items.push((format!("$.{list}[{i}]"), kind, item));
            }
        }
        Some((raw, Err(_))) => v.push(Violation::new(
            format!("$.{list}"),
            format!(
                "'{list}' must be an array of jobs, got {}",
                Kind::of(raw).article_name()
            ),
        )),
    }
    match (r#type, obj.get("callbacks")) {
        (WorkflowType::Batch, None) => v.push(Violation::new(
            "$.callbacks",
            "a batch needs 'callbacks' with at least one of on_complete, on_success, on_failure",
        )),
        (WorkflowType::Batch, Some(raw)) => match Object::from_raw(raw) {
            Ok(callbacks) => {
                for (key, _) in callbacks.iter() {
                    if NodeKind::parse(key).is_none_or(|k| !k.is_callback()) {
                        v.push(Violation::new(
                            format!("$.callbacks.{key}"),
                            "a callback is one of on_complete, on_success, on_failure",
                        ));
                    }
                }
                let before = items.len();
                for kind in CALLBACKS {
                    if let Some(item) = callbacks.get(kind.as_str()) {
                        items.push((format!("$.callbacks.{}", kind.as_str()), kind, item));
                    }
                }
                if items.len() == before {
                    v.push(Violation::new(
                        "$.callbacks",
                        "'callbacks' needs at least one of on_complete, on_success, on_failure",
                    ));
                }
            }
            Err(_) => v.push(Violation::new(
                "$.callbacks",
                "'callbacks' must be an object",
            )),
        },
        (_, Some(_)) => v.push(Violation::new(
            "$.callbacks",
            format!("only a batch has callbacks, not a {type}"),
        )),
        (_, None) => {}
    }
    if items.len() > MAX_NODES {
        v.push(Violation::new(
            format!("$.{list}"),
            format!("a workflow holds at most {MAX_NODES} jobs and callbacks"),
        ));
        return Err(Invalid::Definition(v));
    }

    let id = Uuid::now_v7();
    let mut nodes = Vec::with_capacity(items.len());
    for (index, (path, kind, raw)) in items.iter().enumerate() {
        match item_job(raw, path, defaults.as_ref(), limits) {
            Ok(mut job) => {
                if let Some(priority) = priority
                    && !has_priority(raw)
                {
                    job.priority = priority;
                }
                job.pending |= holds(r#type, *kind, index);
                job.extra = with_workflow_keys(&job.extra, id, index);
                nodes.push(NodeDef { kind: *kind, job });
            }
            Err(Rejection::Invalid(violations)) => v.extend(violations),
            Err(other) if v.is_empty() => return Err(Invalid::Item(other)),
            Err(_) => {}
        }
    }
    if !v.is_empty() {
        return Err(Invalid::Definition(v));
    }
    // A chain's later steps without a priority of their own take the first step's.
    if r#type == WorkflowType::Chain && priority.is_none() {
        let first = nodes[0].job.priority;
        for (node, (_, _, raw)) in nodes.iter_mut().zip(&items).skip(1) {
            if !has_priority(raw) {
                node.job.priority = first;
            }
        }
    }
    Ok(Definition {
        id,
        r#type,
        name,
        priority,
        nodes,
    })
}

/// Whether node `index` waits for others: every chain step after the first, every callback.
fn holds(r#type: WorkflowType, kind: NodeKind, index: usize) -> bool {
    kind.is_callback() || (r#type == WorkflowType::Chain && index > 0)
}

/// Whether an item names its own priority (at the top or in its options).
fn has_priority(raw: &RawValue) -> bool {
    let Ok(obj) = Object::from_raw(raw) else {
        return false;
    };
    obj.get("priority").is_some()
        || obj
            .get("options")
            .and_then(|o| Object::from_raw(o).ok())
            .is_some_and(|o| o.get("priority").is_some())
}

/// One item validated as a PUSH body, the workflow's `options` under its own, its violations'
/// paths rooted at `path`.
fn item_job(
    raw: &RawValue,
    path: &str,
    defaults: Option<&Object<'_>>,
    limits: &Limits,
) -> Result<NewJob, Rejection> {
    let Ok(item) = Object::from_raw(raw) else {
        return Err(Rejection::Invalid(vec![Violation::new(
            path,
            format!(
                "a workflow item is a job object, got {}",
                Kind::of(raw).article_name()
            ),
        )]));
    };
    for nested in ["steps", "jobs", "callbacks"] {
        if item.get(nested).is_some() {
            return Err(Rejection::Unsupported {
                path: format!("{path}.{nested}"),
                message: "nested workflows are not supported; list the jobs in one workflow"
                    .to_owned(),
            });
        }
    }
    let merged;
    let item = match defaults {
        Some(defaults) if !defaults.is_empty() => {
            merged = with_default_options(&item, defaults);
            Object::parse(&merged).map_err(|_| {
                Rejection::Invalid(vec![Violation::new(path, "the item is not valid JSON")])
            })?
        }
        _ => item,
    };
    envelope::parse(&item, limits).map_err(|rejection| rejection.rerooted(path))
}

/// `item` with `options` = the workflow's `options` overlaid by the item's own.
fn with_default_options(item: &Object<'_>, defaults: &Object<'_>) -> String {
    let own = item.get("options").and_then(|o| Object::from_raw(o).ok());
    let options = json::object_text(
        defaults
            .iter()
            .filter(|(key, _)| own.as_ref().is_none_or(|o| !o.contains(key)))
            .chain(own.iter().flat_map(|o| o.iter())),
    );
    let options = json::raw(options);
    json::object_text(
        item.iter()
            .filter(|(key, _)| *key != "options")
            .chain(std::iter::once(("options", &*options))),
    )
}

/// The workflow a job belongs to, from its `extra`.
pub fn held_by(extra: &RawValue) -> Option<Uuid> {
    let obj = Object::from_raw(extra).ok()?;
    json::decode::<String>(obj.get("workflow_id")?)
        .ok()
        .and_then(|s| Uuid::try_parse(&s).ok())
}

/// A job's `extra` (a JSON object's text) with the workflow's keys added. Clients cannot
/// send these keys (the envelope drops them), so they are never there already.
fn with_workflow_keys(extra: &str, workflow: Uuid, index: usize) -> String {
    let keys = format!(r#""workflow_id":"{workflow}","workflow_step":{index}"#);
    let body = extra.trim();
    let inner = body
        .strip_prefix('{')
        .and_then(|b| b.strip_suffix('}'))
        .unwrap_or("")
        .trim();
    if inner.is_empty() {
        format!("{{{keys}}}")
    } else {
        format!("{{{inner},{keys}}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_priority: 255,
            default_timeout_ms: 1_800_000,
            hyphenated_types: false,
            priority_aging_ms: None,
        }
    }

    fn parsed(text: &str) -> Result<Definition, Invalid> {
        parse(&Object::parse(text).unwrap(), &limits())
    }

    fn paths(text: &str) -> Vec<String> {
        match parsed(text) {
            Err(Invalid::Definition(v)) => v.into_iter().map(|v| v.path).collect(),
            other => panic!("expected violations, got {other:?}"),
        }
    }

    #[test]
    fn a_chain_holds_every_step_but_the_first_and_keys_each_job_to_its_node() {
        let d = parsed(
            r#"{"type":"chain","name":"c","steps":[
                {"type":"a.b","args":[1],"options":{"queue":"q","priority":0}},
                {"type":"a.c","args":[],"extra_attr":true},
                {"type":"a.d","args":[],"priority":7}]}"#,
        )
        .unwrap();
        assert_eq!(d.r#type, WorkflowType::Chain);
        assert_eq!(d.total(), 3);
        let pending: Vec<bool> = d.nodes.iter().map(|n| n.job.pending).collect();
        assert_eq!(pending, [false, true, true]);
        // Later steps take the first step's priority unless they name their own.
        let priorities: Vec<i32> = d.nodes.iter().map(|n| n.job.priority).collect();
        assert_eq!(priorities, [0, 0, 7]);
        let extra: serde_json::Value = serde_json::from_str(&d.nodes[1].job.extra).unwrap();
        assert_eq!(extra["extra_attr"], true);
        assert_eq!(extra["workflow_id"], d.id.to_string());
        assert_eq!(extra["workflow_step"], 1);
    }

    #[test]
    fn a_batch_runs_its_members_at_once_and_holds_its_callbacks_after_them() {
        let d = parsed(
            r#"{"type":"batch","priority":1,"options":{"queue":"wq"},
                "jobs":[{"type":"m.a","args":[]},{"type":"m.b","args":[],"options":{"queue":"own"}}],
                "callbacks":{"on_failure":{"type":"cb.f","args":[]},"on_success":{"type":"cb.s","args":[]}}}"#,
        )
        .unwrap();
        let kinds: Vec<NodeKind> = d.nodes.iter().map(|n| n.kind).collect();
        assert_eq!(
            kinds,
            [
                NodeKind::Job,
                NodeKind::Job,
                NodeKind::OnSuccess,
                NodeKind::OnFailure
            ]
        );
        assert_eq!(d.total(), 2);
        let pending: Vec<bool> = d.nodes.iter().map(|n| n.job.pending).collect();
        assert_eq!(pending, [false, false, true, true]);
        let queues: Vec<&str> = d.nodes.iter().map(|n| n.job.queue.as_str()).collect();
        assert_eq!(queues, ["wq", "own", "wq", "wq"], "item options win");
        assert!(d.nodes.iter().all(|n| n.job.priority == 1));
    }

    #[test]
    fn every_problem_is_named_by_its_path() {
        assert_eq!(
            paths(
                r#"{"type":"chain","steps":[{"type":"ok.a","args":[]},{"args":[]},{"type":"ok.c","args":5}]}"#
            ),
            ["$.steps[1].type", "$.steps[2].args"]
        );
        assert_eq!(
            paths(
                r#"{"type":"batch","jobs":[{"type":"a.b","args":[]}],"callbacks":{"on_failure":{"type":"","args":[]}}}"#
            ),
            ["$.callbacks.on_failure.type"]
        );
        assert_eq!(
            paths(r#"{"type":"batch","jobs":[{"type":"a.b","args":[]}]}"#),
            ["$.callbacks"]
        );
        assert_eq!(
            paths(r#"{"type":"batch","jobs":[{"type":"a.b","args":[]}],"callbacks":{}}"#),
            ["$.callbacks"]
        );
        assert_eq!(
            paths(
                r#"{"type":"group","jobs":[],"callbacks":{"on_complete":{"type":"a.b","args":[]}}}"#
            ),
            ["$.jobs", "$.callbacks"]
        );
        assert_eq!(paths(r#"{"type":"dag","steps":[]}"#), ["$.type"]);
        assert_eq!(paths(r#"{"steps":[]}"#), ["$.type"]);
        assert_eq!(paths(r#"{"type":"chain","steps":"x"}"#), ["$.steps"]);
        assert_eq!(
            paths(r#"{"type":"group","jobs":[{"type":"a.b","args":[]}],"priority":-1}"#),
            ["$.priority"]
        );
    }

    #[test]
    fn a_nested_workflow_is_unsupported() {
        match parsed(r#"{"type":"chain","steps":[{"type":"a.b","args":[],"steps":[]}]}"#) {
            Err(Invalid::Item(Rejection::Unsupported { path, .. })) => {
                assert_eq!(path, "$.steps[0].steps")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn workflow_keys_join_the_client_extra_attributes() {
        let id = Uuid::nil();
        assert_eq!(
            with_workflow_keys("{}", id, 2),
            format!(r#"{{"workflow_id":"{id}","workflow_step":2}}"#)
        );
        assert_eq!(
            with_workflow_keys(r#"{"x":1}"#, id, 0),
            format!(r#"{{"x":1,"workflow_id":"{id}","workflow_step":0}}"#)
        );
    }
}
