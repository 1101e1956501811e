//! Workflows: made atomically with all their jobs (those that wait are held `pending`), read
//! with their jobs' live state, cancelled. The database advances them (migration V18).

use uuid::Uuid;

use super::{Broker, PushContext, PushOutcome};
use crate::error::{Error, Result};
use crate::store;
use crate::store::workflow::{Cancelled, NewNode, NodeRow, WorkflowRow};
use crate::workflow::{Definition, WorkflowType};

/// A workflow as read: its row and its nodes in index order.
#[derive(Debug, Clone)]
pub struct WorkflowView {
    pub workflow: WorkflowRow,
    pub nodes: Vec<NodeRow>,
}

/// What a cancel stopped.
#[derive(Debug, Clone)]
pub struct WorkflowCancelled {
    pub view: WorkflowView,
    /// Nodes that will never run.
    pub stopped: i64,
    /// Nodes that had completed before.
    pub completed: i64,
}

impl Broker {
    /// Job `id`'s lineage: where it came from and what it leads to
    /// ([`store::workflow::lineage`]).
    pub async fn job_lineage(&self, id: crate::job::JobId) -> Result<store::workflow::LineageRow> {
        store::workflow::lineage(&self.db, id.0)
            .await?
            .ok_or(Error::JobNotFound(id))
    }

    /// Makes a workflow and every job of it in one transaction: all or nothing. A job a unique
    /// policy resolves to an existing job refuses the workflow (409), since that job is not
    /// the workflow's.
    pub async fn create_workflow(
        &self,
        definition: &Definition,
        ctx: &PushContext,
    ) -> Result<WorkflowView> {
        let jobs: Vec<_> = definition.nodes.iter().map(|n| n.job.clone()).collect();
        let mut tx = self.db.begin().await?;
        let (pushed, configs) = self.enqueuer.push_in(&mut tx, &jobs, ctx).await?;
        if let Some((index, p)) = pushed
            .iter()
            .enumerate()
            .find(|(_, p)| p.outcome != PushOutcome::Created)
        {
            return Err(Error::DuplicateUnique {
                existing: p.job.id,
                existing_state: p.job.state,
                unique_key: p.job.unique_key.clone().unwrap_or_default(),
                index: Some(index),
            });
        }
        let nodes: Vec<NewNode<'_>> = definition
            .nodes
            .iter()
            .zip(&pushed)
            .map(|(node, p)| NewNode {
                kind: node.kind.as_str(),
                job_id: p.job.id.0,
                r#type: &node.job.r#type,
                queue: &p.job.queue,
                waiting: node.held,
                name: node.name.as_deref(),
                depends_on: (definition.r#type == WorkflowType::Dag)
                    .then_some(node.depends_on.as_slice()),
            })
            .collect();
        store::workflow::insert(
            &mut *tx,
            definition.id,
            definition.r#type.as_str(),
            definition.name.as_deref(),
            definition.priority,
            i32::try_from(definition.total()).unwrap_or(i32::MAX),
            &nodes,
        )
        .await?;
        tx.commit().await?;
        self.enqueuer.after_commit(pushed, &configs).await;
        self.workflow(definition.id).await
    }

    /// A workflow with its nodes' live state.
    pub async fn workflow(&self, id: Uuid) -> Result<WorkflowView> {
        // One snapshot: the counts and the nodes agree.
        let mut tx = self.db.begin().await?;
        let workflow = store::workflow::get(&mut *tx, id)
            .await?
            .ok_or(Error::WorkflowNotFound(id))?;
        let nodes = store::workflow::nodes(&mut *tx, id).await?;
        tx.commit().await?;
        Ok(WorkflowView { workflow, nodes })
    }

    /// Workflows, newest first (optionally of one state), a page at a time, with the total.
    pub async fn workflows(
        &self,
        state: Option<&str>,
        tenant: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<WorkflowRow>, i64)> {
        Ok(store::workflow::list(&self.db, state, tenant, limit, offset).await?)
    }

    /// Cancels a running workflow (409 once it has ended).
    pub async fn cancel_workflow(&self, id: Uuid) -> Result<WorkflowCancelled> {
        match store::workflow::cancel(&self.db, id).await? {
            Cancelled::NotFound => Err(Error::WorkflowNotFound(id)),
            Cancelled::Ended(state) => Err(Error::WorkflowEnded { id, state }),
            Cancelled::Done { stopped, completed } => Ok(WorkflowCancelled {
                view: self.workflow(id).await?,
                stopped,
                completed,
            }),
        }
    }
}
