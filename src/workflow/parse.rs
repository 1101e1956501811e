//! Reading a workflow definition (`POST /ojs/v1/workflows`, in the typed or the dependency
//! form) and the chain a PUSH may embed, into the jobs to write: every problem of the shape
//! and of every item, with its path.

use std::collections::HashMap;

use serde_json::value::RawValue;
use uuid::Uuid;

use super::definition::{
    CALLBACKS, Definition, Invalid, MAX_NODES, MAX_STEP_ID_LEN, NodeDef, NodeKind, WorkflowType,
};
use crate::job::envelope::{self, Limits, NewJob, Rejection};
use crate::wire::Reader;
use crate::wire::json::{self, Kind, Object};
use crate::wire::reader::wrong_type;
use crate::wire::violation::Violation;

/// Validates a whole definition (`POST /ojs/v1/workflows`: the typed form, or the dependency
/// form when there is no `type`) before anything is written: every problem of the shape and
/// of every item, with its path.
pub fn parse(
    obj: &Object<'_>,
    limits: &Limits,
    tenant: Option<&str>,
) -> Result<Definition, Invalid> {
    let mut v: Vec<Violation> = Vec::new();
    let mut r = Reader::new(&mut v);
    let header = header(obj, limits, &mut r);
    let Some(r#type) = header.r#type else {
        return Err(Invalid::Definition(v));
    };
    let (list, mut items) = listed_items(obj, r#type, &mut r);
    callbacks(obj, r#type, &mut items, &mut r);
    if items.len() > MAX_NODES {
        r.refuse(
            format!("$.{list}"),
            format!("a workflow holds at most {MAX_NODES} jobs and callbacks"),
        );
        return Err(Invalid::Definition(v));
    }
    let graph = if r#type == WorkflowType::Dag {
        dependencies(&items, &mut v)
    } else {
        Vec::new()
    };
    let id = Uuid::now_v7();
    let nodes = nodes(&items, &graph, &header, r#type, id, limits, tenant, &mut v)?;
    if !v.is_empty() {
        return Err(Invalid::Definition(v));
    }
    Ok(Definition {
        id,
        r#type,
        name: header.name,
        priority: header.priority,
        nodes: inherit_first_priority(nodes, &items, r#type, header.priority),
    })
}

/// The members of a definition besides its jobs: its type, name, priority and the options
/// every job starts from.
struct Header<'a> {
    /// `None` when missing or invalid (a violation is recorded).
    r#type: Option<WorkflowType>,
    name: Option<String>,
    priority: Option<i32>,
    defaults: Option<Object<'a>>,
}

fn header<'a>(obj: &Object<'a>, limits: &Limits, r: &mut Reader<'_>) -> Header<'a> {
    let r#type = match obj.get("type") {
        // The dependency form names no type.
        None if obj.get("steps").is_some() => Some(WorkflowType::Dag),
        None => r.required(
            "$.type",
            None,
            "'type' is required: chain, group or batch (or no 'type' and 'steps' with 'depends_on')",
        ),
        Some(raw) => {
            let r#type = json::decode::<String>(raw)
                .ok()
                .and_then(|s| WorkflowType::parse(&s));
            r.required(
                "$.type",
                r#type,
                "'type' must be one of chain, group, batch, dag",
            )
        }
    };
    let name = obj.get("name").and_then(|raw| {
        let name = json::decode::<Option<String>>(raw).ok();
        r.required("$.name", name, "'name' must be a string")
            .flatten()
    });
    let priority = obj.get("priority").and_then(|raw| {
        let priority = json::as_integer(raw)
            .filter(|p| (0..=i64::from(limits.max_priority)).contains(p))
            .map(|p| p as i32);
        r.required(
            "$.priority",
            priority,
            format!(
                "'priority' must be an integer from 0 to {}",
                limits.max_priority
            ),
        )
    });
    let defaults = obj.get("options").and_then(|raw| {
        let options = Object::from_raw(raw).ok();
        r.required("$.options", options, "'options' must be an object")
    });
    Header {
        r#type,
        name,
        priority,
        defaults,
    }
}

/// A job of a definition: its path, its kind and its body.
type Item<'a> = (String, NodeKind, &'a RawValue);

/// The jobs a definition lists (`steps` for a chain or dag, `jobs` for a group or batch), in
/// order, with the name of the list.
fn listed_items<'a>(
    obj: &Object<'a>,
    r#type: WorkflowType,
    r: &mut Reader<'_>,
) -> (&'static str, Vec<Item<'a>>) {
    let (list, kind, other) = match r#type {
        WorkflowType::Chain | WorkflowType::Dag => ("steps", NodeKind::Step, "jobs"),
        WorkflowType::Group | WorkflowType::Batch => ("jobs", NodeKind::Job, "steps"),
    };
    if obj.get(other).is_some() {
        r.refuse(
            format!("$.{other}"),
            format!("a {type} lists its jobs in '{list}', not '{other}'"),
        );
    }
    let Some(raw) = obj.get(list) else {
        r.refuse(
            format!("$.{list}"),
            format!("'{list}' is required: at least one job"),
        );
        return (list, Vec::new());
    };
    let Ok(listed) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) else {
        r.wrong_type(
            format!("$.{list}"),
            &format!("'{list}'"),
            "an array of jobs",
            raw,
        );
        return (list, Vec::new());
    };
    if listed.is_empty() {
        r.refuse(
            format!("$.{list}"),
            format!("'{list}' must hold at least one job"),
        );
    }
    let items = listed
        .into_iter()
        .enumerate()
        .map(|(i, item)| (format!("$.{list}[{i}]"), kind, item))
        .collect();
    (list, items)
}

/// A batch's callbacks, added to `items` after its jobs; any other type has none.
fn callbacks<'a>(
    obj: &Object<'a>,
    r#type: WorkflowType,
    items: &mut Vec<Item<'a>>,
    r: &mut Reader<'_>,
) {
    match (r#type, obj.get("callbacks")) {
        (WorkflowType::Batch, None) => r.refuse(
            "$.callbacks",
            "a batch needs 'callbacks' with at least one of on_complete, on_success, on_failure",
        ),
        (WorkflowType::Batch, Some(raw)) => {
            let Ok(callbacks) = Object::from_raw(raw) else {
                r.refuse("$.callbacks", "'callbacks' must be an object");
                return;
            };
            for (key, _) in callbacks.iter() {
                if NodeKind::parse(key).is_none_or(|k| !k.is_callback()) {
                    r.refuse(
                        format!("$.callbacks.{key}"),
                        "a callback is one of on_complete, on_success, on_failure",
                    );
                }
            }
            let before = items.len();
            for kind in CALLBACKS {
                if let Some(item) = callbacks.get(kind.as_str()) {
                    items.push((format!("$.callbacks.{}", kind.as_str()), kind, item));
                }
            }
            if items.len() == before {
                r.refuse(
                    "$.callbacks",
                    "'callbacks' needs at least one of on_complete, on_success, on_failure",
                );
            }
        }
        (_, Some(_)) => r.refuse(
            "$.callbacks",
            format!("only a batch has callbacks, not a {type}"),
        ),
        (_, None) => {}
    }
}

/// Each item read as a job of workflow `id`: the definition's priority and options applied,
/// held when it waits for others. An item's violations join `v`; an item refused otherwise
/// (too large, unsupported) is the answer when nothing else is wrong.
#[allow(clippy::too_many_arguments)]
fn nodes(
    items: &[Item<'_>],
    graph: &[(Option<String>, Vec<usize>)],
    header: &Header<'_>,
    r#type: WorkflowType,
    id: Uuid,
    limits: &Limits,
    tenant: Option<&str>,
    v: &mut Vec<Violation>,
) -> Result<Vec<NodeDef>, Invalid> {
    let mut nodes = Vec::with_capacity(items.len());
    for (index, (path, kind, raw)) in items.iter().enumerate() {
        let (name, depends_on) = graph.get(index).cloned().unwrap_or_default();
        match item_job(raw, path, header.defaults.as_ref(), limits, tenant, r#type) {
            Ok(mut job) => {
                if let Some(priority) = header.priority
                    && !has_priority(raw)
                {
                    job.priority = priority;
                }
                let held = holds(r#type, *kind, index, &depends_on);
                job.pending |= held;
                job.extra = with_workflow_keys(&job.extra, id, index);
                nodes.push(NodeDef {
                    kind: *kind,
                    job,
                    held,
                    name,
                    depends_on,
                });
            }
            Err(Rejection::Invalid(violations)) => v.extend(violations),
            Err(other) if v.is_empty() => return Err(Invalid::Item(other)),
            Err(_) => {}
        }
    }
    Ok(nodes)
}

/// A chain's or dag's later steps without a priority of their own take the first step's
/// (unless the definition names one for all).
fn inherit_first_priority(
    mut nodes: Vec<NodeDef>,
    items: &[Item<'_>],
    r#type: WorkflowType,
    priority: Option<i32>,
) -> Vec<NodeDef> {
    if matches!(r#type, WorkflowType::Chain | WorkflowType::Dag) && priority.is_none() {
        let first = nodes[0].job.priority;
        for (node, (_, _, raw)) in nodes.iter_mut().zip(items).skip(1) {
            if !has_priority(raw) {
                node.job.priority = first;
            }
        }
    }
    nodes
}

/// The chain a PUSH body embeds (`"workflow": {"chain": [<step>, ...]}`): the posted job is
/// step 0 and the listed items (job bodies) the steps after it, each taking the posted job's
/// queue and priority unless it names its own. `None` when the body embeds no workflow. An
/// embedded group or batch is unsupported (they have their own endpoint).
pub fn embedded_chain(
    obj: &Object<'_>,
    limits: &Limits,
    tenant: Option<&str>,
) -> Result<Option<Definition>, Invalid> {
    let Some(raw) = obj.get("workflow") else {
        return Ok(None);
    };
    let Ok(spec) = Object::from_raw(raw) else {
        return Err(Invalid::Definition(vec![Violation::new(
            "$.workflow",
            wrong_type("'workflow'", "an object holding 'chain'", raw),
        )]));
    };
    let mut v: Vec<Violation> = Vec::new();
    let items = chain_items(&spec, &mut Reader::new(&mut v))?;
    if items.len() >= MAX_NODES {
        v.push(Violation::new(
            "$.workflow.chain",
            format!("a workflow holds at most {MAX_NODES} jobs"),
        ));
        return Err(Invalid::Definition(v));
    }
    let root_text = json::object_text(obj.iter().filter(|(key, _)| *key != "workflow"));
    let root_obj = Object::parse(&root_text).map_err(|_| {
        Invalid::Definition(vec![Violation::new("$", "the body is not valid JSON")])
    })?;
    // The posted job (no item of its own), then the steps.
    let parsed = std::iter::once((None, envelope::parse_for(&root_obj, limits, tenant))).chain(
        items.iter().enumerate().map(|(i, raw)| {
            let path = format!("$.workflow.chain[{i}]");
            (
                Some(*raw),
                item_job(raw, &path, None, limits, tenant, WorkflowType::Chain),
            )
        }),
    );
    let mut jobs: Vec<(NewJob, Option<&RawValue>)> = Vec::with_capacity(items.len() + 1);
    for (raw, parsed) in parsed {
        match parsed {
            Ok(job) => jobs.push((job, raw)),
            Err(Rejection::Invalid(violations)) => v.extend(violations),
            Err(other) if v.is_empty() => return Err(Invalid::Item(other)),
            Err(_) => {}
        }
    }
    if !v.is_empty() {
        return Err(Invalid::Definition(v));
    }
    Ok(Some(chain_after(jobs)))
}

/// The steps an embedded workflow lists in `chain` (nothing else may be embedded: a group or
/// batch is refused as unsupported, any other key is a violation).
fn chain_items<'a>(spec: &Object<'a>, r: &mut Reader<'_>) -> Result<Vec<&'a RawValue>, Invalid> {
    for (key, _) in spec.iter() {
        match key {
            "chain" => {}
            "group" | "batch" => {
                return Err(Invalid::Item(Rejection::Unsupported {
                    path: format!("$.workflow.{key}"),
                    message: format!(
                        "a job embeds only a chain; create a {key} with POST /ojs/v1/workflows"
                    ),
                }));
            }
            other => r.refuse(
                format!("$.workflow.{other}"),
                "an embedded workflow holds only 'chain'",
            ),
        }
    }
    let Some(raw) = spec.get("chain") else {
        r.refuse(
            "$.workflow.chain",
            "'chain' is required: the steps to run after this job",
        );
        return Ok(Vec::new());
    };
    let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) else {
        r.wrong_type("$.workflow.chain", "'chain'", "an array of jobs", raw);
        return Ok(Vec::new());
    };
    if items.is_empty() {
        r.refuse("$.workflow.chain", "'chain' must hold at least one step");
    }
    Ok(items)
}

/// The chain of the posted job (step 0) and the steps after it: a step without a priority or
/// queue of its own takes the posted job's.
fn chain_after(jobs: Vec<(NewJob, Option<&RawValue>)>) -> Definition {
    let id = Uuid::now_v7();
    let mut nodes: Vec<NodeDef> = Vec::with_capacity(jobs.len());
    for (index, (mut job, raw)) in jobs.into_iter().enumerate() {
        if let (Some(root), Some(raw)) = (nodes.first(), raw) {
            if !has_priority(raw) {
                job.priority = root.job.priority;
            }
            if !has_option(raw, "queue") {
                job.queue.clone_from(&root.job.queue);
            }
        }
        let held = holds(WorkflowType::Chain, NodeKind::Step, index, &[]);
        job.pending |= held;
        job.extra = with_workflow_keys(&job.extra, id, index);
        nodes.push(NodeDef {
            kind: NodeKind::Step,
            job,
            held,
            name: None,
            depends_on: Vec::new(),
        });
    }
    Definition {
        id,
        r#type: WorkflowType::Chain,
        name: None,
        priority: None,
        nodes,
    }
}

/// Whether node `index` waits for others: every chain step after the first, every dag step
/// with dependencies, every callback.
fn holds(r#type: WorkflowType, kind: NodeKind, index: usize, depends_on: &[usize]) -> bool {
    kind.is_callback() || (r#type == WorkflowType::Chain && index > 0) || !depends_on.is_empty()
}

/// A dag's steps' `id`s and dependencies (as indexes), one per item; every problem (a missing,
/// repeated or malformed `id`, a dependency that names no step, itself or one step twice, a
/// cycle) joins `v` with its path.
fn dependencies(
    items: &[(String, NodeKind, &RawValue)],
    v: &mut Vec<Violation>,
) -> Vec<(Option<String>, Vec<usize>)> {
    let before = v.len();
    let objects: Vec<Option<Object<'_>>> = items
        .iter()
        .map(|(_, _, raw)| Object::from_raw(raw).ok())
        .collect();
    // Every id first: a step may depend on one listed after it.
    let mut ids: Vec<Option<String>> = Vec::with_capacity(items.len());
    let mut index_of: HashMap<String, usize> = HashMap::new();
    for (i, ((path, _, _), obj)) in items.iter().zip(&objects).enumerate() {
        let Some(obj) = obj else {
            ids.push(None);
            continue;
        };
        let id = match obj.get("id").map(json::decode::<String>) {
            None => {
                v.push(Violation::new(
                    format!("{path}.id"),
                    "a step of a workflow without 'type' needs an 'id': a string naming it for 'depends_on'",
                ));
                None
            }
            Some(Ok(id)) if !id.is_empty() && id.len() <= MAX_STEP_ID_LEN => Some(id),
            Some(_) => {
                v.push(Violation::new(
                    format!("{path}.id"),
                    format!("'id' must be a string of 1 to {MAX_STEP_ID_LEN} bytes"),
                ));
                None
            }
        };
        if let Some(id) = &id {
            if let Some(&first) = index_of.get(id) {
                v.push(Violation::new(
                    format!("{path}.id"),
                    format!("'id' {id:?} is already the id of $.steps[{first}]"),
                ));
            } else {
                index_of.insert(id.clone(), i);
            }
        }
        ids.push(id);
    }
    let mut deps: Vec<Vec<usize>> = Vec::with_capacity(items.len());
    for (i, ((path, _, _), obj)) in items.iter().zip(&objects).enumerate() {
        let mut own = Vec::new();
        let listed = obj.as_ref().and_then(|o| o.get("depends_on"));
        match listed.map(json::decode::<Vec<String>>) {
            None => {}
            Some(Err(_)) => v.push(Violation::new(
                format!("{path}.depends_on"),
                "'depends_on' must be an array of step ids (strings)",
            )),
            Some(Ok(names)) => {
                for (k, name) in names.iter().enumerate() {
                    let at = format!("{path}.depends_on[{k}]");
                    match index_of.get(name) {
                        None => v.push(Violation::new(at, format!("no step has the id {name:?}"))),
                        Some(&j) if j == i => {
                            v.push(Violation::new(at, "a step cannot depend on itself"))
                        }
                        Some(j) if own.contains(j) => {
                            v.push(Violation::new(at, format!("{name:?} is listed twice")))
                        }
                        Some(&j) => own.push(j),
                    }
                }
            }
        }
        deps.push(own);
    }
    if v.len() == before
        && let Some(cycle) = find_cycle(&deps)
    {
        let names: Vec<&str> = cycle
            .iter()
            .map(|&i| ids[i].as_deref().unwrap_or_default())
            .collect();
        v.push(Violation::new(
            format!("{}.depends_on", items[cycle[0]].0),
            format!(
                "the steps depend on each other in a cycle: {}",
                names.join(" -> ")
            ),
        ));
    }
    ids.into_iter().zip(deps).collect()
}

/// A cycle of `deps` (node → the nodes it depends on), as the nodes along it with the first
/// repeated at the end; `None` if there is none.
fn find_cycle(deps: &[Vec<usize>]) -> Option<Vec<usize>> {
    // Kahn's algorithm: peel off the steps whose dependencies are all peeled.
    let mut waiting: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); deps.len()];
    for (i, own) in deps.iter().enumerate() {
        for &j in own {
            dependents[j].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..deps.len()).filter(|&i| waiting[i] == 0).collect();
    while let Some(j) = ready.pop() {
        for &i in &dependents[j] {
            waiting[i] -= 1;
            if waiting[i] == 0 {
                ready.push(i);
            }
        }
    }
    // What is left waits on a cycle; walk back along unpeeled dependencies until one repeats.
    let mut at = (0..deps.len()).find(|&i| waiting[i] > 0)?;
    let mut path = vec![at];
    loop {
        at = *deps[at].iter().find(|&&j| waiting[j] > 0)?;
        if let Some(start) = path.iter().position(|&p| p == at) {
            let mut cycle = path.split_off(start);
            cycle.push(at);
            return Some(cycle);
        }
        path.push(at);
    }
}

/// Whether an item names its own priority (at the top or in its options).
fn has_priority(raw: &RawValue) -> bool {
    has_option(raw, "priority")
}

/// Whether an item sets `name` (at the top or in its options).
fn has_option(raw: &RawValue, name: &str) -> bool {
    let Ok(obj) = Object::from_raw(raw) else {
        return false;
    };
    obj.get(name).is_some()
        || obj
            .get("options")
            .and_then(|o| Object::from_raw(o).ok())
            .is_some_and(|o| o.get(name).is_some())
}

/// One item validated as a PUSH body, the workflow's `options` under its own, its violations'
/// paths rooted at `path`.
fn item_job(
    raw: &RawValue,
    path: &str,
    defaults: Option<&Object<'_>>,
    limits: &Limits,
    tenant: Option<&str>,
    r#type: WorkflowType,
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
    // A dag step's `id` names the step (not its job) and `depends_on` is the workflow's.
    let graph_keys: &[&str] = if r#type == WorkflowType::Dag {
        &["id", "depends_on"]
    } else {
        &[]
    };
    let merged = match defaults {
        Some(defaults) if !defaults.is_empty() => {
            Some(with_default_options(&item, defaults, graph_keys))
        }
        _ if !graph_keys.is_empty() => Some(json::object_text(
            item.iter().filter(|(key, _)| !graph_keys.contains(key)),
        )),
        _ => None,
    };
    let item = match &merged {
        Some(text) => Object::parse(text).map_err(|_| {
            Rejection::Invalid(vec![Violation::new(path, "the item is not valid JSON")])
        })?,
        None => item,
    };
    envelope::parse_for(&item, limits, tenant).map_err(|rejection| rejection.rerooted(path))
}

/// `item` without the `dropped` keys, with `options` = the workflow's `options` overlaid by the
/// item's own.
fn with_default_options(item: &Object<'_>, defaults: &Object<'_>, dropped: &[&str]) -> String {
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
            .filter(|(key, _)| *key != "options" && !dropped.contains(key))
            .chain(std::iter::once(("options", &*options))),
    )
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
        crate::job::envelope::TEST_LIMITS
    }

    fn parsed(text: &str) -> Result<Definition, Invalid> {
        parse(&Object::parse(text).unwrap(), &limits(), None)
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
        assert_eq!(paths(r#"{"type":"tree","steps":[]}"#), ["$.type"]);
        assert_eq!(paths(r#"{"jobs":[]}"#), ["$.type"]);
        assert_eq!(paths(r#"{"steps":[]}"#), ["$.steps"]);
        assert_eq!(paths(r#"{"type":"chain","steps":"x"}"#), ["$.steps"]);
        assert_eq!(
            paths(r#"{"type":"group","jobs":[{"type":"a.b","args":[]}],"priority":-1}"#),
            ["$.priority"]
        );
    }

    #[test]
    fn the_dependency_form_holds_the_steps_that_wait_and_inherits_the_first_priority() {
        // As the Go SDK sends a batch: callbacks are steps depending on every job.
        let d = parsed(
            r#"{"name":"n","steps":[
                {"id":"job-0","type":"m.a","args":[],"depends_on":[],"options":{"priority":1}},
                {"id":"job-1","type":"m.b","args":[],"depends_on":[]},
                {"id":"on-success","type":"cb.s","args":[],"depends_on":["job-1","job-0"]},
                {"id":"last","type":"cb.t","args":[],"depends_on":["on-success"],"priority":9}]}"#,
        )
        .unwrap();
        assert_eq!(d.r#type, WorkflowType::Dag);
        assert_eq!(d.total(), 4);
        let pending: Vec<bool> = d.nodes.iter().map(|n| n.job.pending).collect();
        assert_eq!(pending, [false, false, true, true]);
        assert!(d.nodes.iter().all(|n| n.held == n.job.pending));
        assert_eq!(d.nodes[2].depends_on, [1, 0], "in the definition's order");
        assert_eq!(d.nodes[2].name.as_deref(), Some("on-success"));
        let priorities: Vec<i32> = d.nodes.iter().map(|n| n.job.priority).collect();
        assert_eq!(priorities, [1, 1, 1, 9]);
        // `id` and `depends_on` are the workflow's, not the job's.
        let extra: serde_json::Value = serde_json::from_str(&d.nodes[2].job.extra).unwrap();
        assert!(extra.get("depends_on").is_none());
        assert_ne!(d.nodes[2].job.id.to_string(), "on-success");
        // `type: "dag"` says the same.
        let explicit = parsed(
            r#"{"type":"dag","steps":[{"id":"a","type":"x.y","args":[]},{"id":"b","type":"x.y","args":[],"depends_on":["a"]}]}"#,
        )
        .unwrap();
        assert_eq!(explicit.nodes[1].depends_on, [0]);
    }

    #[test]
    fn a_bad_dependency_is_named_by_its_path() {
        assert_eq!(
            paths(
                r#"{"steps":[{"type":"a.b","args":[]},{"id":"","type":"a.b","args":[]},{"id":"x","type":"a.b","args":[]},{"id":"x","type":"a.b","args":[]}]}"#
            ),
            ["$.steps[0].id", "$.steps[1].id", "$.steps[3].id"]
        );
        assert_eq!(
            paths(
                r#"{"steps":[{"id":"a","type":"a.b","args":[],"depends_on":["b","a","c","c"]},{"id":"c","type":"a.b","args":[],"depends_on":"a"}]}"#
            ),
            [
                "$.steps[0].depends_on[0]",
                "$.steps[0].depends_on[1]",
                "$.steps[0].depends_on[3]",
                "$.steps[1].depends_on"
            ]
        );
        match parsed(
            r#"{"steps":[{"id":"root","type":"a.b","args":[]},
                {"id":"a","type":"a.b","args":[],"depends_on":["root","c"]},
                {"id":"b","type":"a.b","args":[],"depends_on":["a"]},
                {"id":"c","type":"a.b","args":[],"depends_on":["b"]}]}"#,
        ) {
            Err(Invalid::Definition(v)) => {
                assert_eq!(v.len(), 1);
                assert_eq!(v[0].path, "$.steps[1].depends_on");
                assert!(
                    v[0].message.contains("a -> c -> b -> a"),
                    "{}",
                    v[0].message
                );
            }
            other => panic!("{other:?}"),
        }
        // A dependency form has no callbacks, and an item's job problems keep their paths.
        assert_eq!(
            paths(
                r#"{"steps":[{"id":"a","args":[]}],"callbacks":{"on_complete":{"type":"a.b","args":[]}}}"#
            ),
            ["$.callbacks", "$.steps[0].type"]
        );
    }

    #[test]
    fn find_cycle_sees_only_cycles() {
        assert_eq!(find_cycle(&[vec![], vec![0], vec![0, 1]]), None);
        assert_eq!(find_cycle(&[vec![1], vec![0]]), Some(vec![0, 1, 0]));
        assert_eq!(
            find_cycle(&[vec![], vec![0, 3], vec![1], vec![2]]),
            Some(vec![1, 3, 2, 1])
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
