-- Tenant scope beyond jobs: workflows, workers and cron entries name the tenant they belong to,
-- so that a request acting as a tenant (`X-OJS-Tenant`, or a key bound to one) sees and touches
-- only its own (`http::tenancy` decides, for every route). Null: the thing belongs to no tenant,
-- and only requests acting as no tenant see it.
--
-- - A workflow belongs to the tenant of its jobs when they all have the same one (a request
--   acting as a tenant makes them so); existing workflows are tagged here from their jobs.
-- - A worker belongs to the tenant of the request that first named it (register, heartbeat or
--   FETCH); a request acting as another tenant cannot use that worker id.
-- - A cron entry belongs to the tenant of the request that registered it; its template carries
--   the tenant in `meta.tenant_id`, so every run is the tenant's job.

alter table ojs_workflow add column tenant text;
alter table ojs_worker add column tenant text;
alter table ojs_cron add column tenant text;

update ojs_workflow w
   set tenant = t.tenant
  from (select n.workflow_id, min(j.tenant) as tenant
          from ojs_workflow_node n
          join ojs_job_all j on j.id = n.job_id
         group by n.workflow_id
        having count(distinct j.tenant) = 1 and count(j.tenant) = count(*)) t
 where t.workflow_id = w.id and t.tenant <> '';

-- A tenant's workflows, newest first (the list a tenant reads).
create index ojs_workflow_tenant_idx on ojs_workflow (tenant, created_at) where tenant is not null;

comment on column ojs_workflow.tenant is 'The tenant the workflow belongs to (the tenant of all its jobs); null: none. Requests acting as another tenant do not see it.';
comment on column ojs_worker.tenant is 'The tenant of the request that first named the worker (register, heartbeat or FETCH); null: none. Requests acting as another tenant cannot use or see it.';
comment on column ojs_cron.tenant is 'The tenant of the request that registered the entry (its runs are that tenant''s jobs); null: none. Requests acting as another tenant do not see it.';
comment on index ojs_workflow_tenant_idx is 'A tenant''s workflows by creation time.';
