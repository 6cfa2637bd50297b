-- Named queries of the control-plane store, portable across SQLite and PostgreSQL.
--
-- Each block: a `-- name: <name>` header, a comment saying what it does, one
-- statement. `:name` is a parameter and `{now}` the store clock (seconds since
-- the epoch); the connector translates both. A block of the same name in
-- sqlite/queries.sql or postgres/queries.sql replaces this one for that dialect.
-- States are always parameters, named after the state (`:ready` is
-- SnapshotState.READY.value); only the migrations spell them out.
-- See tenure/store/queries.py and docs/architecture.md.


-- ==================================================================== clock and migrations

-- name: store_now
-- The store clock.
SELECT {now} AS now;

-- name: migrations_table_create
-- The bookkeeping table of applied migrations.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at DOUBLE PRECISION NOT NULL
);

-- name: migrations_applied
-- Every applied migration: version, name, applied_at and (from migration 4 on) checksum.
SELECT * FROM schema_migrations ORDER BY version;

-- name: migration_record
-- Record migration :v (:n) as applied.
INSERT INTO schema_migrations (version, name, applied_at) VALUES (:v, :n, {now});

-- name: migration_set_checksum
-- The checksum :c of applied migration :v, where none is recorded yet.
UPDATE schema_migrations SET checksum = :c WHERE version = :v AND checksum IS NULL;


-- ==================================================================== workspaces

-- name: workspace_by_ref
-- A workspace by name or id.
SELECT * FROM workspaces WHERE name = :r OR id = :r;

-- name: workspace_for_update
-- A workspace by name or id, the row held until the transaction ends (PostgreSQL: FOR UPDATE;
-- SQLite's write transaction already holds the database). Read first by every path that decides
-- from the row before it writes (ADR 0012).
SELECT * FROM workspaces WHERE name = :r OR id = :r;

-- name: workspaces_all
-- Every workspace, by name.
SELECT * FROM workspaces ORDER BY name;

-- name: workspace_id_by_name
-- The id of the workspace named :n.
SELECT id FROM workspaces WHERE name = :n;

-- name: workspace_insert
-- A new, empty workspace in state :s.
INSERT INTO workspaces (id, name, state, created_at, updated_at)
VALUES (:id, :n, :s, {now}, {now});

-- name: workspace_insert_from_snapshot
-- A new workspace whose head and base is snapshot :b, only while that snapshot is READY.
INSERT INTO workspaces (id, name, state, head_snapshot_id, base_snapshot_id, created_at, updated_at)
SELECT :id, :n, :s, :b, :b, {now}, {now}
WHERE EXISTS (SELECT 1 FROM snapshots WHERE id = :b AND state = :ready)
RETURNING id;

-- name: workspace_move
-- A guarded state change :e → :t.
UPDATE workspaces SET state = :t, updated_at = {now}
WHERE id = :id AND state = :e
RETURNING id;

-- name: workspace_move_to_expiring
-- A guarded state change :e → :t (EXPIRING) that records when expiry began.
UPDATE workspaces SET state = :t, updated_at = {now}, expiring_since = {now}
WHERE id = :id AND state = :e
RETURNING id;

-- name: workspace_undo_expiry
-- EXPIRING → IDLE, only within :g seconds of the start of expiry.
UPDATE workspaces SET state = :idle, expiring_since = NULL, updated_at = {now}
WHERE id = :id AND state = :expiring AND expiring_since + :g >= {now}
RETURNING id;

-- name: workspace_dispose
-- Any state → DELETED for a closing project, fenced by writer generation :g.
UPDATE workspaces SET state = :deleted, pending_snapshot_id = NULL, pending_key = NULL, pending_version = NULL,
    updated_at = {now}
WHERE id = :id AND writer_generation = :g;

-- name: workspace_bump_writer
-- A new writer: generation :old → :g and state :t, unfinished checkpoint forgotten (compare-and-swap).
UPDATE workspaces SET writer_generation = :g, state = :t, pending_snapshot_id = NULL, pending_key = NULL,
    pending_version = NULL, updated_at = {now}
WHERE id = :id AND writer_generation = :old
RETURNING id;

-- name: workspace_release
-- MOUNTED → IDLE at the end of a clean release, fenced by writer generation :g.
UPDATE workspaces SET state = :idle, updated_at = {now}
WHERE id = :w AND state = :mounted AND writer_generation = :g
RETURNING id;


-- ==================================================================== workspace expiry (ADR 0019)
-- Candidates are read by index (workspaces_by_state_updated, workspaces_by_state_expiring), a page of
-- :limit at a time after the key (:kt, :ki); each write then repeats the whole guard against the row.

-- name: workspaces_idle_before
-- IDLE workspaces whose row has not changed since store time :before (no mount, checkpoint or undo
-- since), after the key (:kt, :ki) in (updated_at, id) order, at most :limit.
SELECT id, name, updated_at AS k FROM workspaces
WHERE state = :idle AND updated_at <= :before AND (updated_at > :kt OR (updated_at = :kt AND id > :ki))
ORDER BY updated_at, id LIMIT :limit;

-- name: workspaces_expiring_before
-- EXPIRING workspaces whose expiry began before store time :before, after the key (:kt, :ki) in
-- (expiring_since, id) order, at most :limit.
SELECT id, name, expiring_since AS k FROM workspaces
WHERE state = :expiring AND expiring_since < :before
  AND (expiring_since > :kt OR (expiring_since = :kt AND id > :ki))
ORDER BY expiring_since, id LIMIT :limit;

-- name: project_of_workspace_for_share
-- The project whose workspace is :w, with its status, the row held until the transaction ends
-- (PostgreSQL: FOR SHARE, so a status change waits; SQLite's write transaction already holds the database).
SELECT tenant, name, status FROM projects WHERE workspace_id = :w;

-- name: workspace_expire_idle
-- IDLE → EXPIRING for a workspace unchanged since :before, only while no writer lease on it is live
-- (ACTIVE or RELEASING, unexpired) and its project, if it has one, is SUSPENDED; records when expiry began.
UPDATE workspaces SET state = :expiring, expiring_since = {now}, updated_at = {now}
WHERE id = :id AND state = :idle AND updated_at <= :before
  AND NOT EXISTS (SELECT 1 FROM writer_leases WHERE workspace_id = :id AND state IN (:active, :releasing)
                  AND expires_at > {now})
  AND NOT EXISTS (SELECT 1 FROM projects WHERE workspace_id = :id AND status <> :suspended)
RETURNING id;

-- name: workspace_delete_expired
-- EXPIRING → DELETED, only while no writer lease on the workspace is live and its project, if it has
-- one, is SUSPENDED; with a :before, only when its expiry began before it (its grace has run out).
-- A NULL :before leaves the grace to the caller (delete_expired); the CAST tells PostgreSQL its type.
UPDATE workspaces SET state = :deleted, pending_snapshot_id = NULL, pending_key = NULL, pending_version = NULL,
    updated_at = {now}
WHERE id = :id AND state = :expiring AND (CAST(:before AS DOUBLE PRECISION) IS NULL OR expiring_since < :before)
  AND NOT EXISTS (SELECT 1 FROM writer_leases WHERE workspace_id = :id AND state IN (:active, :releasing)
                  AND expires_at > {now})
  AND NOT EXISTS (SELECT 1 FROM projects WHERE workspace_id = :id AND status <> :suspended)
RETURNING id;

-- name: snapshots_of_workspace_for_update
-- The published and failed snapshots of workspace :w, the rows held until the transaction ends
-- (PostgreSQL: FOR UPDATE, so a fork of one of them waits or has committed; ADR 0012).
SELECT id FROM snapshots WHERE workspace_id = :w AND state IN (:ready, :degraded, :failed);

-- name: snapshots_delete_of_expired_workspace
-- Every READY, DEGRADED or FAILED snapshot of expired workspace :w → DELETING, except the head of
-- another live workspace (a fork of it) and keep-pinned ones.
UPDATE snapshots SET state = :deleting, updated_at = {now}
WHERE workspace_id = :w AND state IN (:ready, :degraded, :failed)
  AND NOT EXISTS (SELECT 1 FROM workspaces o WHERE o.head_snapshot_id = snapshots.id AND o.state <> :deleted)
  AND NOT EXISTS (SELECT 1 FROM pins p WHERE p.snapshot_id = snapshots.id AND p.kind = :keep)
RETURNING id;


-- ==================================================================== writer leases

-- name: writer_lease_by_generation
-- The writer lease of workspace :w at generation :g.
SELECT * FROM writer_leases WHERE workspace_id = :w AND generation = :g;

-- name: writer_leases_of_workspace
-- Every writer lease of workspace :w, oldest first.
SELECT * FROM writer_leases WHERE workspace_id = :w ORDER BY generation;

-- name: writer_lease_live_exists
-- A row when workspace :w has a live (ACTIVE or RELEASING, unexpired) writer lease.
SELECT 1 AS x FROM writer_leases
WHERE workspace_id = :w AND state IN (:active, :releasing) AND expires_at > {now};

-- name: writer_lease_insert
-- A new ISSUED writer lease at generation :g for :ttl seconds.
INSERT INTO writer_leases (id, workspace_id, generation, state, holder, issued_at, expires_at, updated_at)
VALUES (:id, :w, :g, :issued, :h, {now}, {now} + :ttl, {now});

-- name: writer_lease_move
-- A guarded lease state change :e → :t.
UPDATE writer_leases SET state = :t, updated_at = {now}
WHERE id = :id AND state = :e
RETURNING id;

-- name: writer_lease_fenced_move
-- A lease state change :e → :t, only while the lease is unexpired and its generation current.
UPDATE writer_leases SET state = :t, updated_at = {now}
WHERE id = :id AND state = :e AND expires_at > {now}
  AND generation = (SELECT writer_generation FROM workspaces WHERE id = :w)
RETURNING id;

-- name: writer_lease_renew
-- Extend a live lease of the current generation by :ttl seconds.
UPDATE writer_leases SET expires_at = {now} + :ttl, updated_at = {now}
WHERE id = :id AND state IN (:active, :releasing) AND expires_at > {now}
  AND generation = (SELECT writer_generation FROM workspaces WHERE id = :w)
RETURNING id;

-- name: writer_leases_expire
-- Every non-terminal lease past its TTL → EXPIRED.
UPDATE writer_leases SET state = :expired, updated_at = {now}
WHERE state IN (:issued, :active, :releasing) AND expires_at <= {now}
RETURNING id;

-- name: writer_leases_retire_older
-- Non-terminal leases of workspace :w older than generation :g: EXPIRED when past their TTL, else REVOKED.
UPDATE writer_leases SET state = CASE WHEN expires_at <= {now} THEN :expired ELSE :revoked END, updated_at = {now}
WHERE workspace_id = :w AND generation < :g AND state IN (:issued, :active, :releasing);

-- name: writer_leases_revoke_all
-- Every non-terminal lease of workspace :w → REVOKED.
UPDATE writer_leases SET state = :revoked, updated_at = {now}
WHERE workspace_id = :w AND state IN (:issued, :active, :releasing);


-- ==================================================================== checkpoint publication

-- name: workspace_begin_checkpoint
-- MOUNTED → CHECKPOINTING under key :k and snapshot :s, fenced by generation :g with a live lease.
UPDATE workspaces SET state = :checkpointing, pending_snapshot_id = :s, pending_key = :k,
    pending_version = version, updated_at = {now}
WHERE id = :w AND state = :mounted AND writer_generation = :g
  AND EXISTS (SELECT 1 FROM writer_leases l WHERE l.workspace_id = workspaces.id AND l.generation = :g
              AND l.state IN (:active, :releasing) AND l.expires_at > {now})
RETURNING version, head_snapshot_id;

-- name: workspace_publish
-- Head advance, version + 1, CHECKPOINTING → MOUNTED; guarded by version, key, snapshot and a live lease at :g.
UPDATE workspaces SET head_snapshot_id = :s, version = version + 1, state = :mounted,
    pending_snapshot_id = NULL, pending_key = NULL, pending_version = NULL, updated_at = {now}
WHERE id = :w AND state = :checkpointing AND version = :v AND pending_key = :k
  AND pending_snapshot_id = :s AND writer_generation = :g
  AND EXISTS (SELECT 1 FROM writer_leases l WHERE l.workspace_id = workspaces.id AND l.generation = :g
              AND l.state IN (:active, :releasing) AND l.expires_at > {now})
RETURNING id;

-- name: workspace_abandon_checkpoint
-- CHECKPOINTING → MOUNTED without a head advance, for key :k at generation :g.
UPDATE workspaces SET state = :mounted, pending_snapshot_id = NULL, pending_key = NULL, pending_version = NULL,
    updated_at = {now}
WHERE id = :w AND state = :checkpointing AND pending_key = :k AND writer_generation = :g
RETURNING id;

-- name: snapshot_by_key
-- The snapshot of workspace :w under idempotency key :k.
SELECT * FROM snapshots WHERE workspace_id = :w AND idempotency_key = :k;

-- name: snapshot_insert
-- A new UPLOADING snapshot record.
INSERT INTO snapshots (id, workspace_id, parent_id, state, generation, idempotency_key, reason, created_at, updated_at)
VALUES (:s, :w, :p, :uploading, :g, :k, :r, {now}, {now});

-- name: snapshot_with_writer_generation
-- A snapshot's state, root and generation with its workspace's current writer generation.
SELECT s.state, s.root_oid, s.generation, w.writer_generation
FROM snapshots s JOIN workspaces w ON w.id = s.workspace_id
WHERE s.id = :s;

-- name: snapshot_mark_validating
-- :e → VALIDATING with root :r and counts, only for the writer of ticket generation :g while :g is current:
-- the snapshot is still that writer's (not adopted by a newer one, S-33) and :g is the workspace's.
UPDATE snapshots SET state = :validating, root_oid = :r, files = :f, bytes_read = :br, bytes_new = :bn,
    skipped = :sk, updated_at = {now}
WHERE id = :s AND state = :e AND generation = :g
  AND generation = (SELECT writer_generation FROM workspaces WHERE id = :w)
RETURNING id;

-- name: snapshot_published
-- Snapshot :s when it is published (READY or DEGRADED).
SELECT * FROM snapshots WHERE id = :s AND state IN (:ready, :degraded);

-- name: snapshot_mark_ready
-- VALIDATING → READY.
UPDATE snapshots SET state = :ready, updated_at = {now}
WHERE id = :s AND state = :validating
RETURNING *;

-- name: snapshot_state
-- The state of snapshot :s.
SELECT state FROM snapshots WHERE id = :s;

-- name: snapshot_fail
-- :st → FAILED with error :e, only while the snapshot is writer :g's checkpoint (not adopted by a newer
-- writer, S-33) and :g is its workspace's writer generation.
UPDATE snapshots SET state = :failed, error = :e, updated_at = {now}
WHERE id = :s AND state = :st AND generation = :g
  AND generation = (SELECT writer_generation FROM workspaces WHERE id = snapshots.workspace_id)
RETURNING id;

-- name: snapshot_fail_unpublished
-- An UPLOADING or VALIDATING snapshot → FAILED with error :e.
UPDATE snapshots SET state = :failed, error = :e, updated_at = {now}
WHERE id = :s AND state IN (:uploading, :validating);

-- name: snapshot_adopt
-- An unfinished checkpoint of an older writer, retried under its key by writer :g: it becomes
-- that writer's, on top of head :p (S-33).
UPDATE snapshots SET generation = :g, parent_id = :p, updated_at = {now}
WHERE id = :s AND workspace_id = :w AND state IN (:uploading, :validating) AND generation < :g
RETURNING id;

-- name: snapshots_fail_superseded
-- Unfinished checkpoints of writers older than :g that were not retried: FAILED once writer :g
-- begins a checkpoint under another key (their objects become reclaimable).
UPDATE snapshots SET state = :failed, error = :e, updated_at = {now}
WHERE workspace_id = :w AND generation < :g AND state IN (:uploading, :validating);

-- name: snapshot_delete_unpublished
-- Remove an UPLOADING or VALIDATING record (a checkpoint with nothing to publish).
DELETE FROM snapshots WHERE id = :s AND state IN (:uploading, :validating);

-- name: snapshots_fail_unfinished
-- Every UPLOADING or VALIDATING snapshot of disposed workspace :w → FAILED.
UPDATE snapshots SET state = :failed, error = 'workspace disposed', updated_at = {now}
WHERE workspace_id = :w AND state IN (:uploading, :validating);

-- name: snapshots_delete_of_workspace
-- Every READY, DEGRADED or FAILED snapshot of disposed workspace :w → DELETING, except the head of
-- another live workspace (a fork of it): the fork's content stays. Run after the snapshots are locked
-- (snapshots_of_workspace_for_update), so a fork either committed first and is seen here or waits and
-- then finds its base DELETING (ADR 0012).
UPDATE snapshots SET state = :deleting, updated_at = {now}
WHERE workspace_id = :w AND state IN (:ready, :degraded, :failed)
  AND NOT EXISTS (SELECT 1 FROM workspaces o WHERE o.head_snapshot_id = snapshots.id AND o.state <> :deleted)
RETURNING id;


-- ==================================================================== snapshots

-- name: snapshot_for_update
-- Snapshot :id, the row held until the transaction ends (PostgreSQL: FOR UPDATE; ADR 0012).
SELECT id FROM snapshots WHERE id = :id;

-- name: snapshot_by_id
-- A snapshot by id.
SELECT * FROM snapshots WHERE id = :r;

-- name: snapshots_by_id_prefix
-- Up to two snapshots whose id matches LIKE pattern :p (its % and _ escaped with a backslash, but the last %).
SELECT * FROM snapshots WHERE id LIKE :p ESCAPE '\' LIMIT 2;

-- name: snapshots_of_workspace
-- Every snapshot of workspace :w, oldest first.
SELECT * FROM snapshots WHERE workspace_id = :w ORDER BY created_at, id;

-- name: snapshot_move
-- A guarded snapshot state change :s → :t, setting error :e.
UPDATE snapshots SET state = :t, error = :e, updated_at = {now}
WHERE id = :id AND state = :s
RETURNING *;

-- name: snapshot_delete
-- :s → DELETING unless the snapshot is the head of a live workspace or keep-pinned.
UPDATE snapshots SET state = :deleting, updated_at = {now}
WHERE id = :id AND state = :s
  AND NOT EXISTS (SELECT 1 FROM workspaces WHERE head_snapshot_id = :id AND state <> :deleted)
  AND NOT EXISTS (SELECT 1 FROM pins WHERE snapshot_id = :id AND kind = :keep)
RETURNING *;

-- name: snapshot_head_of
-- The live workspace whose head is snapshot :id.
SELECT name FROM workspaces WHERE head_snapshot_id = :id AND state <> :deleted;

-- name: snapshots_count_by_state
-- How many snapshots are in each state.
SELECT state, COUNT(*) AS n FROM snapshots GROUP BY state;


-- ==================================================================== pins and GC

-- name: pin_insert_upload
-- An upload pin of kind :kind expiring in :ttl seconds.
INSERT INTO pins (id, kind, holder, created_at, expires_at)
VALUES (:id, :kind, :h, {now}, {now} + :ttl);

-- name: pin_object_insert
-- One object of an upload pin.
INSERT INTO pin_objects (pin_id, oid) VALUES (:p, :o) ON CONFLICT DO NOTHING;

-- name: pin_insert_snapshot
-- A pin of kind :k on snapshot :s, only while it is readable; a NULL :ttl never expires.
INSERT INTO pins (id, kind, snapshot_id, holder, created_at, expires_at)
SELECT :id, :k, :s, :h, {now}, {now} + :ttl
WHERE EXISTS (SELECT 1 FROM snapshots WHERE id = :s
              AND state IN (:uploading, :validating, :ready, :degraded, :deleting))
RETURNING id;

-- name: pin_objects_delete
-- The objects of pin :p.
DELETE FROM pin_objects WHERE pin_id = :p;

-- name: pin_delete
-- Pin :p.
DELETE FROM pins WHERE id = :p;

-- name: pins_delete_of_snapshot
-- Every pin of kind :k on snapshot :s.
DELETE FROM pins WHERE snapshot_id = :s AND kind = :k RETURNING id;

-- name: pins_live_snapshot_ids
-- Snapshots named by an unexpired pin.
SELECT DISTINCT snapshot_id FROM pins
WHERE snapshot_id IS NOT NULL AND (expires_at IS NULL OR expires_at > {now});

-- name: pin_objects_delete_expired
-- The objects of every expired pin.
DELETE FROM pin_objects WHERE pin_id IN (SELECT id FROM pins WHERE expires_at <= {now});

-- name: pins_holders
-- Every pin with its holder.
SELECT id, holder FROM pins;

-- name: pins_delete_expired
-- Every expired pin.
DELETE FROM pins WHERE expires_at <= {now};

-- name: snapshots_collect_deleting
-- DELETING → DELETED for every snapshot no pin names.
UPDATE snapshots SET state = :deleted, updated_at = {now}
WHERE state = :deleting AND id NOT IN (SELECT snapshot_id FROM pins WHERE snapshot_id IS NOT NULL);

-- name: gc_mark_roots
-- Root trees of every readable or pinned snapshot.
SELECT root_oid FROM snapshots
WHERE root_oid IS NOT NULL
  AND (state IN (:uploading, :validating, :ready, :degraded, :deleting)
       OR id IN (SELECT snapshot_id FROM pins WHERE snapshot_id IS NOT NULL));

-- name: snapshot_roots_newest
-- The root trees of the :limit newest published (READY or DEGRADED) snapshots: does an object store hold this
-- store's snapshots (tenure.workspaces.binding)?
SELECT root_oid FROM snapshots
WHERE state IN (:ready, :degraded) AND root_oid IS NOT NULL
ORDER BY created_at DESC, id DESC LIMIT :limit;

-- name: gc_roots_since
-- Root trees of readable snapshots changed since store time :m.
SELECT DISTINCT root_oid FROM snapshots
WHERE root_oid IS NOT NULL AND state IN (:uploading, :validating, :ready, :degraded, :deleting)
  AND updated_at >= :m;

-- name: pin_objects_live
-- Objects protected by an unexpired upload pin.
SELECT DISTINCT o.oid FROM pin_objects o JOIN pins p ON p.id = o.pin_id
WHERE p.expires_at IS NULL OR p.expires_at > {now};


-- ==================================================================== projects
-- Readers outside tenure/projects/ownership.py select this column list, never
-- home_pod_id or claimed_at: id, tenant, name, project_group, status, kind,
-- lifecycle_type, owner_required, home_node, generation, placement_selector,
-- placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave.

-- name: project_id_by_name
-- The id of project :t/:n.
SELECT id FROM projects WHERE tenant = :t AND name = :n;

-- name: project_insert
-- A new INIT project.
INSERT INTO projects (id, tenant, name, project_group, status, kind, lifecycle_type, workspace_id, created_at,
    updated_at)
VALUES (:id, :t, :n, :g, :init, :k, :lt, :w, {now}, {now});

-- name: project_by_id
-- Project :id.
SELECT id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave
FROM projects WHERE id = :id;

-- name: project_by_name
-- Project :t/:n.
SELECT id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave
FROM projects WHERE tenant = :t AND name = :n;

-- name: projects_all
-- Every project, by tenant and name.
SELECT id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave
FROM projects ORDER BY tenant, name;

-- name: projects_with_status
-- Every project with status :s, by tenant and name.
SELECT id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave
FROM projects WHERE status = :s ORDER BY tenant, name;

-- name: project_transition
-- Status :e → :t with error :err, fenced by generation :g; returns the row as written.
UPDATE projects SET status = :t, error = :err, updated_at = {now}
WHERE tenant = :tn AND name = :n AND status = :e AND generation = :g
RETURNING id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave;

-- name: project_record_error
-- Record error :e, fenced by generation :g.
UPDATE projects SET error = :e, updated_at = {now} WHERE id = :id AND generation = :g;

-- name: sessions_unbind
-- Step 1a: unbind every bound session of project :p, fenced by generation :g.
UPDATE sessions SET bound_connection_id = NULL, bound_pod_id = NULL, updated_at = {now}
WHERE project_id = :p AND bound_connection_id IS NOT NULL
  AND EXISTS (SELECT 1 FROM projects p WHERE p.id = :p AND p.generation = :g);

-- name: project_fence
-- Close fences: generation :g and the lease to closer :pod, unless the project is CLOSED.
UPDATE projects SET generation = :g, home_pod_id = :pod, home_node = :node, claimed_at = {now}, pod_bound = 0,
    updated_at = {now}
WHERE id = :id AND status <> :closed;

-- name: project_close
-- → CLOSED in archive group :grp; never a SYSTEM project; fenced by generation :g; returns the row as written.
UPDATE projects SET status = :closed, project_group = :grp, updated_at = {now}
WHERE id = :id AND kind <> :system AND status <> :closed AND generation = :g
RETURNING id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave;

-- name: project_set_lifecycle_type
-- Lifecycle type :v; never for a HOMELESS or SYSTEM project.
UPDATE projects SET lifecycle_type = :v, updated_at = {now}
WHERE id = :id AND lifecycle_type <> :homeless AND kind <> :system;

-- name: project_set_placement
-- Placement selector :s (JSON) and score :sc.
UPDATE projects SET placement_selector = :s, placement_score = :sc, updated_at = {now} WHERE id = :id;

-- name: project_mark_pending
-- Set pending_since only when it is empty.
UPDATE projects SET pending_since = {now} WHERE tenant = :t AND name = :n AND pending_since IS NULL;

-- name: project_set_owner_required
-- Write owner_required :v only when it flips.
UPDATE projects SET owner_required = :v, updated_at = {now}
WHERE tenant = :t AND name = :n AND owner_required <> :v;

-- name: projects_owner_required
-- Every project whose owner_required flag is set.
SELECT id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave
FROM projects WHERE owner_required = 1 ORDER BY tenant, name;

-- ==================================================================== ownership (tenure/projects/ownership.py only)

-- name: project_holder_for_update
-- The holder of :t/:n now and its workspace (the row is locked on PostgreSQL until the transaction ends).
SELECT home_pod_id, workspace_id FROM projects WHERE tenant = :t AND name = :n;

-- name: project_claim
-- CAS on the lease: free, ours, or expired by the store clock (its own claimed_at + TTL and, when
-- pod-bound, its holder's pod lease + TTL); a new holder raises the generation, and the lineage too
-- unless the last holder let go after a final checkpoint (vouched, ADR 0042). The lease is
-- pod-bound when the claimant is a pod that beats (it has a pod lease).
UPDATE projects SET home_pod_id = :pod, home_node = :node, claimed_at = {now}, pending_since = NULL,
    generation = CASE WHEN home_pod_id = :pod THEN generation ELSE generation + 1 END, updated_at = {now},
    lineage = CASE WHEN home_pod_id = :pod OR vouched = 1 THEN lineage ELSE lineage + 1 END,
    vouched = CASE WHEN home_pod_id = :pod THEN vouched ELSE 0 END,
    pod_bound = (CASE WHEN EXISTS (SELECT 1 FROM pods c WHERE c.id = :pod AND c.lease_renewed_at IS NOT NULL)
                      THEN 1 ELSE 0 END)
WHERE tenant = :t AND name = :n AND status <> :closed AND lifecycle_type <> :homeless
  AND (home_pod_id IS NULL OR home_pod_id = :pod
       OR ((claimed_at IS NULL OR claimed_at < {now} - :ttl)
           AND NOT (pod_bound = 1 AND EXISTS (SELECT 1 FROM pods q WHERE q.id = projects.home_pod_id
                                                                   AND q.lease_renewed_at >= {now} - :ttl))))
RETURNING id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave,
    (SELECT w.writer_generation FROM workspaces w WHERE w.id = projects.workspace_id) AS writer_generation;

-- name: project_adopt
-- Take :t/:n over from pod :prev, this host's previous pod (its data-folder lock proves it dead, ADR 0020):
-- only while :prev holds it; the generation rises as in any takeover.
UPDATE projects SET home_pod_id = :pod, home_node = :node, claimed_at = {now}, pending_since = NULL,
    generation = generation + 1, updated_at = {now},
    pod_bound = (CASE WHEN EXISTS (SELECT 1 FROM pods c WHERE c.id = :pod AND c.lease_renewed_at IS NOT NULL)
                      THEN 1 ELSE 0 END)
WHERE tenant = :t AND name = :n AND home_pod_id = :prev AND status <> :closed
RETURNING id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave,
    (SELECT w.writer_generation FROM workspaces w WHERE w.id = projects.workspace_id) AS writer_generation;

-- name: project_set_generation
-- Set the generation to :g (the new writer lease's).
UPDATE projects SET generation = :g WHERE id = :id
RETURNING id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave;

-- name: project_status_and_type
-- Status and lifecycle type of :t/:n (why a claim matched nothing).
SELECT status, lifecycle_type FROM projects WHERE tenant = :t AND name = :n;

-- name: pod_renew_lease
-- One beat: renew pod :pod's own lease (every pod-bound project lease with it); a pod without a row
-- gets one. Its recorded losses (pod_losses, ADR 0045) are counted into its lost counter; pending says how
-- many, for pod_losses_clear to delete in the same transaction (SQLite serializes writers, so exactly
-- these). Returns its lost counter and status; nothing for a STOPPED pod.
INSERT INTO pods (id, node_name, endpoint, labels, capacity, status, started_at, heartbeat_at, lease_renewed_at,
                  lost)
VALUES (:pod, '', NULL, '{}', 0, :running, {now}, {now}, {now},
        (SELECT COUNT(*) FROM pod_losses l WHERE l.pod_id = :pod))
ON CONFLICT (id) DO UPDATE SET lease_renewed_at = {now},
    lost = pods.lost + (SELECT COUNT(*) FROM pod_losses l WHERE l.pod_id = :pod)
WHERE pods.status <> :stopped
RETURNING lost, status, (SELECT COUNT(*) FROM pod_losses l WHERE l.pod_id = :pod) AS pending;

-- name: pod_losses_clear
-- Delete the recorded losses of pod :pod that its renewal has just counted into its lost counter.
DELETE FROM pod_losses WHERE pod_id = :pod;

-- name: projects_bind_to_pod
-- Bind to pod :pod's lease the leases it holds that are not bound yet (claims it made before it beat);
-- an index lookup that finds nothing once they are bound.
UPDATE projects SET pod_bound = 1 WHERE home_pod_id = :pod AND pod_bound = 0 AND status <> :closed;

-- name: pods_reap
-- Delete the rows of pods silent for :age seconds that hold no project (dead pods' rows otherwise
-- accumulate, one per restart, and the needing-owner statement visits each expired pod lease).
DELETE FROM pods
WHERE heartbeat_at < {now} - :age AND (lease_renewed_at IS NULL OR lease_renewed_at < {now} - :age)
  AND NOT EXISTS (SELECT 1 FROM projects p WHERE p.home_pod_id = pods.id);

-- name: pods_prune
-- Delete the rows of pods that hold no project and were last heard from more than :age seconds ago:
-- STOPPED ones, and dead ones (any other status, silent past the liveness TTL :ttl, their pod lease run
-- out under it too); never a live pod, nor pod :keep (the pod asking). Returns their ids.
DELETE FROM pods
WHERE heartbeat_at < {now} - :age AND id <> :keep
  AND (status = :stopped
       OR (heartbeat_at < {now} - :ttl AND (lease_renewed_at IS NULL OR lease_renewed_at < {now} - :ttl)))
  AND NOT EXISTS (SELECT 1 FROM projects p WHERE p.home_pod_id = pods.id)
RETURNING id;

-- name: pod_loss_record
-- Pod :old lost project :p (a takeover or a fence raised its generation to :g): its next beat re-reads what
-- it holds. A row of its own, never the pods row (ADR 0045): nothing the former holder's open transaction
-- holds can make the claim wait. Nothing for a pod without a row (one that never beat).
INSERT INTO pod_losses (pod_id, project_id, generation, lost_at)
SELECT :old, :p, :g, {now} WHERE EXISTS (SELECT 1 FROM pods q WHERE q.id = :old)
ON CONFLICT (pod_id, project_id, generation) DO NOTHING;

-- name: pod_losses_reap
-- Delete the recorded losses of pods that have no row any more (reaped: nobody will count them).
DELETE FROM pod_losses WHERE NOT EXISTS (SELECT 1 FROM pods q WHERE q.id = pod_losses.pod_id);

-- name: projects_release_leases
-- Release every lease pod :pod holds.
UPDATE projects SET home_pod_id = NULL, home_node = NULL, claimed_at = NULL, pod_bound = 0, updated_at = {now}
WHERE home_pod_id = :pod;

-- name: project_release_lease
-- Release the lease on :t/:n only while pod :pod holds it.
UPDATE projects SET home_pod_id = NULL, home_node = NULL, claimed_at = NULL, pod_bound = 0, updated_at = {now}
WHERE tenant = :t AND name = :n AND home_pod_id = :pod;

-- name: project_release_lease_vouched
-- Release the lease on :t/:n only while pod :pod holds it at generation :g, after a final checkpoint
-- under :g (a suspend, a drain's hand-over): every write acknowledged so far is in the head.
UPDATE projects SET home_pod_id = NULL, home_node = NULL, claimed_at = NULL, pod_bound = 0, vouched = 1,
    updated_at = {now}
WHERE tenant = :t AND name = :n AND home_pod_id = :pod AND generation = :g;

-- name: project_new_lineage
-- A new lineage for project :id at generation :g (a bring from a snapshot other than the head).
UPDATE projects SET lineage = lineage + 1, updated_at = {now} WHERE id = :id AND generation = :g
RETURNING id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave;

-- name: project_release_closed
-- Clear the lease columns of a CLOSED project.
UPDATE projects SET home_pod_id = NULL, home_node = NULL, claimed_at = NULL, pod_bound = 0
WHERE id = :id AND status = :closed;

-- name: project_owner
-- Holder of project :id and seconds until its lease expires under TTL :ttl (the later of its own
-- claim and, when pod-bound, its holder's pod lease).
SELECT p.home_pod_id, p.home_node,
    (CASE WHEN p.pod_bound = 1 AND q.lease_renewed_at > p.claimed_at THEN q.lease_renewed_at ELSE p.claimed_at END)
        + :ttl - {now} AS expires_in
FROM projects p LEFT JOIN pods q ON q.id = p.home_pod_id WHERE p.id = :id;

-- name: project_with_owner_by_name
-- Project :t/:n with its holder and the seconds until its lease expires under TTL :ttl (as project_owner):
-- what a pod routes a request by, in one statement.
SELECT p.id, p.tenant, p.name, p.project_group, p.status, p.kind, p.lifecycle_type, p.owner_required, p.home_node,
    p.generation, p.placement_selector, p.placement_score, p.pending_since, p.workspace_id, p.error, p.created_at,
    p.updated_at, p.lineage, p.autosave, p.home_pod_id,
    (CASE WHEN p.pod_bound = 1 AND q.lease_renewed_at > p.claimed_at THEN q.lease_renewed_at ELSE p.claimed_at END)
        + :ttl - {now} AS expires_in
FROM projects p LEFT JOIN pods q ON q.id = p.home_pod_id WHERE p.tenant = :t AND p.name = :n;

-- name: projects_with_owners
-- Every project (of status :s, or all when :s is NULL), by tenant and name, with its holder and the seconds
-- until its lease expires under TTL :ttl (as project_owner): a listing with owners in one statement.
SELECT p.id, p.tenant, p.name, p.project_group, p.status, p.kind, p.lifecycle_type, p.owner_required, p.home_node,
    p.generation, p.placement_selector, p.placement_score, p.pending_since, p.workspace_id, p.error, p.created_at,
    p.updated_at, p.lineage, p.autosave, p.home_pod_id,
    (CASE WHEN p.pod_bound = 1 AND q.lease_renewed_at > p.claimed_at THEN q.lease_renewed_at ELSE p.claimed_at END)
        + :ttl - {now} AS expires_in
FROM projects p LEFT JOIN pods q ON q.id = p.home_pod_id
WHERE CAST(:s AS TEXT) IS NULL OR p.status = :s
ORDER BY p.tenant, p.name;

-- name: projects_held_by_pod
-- Every project pod :pod holds, except CLOSED ones.
SELECT id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave
FROM projects WHERE home_pod_id = :pod AND status <> :closed ORDER BY tenant, name;

-- name: projects_running_on_pod
-- Every RUNNING project pod :pod holds.
SELECT id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave
FROM projects WHERE home_pod_id = :pod AND status = :running ORDER BY tenant, name;

-- name: projects_score_on_pod
-- Sum of the placement scores of the projects pod :pod holds, except CLOSED ones.
SELECT COALESCE(SUM(placement_score), 0) AS s FROM projects WHERE home_pod_id = :pod AND status <> :closed;

-- name: projects_needing_owner
-- Projects that need an owner, are not pod-bound and have no live lease of their own, oldest claim
-- first (a range scan of the projects_needing_owner index: its predicate is spelled the same way,
-- see migrations 0003 and 0007).
SELECT id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave
FROM projects
WHERE pod_bound = 0
  AND (status = :init OR status = :recovering OR status = :running)
  AND (lifecycle_type = :permanent OR (lifecycle_type = :auto AND owner_required = 1))
  AND COALESCE(claimed_at, 0) < (SELECT {now}) - :ttl
ORDER BY COALESCE(claimed_at, 0), id LIMIT :limit OFFSET :skip;

-- name: projects_needing_owner_of_dead_pods
-- Pod-bound projects that need an owner whose pod's lease has run out (pods_by_lease, then
-- projects_by_holder for each such pod), the longest-silent pod first.
SELECT p.id, p.tenant, p.name, p.project_group, p.status, p.kind, p.lifecycle_type, p.owner_required, p.home_node,
    p.generation, p.placement_selector, p.placement_score, p.pending_since, p.workspace_id, p.error, p.created_at,
    p.updated_at, p.lineage, p.autosave
FROM pods q JOIN projects p ON p.home_pod_id = q.id
WHERE q.lease_renewed_at < (SELECT {now}) - :ttl AND p.pod_bound = 1
  AND (p.status = :init OR p.status = :recovering OR p.status = :running)
  AND (p.lifecycle_type = :permanent OR (p.lifecycle_type = :auto AND p.owner_required = 1))
  AND COALESCE(p.claimed_at, 0) < (SELECT {now}) - :ttl
ORDER BY q.lease_renewed_at, p.id LIMIT :limit OFFSET :skip;

-- name: projects_needing_owner_of_dead_pods_count
-- How many rows projects_needing_owner_of_dead_pods has in all (to page across both statements).
SELECT COUNT(*) AS n
FROM pods q JOIN projects p ON p.home_pod_id = q.id
WHERE q.lease_renewed_at < (SELECT {now}) - :ttl AND p.pod_bound = 1
  AND (p.status = :init OR p.status = :recovering OR p.status = :running)
  AND (p.lifecycle_type = :permanent OR (p.lifecycle_type = :auto AND p.owner_required = 1))
  AND COALESCE(p.claimed_at, 0) < (SELECT {now}) - :ttl;

-- name: projects_needing_owner_score
-- The summed placement score of every project that needs an owner (both halves of projects_needing_owner,
-- the dead pods' pod-bound projects and the unbound ones): the load a booting pod shares (ADR 0052).
SELECT COALESCE((SELECT SUM(p.placement_score)
        FROM pods q JOIN projects p ON p.home_pod_id = q.id
        WHERE q.lease_renewed_at < (SELECT {now}) - :ttl AND p.pod_bound = 1
          AND (p.status = :init OR p.status = :recovering OR p.status = :running)
          AND (p.lifecycle_type = :permanent OR (p.lifecycle_type = :auto AND p.owner_required = 1))
          AND COALESCE(p.claimed_at, 0) < (SELECT {now}) - :ttl), 0)
    + COALESCE((SELECT SUM(placement_score)
        FROM projects
        WHERE pod_bound = 0
          AND (status = :init OR status = :recovering OR status = :running)
          AND (lifecycle_type = :permanent OR (lifecycle_type = :auto AND owner_required = 1))
          AND COALESCE(claimed_at, 0) < (SELECT {now}) - :ttl), 0) AS s;

-- name: projects_needing_owner_after
-- projects_needing_owner paged by key (P-83): the rows after key (:after_k, :after_id) in its order
-- (COALESCE(claimed_at, 0), id), with that key as k. A reader that claims what it reads shrinks the set
-- under an OFFSET; a key stays where it was. The same range scan of the projects_needing_owner index.
SELECT id, tenant, name, project_group, status, kind, lifecycle_type, owner_required, home_node, generation,
    placement_selector, placement_score, pending_since, workspace_id, error, created_at, updated_at, lineage, autosave,
    COALESCE(claimed_at, 0) AS k
FROM projects
WHERE pod_bound = 0
  AND (status = :init OR status = :recovering OR status = :running)
  AND (lifecycle_type = :permanent OR (lifecycle_type = :auto AND owner_required = 1))
  AND COALESCE(claimed_at, 0) < (SELECT {now}) - :ttl
  AND COALESCE(claimed_at, 0) >= :after_k
  AND (COALESCE(claimed_at, 0), id) > (:after_k, :after_id)
ORDER BY COALESCE(claimed_at, 0), id LIMIT :limit;

-- name: projects_needing_owner_of_dead_pods_after
-- projects_needing_owner_of_dead_pods paged by key (P-83): the rows after key (:after_k, :after_id) in its
-- order (the pod's lease_renewed_at, the project's id), with that key as k.
SELECT p.id, p.tenant, p.name, p.project_group, p.status, p.kind, p.lifecycle_type, p.owner_required, p.home_node,
    p.generation, p.placement_selector, p.placement_score, p.pending_since, p.workspace_id, p.error, p.created_at,
    p.updated_at, p.lineage, p.autosave, q.lease_renewed_at AS k
FROM pods q JOIN projects p ON p.home_pod_id = q.id
WHERE q.lease_renewed_at < (SELECT {now}) - :ttl AND q.lease_renewed_at >= :after_k AND p.pod_bound = 1
  AND (p.status = :init OR p.status = :recovering OR p.status = :running)
  AND (p.lifecycle_type = :permanent OR (p.lifecycle_type = :auto AND p.owner_required = 1))
  AND COALESCE(p.claimed_at, 0) < (SELECT {now}) - :ttl
  AND (q.lease_renewed_at, p.id) > (:after_k, :after_id)
ORDER BY q.lease_renewed_at, p.id LIMIT :limit;

-- ==================================================================== sessions

-- name: session_insert
-- A new, unbound session of project :p.
INSERT INTO sessions (id, project_id, created_at, updated_at) VALUES (:id, :p, {now}, {now});

-- name: session_by_id
-- Session :id.
SELECT * FROM sessions WHERE id = :id;

-- name: sessions_of_project
-- Every session of project :p.
SELECT * FROM sessions WHERE project_id = :p ORDER BY id;

-- name: session_bind
-- Bind to connection :c on pod :pod if unbound or already ours, fenced by project generation :g.
UPDATE sessions SET bound_connection_id = :c, bound_pod_id = :pod, updated_at = {now}
WHERE id = :id AND (bound_connection_id IS NULL OR bound_connection_id = :c)
  AND EXISTS (SELECT 1 FROM projects p WHERE p.id = sessions.project_id AND p.generation = :g
              AND p.status <> :closed);

-- name: session_unbind
-- Release session :id from connection :c (only that connection's binding), fenced by project generation :g.
UPDATE sessions SET bound_connection_id = NULL, bound_pod_id = NULL, updated_at = {now}
WHERE id = :id AND bound_connection_id = :c
  AND EXISTS (SELECT 1 FROM projects p WHERE p.id = sessions.project_id AND p.generation = :g
              AND p.status <> :closed);

-- name: session_with_project
-- Session :id with its project's generation and status.
SELECT s.*, p.generation, p.status FROM sessions s JOIN projects p ON p.id = s.project_id WHERE s.id = :id;


-- ==================================================================== pods

-- name: pod_insert
-- A new pod row in status :status.
INSERT INTO pods (id, node_name, endpoint, labels, capacity, status, started_at, heartbeat_at)
VALUES (:id, :n, :e, :l, :c, :status, {now}, {now});

-- name: pod_by_id
-- Pod :id.
SELECT * FROM pods WHERE id = :id;

-- name: pod_heartbeat
-- A heartbeat with the load :score / :running (NULL keeps the last) and why it claims nothing new, :refusing
-- (NULL: it claims), unless the pod is STOPPED.
UPDATE pods SET heartbeat_at = {now}, score = COALESCE(:score, score), running = COALESCE(:running, running),
    refusing = :refusing
WHERE id = :id AND status <> :stopped;

-- name: pod_transition
-- Status :e → :t (also a heartbeat), only from :e.
UPDATE pods SET status = :t, heartbeat_at = {now} WHERE id = :id AND status = :e;

-- name: pods_with_liveness
-- Every pod, with whether it is RUNNING or DRAINING and heard from within :ttl seconds.
SELECT *, (status IN (:running, :draining) AND heartbeat_at >= {now} - :ttl) AS live
FROM pods ORDER BY started_at;

-- name: pod_endpoint_if_live
-- The endpoint of pod :id while it is RUNNING or DRAINING and heard from within :ttl seconds.
SELECT endpoint FROM pods WHERE id = :id AND status IN (:running, :draining) AND heartbeat_at >= {now} - :ttl;

-- name: pod_transition_to_stopped
-- Status :e → :t, STOPPED (also a heartbeat), only from :e; the load goes with it: a STOPPED pod runs nothing.
UPDATE pods SET status = :t, heartbeat_at = {now}, score = 0, running = 0 WHERE id = :id AND status = :e;

-- name: pods_with_health
-- Every pod, oldest first, with live (as pods_with_liveness) and heard: not STOPPED and heard from within
-- :ttl seconds (a pod that is not STOPPED and not heard is dead). A STOPPED pod's load reads 0.
SELECT id, node_name, endpoint, labels, capacity, status, started_at, heartbeat_at, refusing,
    CASE WHEN status = :stopped THEN 0 ELSE score END AS score,
    CASE WHEN status = :stopped THEN 0 ELSE running END AS running,
    (status IN (:running, :draining) AND heartbeat_at >= {now} - :ttl) AS live,
    (status <> :stopped AND heartbeat_at >= {now} - :ttl) AS heard
FROM pods ORDER BY started_at;


-- ==================================================================== object store binding

-- name: store_identity
-- This store's own identity (migration 0011), which it records in the object store it binds.
SELECT identity FROM store_identity WHERE one = 1;

-- name: object_store_binding
-- The object store this store is bound to (identity, url, bound_at), if it is bound yet.
SELECT identity, url, bound_at FROM object_store_binding WHERE one = 1;

-- name: object_store_bind
-- Bind this store to the object store :identity at :url, unless it is bound already (the first binding stays).
INSERT INTO object_store_binding (one, identity, url, bound_at) VALUES (1, :identity, :url, {now})
ON CONFLICT (one) DO NOTHING;


-- ==================================================================== API tokens (tenure/pod/tokens.py)

-- name: api_token_insert
-- A new bearer token: only the SHA-256 hex :h of its secret is stored.
INSERT INTO api_tokens (id, token_hash, tenant, admin, cluster, label, created_at)
VALUES (:id, :h, :t, :a, :c, :l, {now});

-- name: api_token_by_hash
-- The token whose secret hashes to :h, unless it is revoked.
SELECT id, tenant, admin, cluster FROM api_tokens WHERE token_hash = :h AND revoked_at IS NULL;

-- name: api_token_by_id
-- Token :id (never its hash).
SELECT id, tenant, admin, cluster, label, created_at, revoked_at FROM api_tokens WHERE id = :id;

-- name: api_token_revoke
-- Revoke token :id (a revoked token stays revoked: the first revocation time is kept).
UPDATE api_tokens SET revoked_at = {now} WHERE id = :id AND revoked_at IS NULL;

-- name: api_tokens_all
-- Every token, revoked ones too, oldest first (never their hashes).
SELECT id, tenant, admin, cluster, label, created_at, revoked_at FROM api_tokens ORDER BY created_at, id;

-- name: api_token_any
-- Whether any token was ever created (revoked ones count: once tokens are in use the API stays closed).
SELECT id FROM api_tokens LIMIT 1;

-- name: project_by_workspace
-- The project whose workspace is :w (a snapshot's project, for tenant-scoped API tokens).
SELECT id, tenant, name FROM projects WHERE workspace_id = :w;

-- name: project_set_autosave
-- Autosave policy :a seconds for project :id (0 off, NULL the pod's default).
UPDATE projects SET autosave = :a, updated_at = {now} WHERE id = :id;
