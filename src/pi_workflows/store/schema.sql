-- pi-workflows state schema "pi-workflows.state", version 1.
--
-- This file is the whole schema. Its sha256 digest is stored in schema_identity when a
-- database is created and checked on every open: a database made from any other text of
-- this file is refused with a reset instruction (no migrations, see docs/state.md).
-- All times are integer milliseconds since the Unix epoch, taken from the store clock.
-- JSON columns hold canonical JSON text.

-- The identity of this database file (exactly one row).
CREATE TABLE schema_identity (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    schema_name TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    ddl_digest TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- The server's epoch: a new server increments it before it handles any work.
CREATE TABLE server_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL CHECK (epoch >= 0),
    pid INTEGER,
    started_at INTEGER,
    heartbeat_at INTEGER
) STRICT;

-- Content-addressed values (definition snapshots, values over 16 KiB). Never updated.
CREATE TABLE blobs (
    digest TEXT PRIMARY KEY,
    size INTEGER NOT NULL CHECK (size >= 0),
    data BLOB NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- One row per run. The run is the revisioned resource: every change to a run or to a
-- record that belongs to it bumps runs.revision and appends exactly one event.
-- execution_revision moves with every change except session and presentation bookkeeping
-- (store/runs.py PRESENTATION_EVENTS): it is the revision a runner's proposals are fenced by.
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    workflow_name TEXT NOT NULL,
    definition_digest TEXT NOT NULL REFERENCES blobs (digest),
    -- A JSON value is stored inline (canonical text) up to 16 KiB, else once in blobs and
    -- referenced by digest (``*_ref``); never both.
    input_json TEXT,
    input_ref TEXT REFERENCES blobs (digest),
    input_hash TEXT NOT NULL,
    -- RunStatus; the queue, lease, attempt and viewer rows must agree with it.
    status TEXT NOT NULL CHECK (
        status IN ('queued', 'running', 'waiting', 'paused',
                   'completed', 'failed', 'timed_out', 'cancelled')
    ),
    -- Set only while status = 'paused': why the run stopped and what resumes it.
    park_reason TEXT,
    park_detail TEXT,
    current_node TEXT,
    step_count INTEGER NOT NULL DEFAULT 0 CHECK (step_count >= 0),
    -- Incremented by a restart; node state is read from the attempts of the current round.
    round INTEGER NOT NULL DEFAULT 0 CHECK (round >= 0),
    -- An attempt the server settled (a node deadline) that the next runner must route.
    unrouted_attempt TEXT,
    revision INTEGER NOT NULL CHECK (revision >= 1),
    execution_revision INTEGER NOT NULL DEFAULT 1
        CHECK (execution_revision >= 1 AND execution_revision <= revision),
    output_json TEXT,
    output_ref TEXT REFERENCES blobs (digest),
    error TEXT,
    -- Who started it ("client:<client id>"), for provenance.
    origin TEXT,
    -- The Pi session that presents its requests and messages (NULL: none, see run show).
    origin_session TEXT,
    -- 'detached': the server runs a headless Pi for its session (origin_session set).
    execution_mode TEXT NOT NULL DEFAULT 'attached'
        CHECK (execution_mode IN ('attached', 'detached')),
    -- Provenance of a run a schedule started (store/schedules.py): the schedule and the fire
    -- time, set at reservation and never changed; both NULL for a run a client started.
    schedule_id TEXT REFERENCES schedules (schedule_id),
    schedule_fire_at INTEGER,
    -- A child run (store/children.py): the parent whose subworkflow or fan_out node started
    -- it, the root of its tree, and its depth (a root is 0). Set at reservation, never
    -- changed; all three NULL/0 for a root run.
    parent_run_id TEXT REFERENCES runs (run_id),
    root_run_id TEXT REFERENCES runs (run_id),
    depth INTEGER NOT NULL DEFAULT 0 CHECK (depth >= 0),
    -- A fork (store/forks.py): the run it was forked from and the node visit it starts at.
    -- Set at reservation, never changed; all three NULL for a run that is not a fork. A
    -- fork is a root of its own tree, never a child of its source (cancel, pause and the
    -- tree invariants never reach it); no foreign key, so retention may remove the source
    -- while the fork keeps its lineage.
    forked_from TEXT,
    fork_node TEXT,
    fork_visit INTEGER CHECK (fork_visit IS NULL OR fork_visit >= 1),
    -- Live settings (store/settings.py): the current document (canonical JSON; NULL when the
    -- workflow declares none) and the number of the change that made it (0: the defaults).
    -- Every number from 0 up has its run_settings row; an attempt records the one it ran with.
    settings_json TEXT,
    settings_change INTEGER NOT NULL DEFAULT 0 CHECK (settings_change >= 0),
    -- The run deadline (store/deadlines.py): how long the whole run may take (ms, from the
    -- workflow's deadline= or the start's override) and the absolute time it ends at, armed
    -- when the run is reserved (a restart arms it again from then). Both NULL: none.
    deadline_ms INTEGER CHECK (deadline_ms IS NULL OR deadline_ms > 0),
    deadline_at INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    finished_at INTEGER,
    CHECK ((status = 'paused') = (park_reason IS NOT NULL)),
    CHECK ((input_json IS NULL) != (input_ref IS NULL)),
    CHECK (output_json IS NULL OR output_ref IS NULL),
    CHECK ((schedule_id IS NULL) = (schedule_fire_at IS NULL)),
    CHECK ((parent_run_id IS NULL) = (root_run_id IS NULL)),
    CHECK ((parent_run_id IS NULL) = (depth = 0)),
    CHECK ((forked_from IS NULL) = (fork_node IS NULL)),
    CHECK ((forked_from IS NULL) = (fork_visit IS NULL)),
    CHECK (forked_from IS NULL OR parent_run_id IS NULL),
    CHECK ((deadline_ms IS NULL) = (deadline_at IS NULL))
) STRICT;
CREATE INDEX runs_running ON runs (run_id) WHERE status = 'running';
CREATE INDEX runs_by_session ON runs (origin_session, created_at) WHERE origin_session IS NOT NULL;
-- The scheduler asks every tick which detached runs want a headless agent: only the
-- unfinished detached runs, never a scan of every run.
CREATE INDEX runs_detached_active ON runs (run_id)
    WHERE execution_mode = 'detached' AND status IN ('queued', 'running', 'waiting');
-- At most one run per (schedule, fire time): a fire that is repeated after a crash can never
-- start a second run. Also the index of `run list --schedule` and of a schedule's newest run.
CREATE UNIQUE INDEX runs_by_schedule ON runs (schedule_id, schedule_fire_at)
    WHERE schedule_id IS NOT NULL;
-- A schedule's unfinished runs (its overlap rule asks on every fire): never a scan of every
-- run it ever started.
CREATE INDEX runs_schedule_active ON runs (schedule_id, schedule_fire_at)
    WHERE schedule_id IS NOT NULL AND status IN ('queued', 'running', 'waiting', 'paused');
-- A parent's children and a root's tree (cancel, pause, resume, show, prune the tree).
CREATE INDEX runs_by_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX runs_by_root ON runs (root_run_id) WHERE root_run_id IS NOT NULL;
-- run list shows root runs by default: newest first without a scan of the children.
CREATE INDEX runs_roots_by_age ON runs (created_at, run_id) WHERE parent_run_id IS NULL;
-- The unfinished runs with a run deadline, by when it passes (the server's deadline timer).
CREATE INDEX runs_deadline ON runs (deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('queued', 'running', 'waiting', 'paused');
-- A run's forks (run show's lineage, run list --lineage).
CREATE INDEX runs_by_fork ON runs (forked_from) WHERE forked_from IS NOT NULL;

-- What the run executes: the root source identity and every mounted source.
CREATE TABLE run_sources (
    run_id TEXT PRIMARY KEY REFERENCES runs (run_id),
    source_kind TEXT NOT NULL CHECK (source_kind IN ('file', 'builtin')),
    source_ref TEXT NOT NULL,
    source_revision TEXT NOT NULL,
    project_dir TEXT,
    mounted_json TEXT NOT NULL,
    -- The run's environment (docs/authoring.md, "Environment"), recorded once when the run
    -- is reserved and never changed: the working directory of its runners, shell commands
    -- and headless Pi (the project directory, else the starting client's directory; NULL:
    -- '/'), and the variables they get (canonical JSON object of strings; the client's
    -- default variables and those it added, a schedule's, or a child's parent's).
    working_dir TEXT,
    environment_json TEXT NOT NULL
) STRICT;

-- The scheduler's view of a run. Its status is a function of runs.status.
CREATE TABLE run_queue (
    run_id TEXT PRIMARY KEY REFERENCES runs (run_id),
    status TEXT NOT NULL CHECK (status IN ('ready', 'claimed', 'waiting', 'parked', 'done')),
    -- The one explicit command the next runner receives.
    next_command TEXT NOT NULL CHECK (next_command IN ('start', 'resume', 'restart')),
    available_at INTEGER NOT NULL,
    enqueued_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX run_queue_ready ON run_queue (available_at, enqueued_at) WHERE status = 'ready';
CREATE INDEX run_queue_busy ON run_queue (run_id) WHERE status IN ('ready', 'claimed');

-- The claim on a run. The row survives release so the generation only ever grows.
CREATE TABLE leases (
    run_id TEXT PRIMARY KEY REFERENCES runs (run_id),
    owner_type TEXT NOT NULL CHECK (owner_type IN ('runner', 'control')),
    owner_id TEXT NOT NULL,
    token_hash TEXT NOT NULL,
    generation INTEGER NOT NULL CHECK (generation >= 1),
    status TEXT NOT NULL CHECK (status IN ('held', 'released')),
    acquired_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    released_at INTEGER,
    CHECK ((status = 'released') = (released_at IS NOT NULL))
) STRICT;
CREATE INDEX leases_held ON leases (expires_at) WHERE status = 'held';

-- One row per execution of a node. At most one unfinished attempt per run.
CREATE TABLE node_attempts (
    attempt_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    round INTEGER NOT NULL DEFAULT 0,
    node_id TEXT NOT NULL,
    visit INTEGER NOT NULL CHECK (visit >= 1),
    attempt_no INTEGER NOT NULL CHECK (attempt_no >= 1),
    generation INTEGER NOT NULL,
    -- 'retried': it ended with an outcome its node's retry policy retries, and a later
    -- attempt of the same visit follows; 'exhausted': the last try of a policy that pauses
    -- when its tries run out (a person's resume starts a fresh round of tries). Neither
    -- settles the visit, so neither counts as its result.
    status TEXT NOT NULL CHECK (
        status IN ('running', 'waiting', 'completed', 'failed', 'timed_out',
                   'cancelled', 'interrupted', 'retried', 'exhausted')
    ),
    -- Which try of the visit's current round of retries this is (1 without a retry policy).
    try_no INTEGER NOT NULL DEFAULT 1 CHECK (try_no >= 1),
    -- The outcome a retried or exhausted attempt ended with.
    retry_outcome TEXT CHECK (retry_outcome IN ('failed', 'timed_out')),
    output_json TEXT,
    output_ref TEXT REFERENCES blobs (digest),
    error TEXT,
    -- The node deadline the server enforces while the attempt runs (NULL: none).
    deadline_at INTEGER,
    -- A settled attempt a fork carried from its source (store/forks.py): the source's
    -- attempt id (no foreign key: the source may be pruned). Its generation is 0 (no
    -- runner of this run executed it).
    carried_from TEXT,
    -- 'person': a carried attempt whose output a person replaced when forking
    -- (``run fork --set``); its output is not the one its source produced.
    output_set_by TEXT CHECK (output_set_by IN ('person')),
    started_at INTEGER NOT NULL,
    finished_at INTEGER,
    -- The run revision whose event settled it (set with finished_at, never changed): the
    -- trace exporter (server/telemetry.py) finds the attempts a batch of events settled.
    finished_revision INTEGER,
    -- The run's settings change this attempt started with (ctx.settings_change; a
    -- settings_route attempt evaluated again records the change it was evaluated again
    -- with). NULL only for a fork's carried attempt, which ran in its source.
    settings_change INTEGER DEFAULT 0 CHECK (settings_change IS NULL OR settings_change >= 0),
    UNIQUE (run_id, round, node_id, visit, attempt_no),
    CHECK ((status IN ('running', 'waiting')) = (finished_at IS NULL)),
    CHECK ((finished_at IS NULL) = (finished_revision IS NULL)),
    CHECK ((status IN ('retried', 'exhausted')) = (retry_outcome IS NOT NULL)),
    CHECK (carried_from IS NULL OR status IN ('completed', 'failed', 'timed_out')),
    CHECK (output_set_by IS NULL OR (carried_from IS NOT NULL AND status = 'completed')),
    CHECK (settings_change IS NOT NULL OR carried_from IS NOT NULL)
) STRICT;
CREATE UNIQUE INDEX node_attempts_one_unfinished
    ON node_attempts (run_id) WHERE status IN ('running', 'waiting');
CREATE UNIQUE INDEX node_attempts_one_settled_per_visit
    ON node_attempts (run_id, round, node_id, visit)
    WHERE status IN ('completed', 'failed', 'timed_out');

-- Every settings document a run had (store/settings.py), by change number: 0 the defaults
-- (or what a fork carried), then one row per change, written in the same transaction as
-- runs.settings_json and runs.settings_change and its settings.changed event. Never updated.
-- settings_json NULL: the workflow (as the run then executed it) declares no settings.
CREATE TABLE run_settings (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    change_no INTEGER NOT NULL CHECK (change_no >= 0),
    settings_json TEXT,
    -- The RFC 6902 patch a person or the model sent (NULL for the defaults and for what a
    -- restart, fork or upgrade set), who made it ('person', 'model', 'defaults', 'fork',
    -- 'restart', 'upgrade') and the client that sent it.
    patch_json TEXT,
    changed_by TEXT NOT NULL,
    client_id TEXT,
    at INTEGER NOT NULL,
    PRIMARY KEY (run_id, change_no)
) STRICT;

-- Durable waits for time or an event (``store/waits.py``): a sleep node's wake time, the
-- delay before a retry, a ``wait_event`` node and its timeout. While one is pending its run
-- is waiting (or paused) with no runner, no claim and no process; the server fires it when
-- it comes due (``fired``) or when the event arrives (``signalled``), in the same
-- transaction that queues the run. At most one pending wait per run.
CREATE TABLE run_waits (
    wait_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    -- sleep, event: the waiting attempt; retry: the attempt that will be tried again.
    attempt_id TEXT NOT NULL REFERENCES node_attempts (attempt_id),
    node_id TEXT NOT NULL,
    -- children: a subworkflow or fan_out node joins its child runs (store/children.py).
    kind TEXT NOT NULL CHECK (kind IN ('sleep', 'retry', 'event', 'children')),
    event_name TEXT,
    -- 1: the wait_event node validates what it receives (a sender's reply is held).
    validates INTEGER NOT NULL DEFAULT 0 CHECK (validates IN (0, 1)),
    -- When it comes due (an event wait's timeout; NULL: an event wait without one). A
    -- children wait has one only while a fan_out's rate holds its next child back: the
    -- moment the rate's window allows that start (store/children.py, _pace).
    due_at INTEGER,
    status TEXT NOT NULL CHECK (status IN ('pending', 'fired', 'signalled', 'cancelled')),
    fired_at INTEGER,
    created_at INTEGER NOT NULL,
    CHECK ((kind = 'event') = (event_name IS NOT NULL)),
    CHECK (kind IN ('event', 'children') OR due_at IS NOT NULL),
    CHECK ((status = 'pending') = (fired_at IS NULL)),
    CHECK (status != 'signalled' OR kind = 'event')
) STRICT;
CREATE UNIQUE INDEX run_waits_one_pending ON run_waits (run_id) WHERE status = 'pending';
-- The due waits are a range of this index, however many runs wait.
CREATE INDEX run_waits_due ON run_waits (due_at) WHERE status = 'pending' AND due_at IS NOT NULL;
CREATE INDEX run_waits_by_run ON run_waits (run_id);
CREATE INDEX run_waits_by_attempt ON run_waits (attempt_id);

-- A run's cleanup after a cancel or its run deadline (``store/cleanups.py``): the workflow's
-- on_cancel node, why the run was ended (``ctx.cancel_reason``) and the status it ends with.
-- 'running' from the cancel (the run queued for a runner that runs only that node) until the
-- node's outcome ends the run ('completed', 'failed', 'timed_out'); 'abandoned' when a second
-- cancel or its runner's repeated crashes ended the run first. At most one per run round.
CREATE TABLE run_cleanups (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    round INTEGER NOT NULL CHECK (round >= 0),
    node_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    ends_as TEXT NOT NULL CHECK (ends_as IN ('cancelled', 'timed_out')),
    status TEXT NOT NULL CHECK (
        status IN ('running', 'completed', 'failed', 'timed_out', 'abandoned')
    ),
    error TEXT,
    created_at INTEGER NOT NULL,
    finished_at INTEGER,
    PRIMARY KEY (run_id, round),
    CHECK ((status = 'running') = (finished_at IS NULL))
) STRICT;
CREATE INDEX run_cleanups_running ON run_cleanups (run_id) WHERE status = 'running';

-- The join of a subworkflow or fan_out node (``store/children.py``): what its children run
-- (the child workflow's definition and source, recorded once for all of them), how many may
-- be active at once, and its progress. 'running' while children are active or waiting to
-- start; 'failing' once a fail_fast join saw a failure (its unstarted children are skipped
-- and its active ones cancelled); 'joined' when every child ended (its wait fired in the
-- same transaction as the last child's end); 'cancelled' with its parent.
CREATE TABLE run_joins (
    wait_id TEXT PRIMARY KEY REFERENCES run_waits (wait_id),
    parent_run_id TEXT NOT NULL REFERENCES runs (run_id),
    node_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('subworkflow', 'fan_out')),
    workflow_name TEXT NOT NULL,
    definition_digest TEXT NOT NULL REFERENCES blobs (digest),
    source_kind TEXT NOT NULL CHECK (source_kind IN ('file', 'builtin')),
    source_ref TEXT NOT NULL,
    source_revision TEXT NOT NULL,
    project_dir TEXT,
    mounted_json TEXT NOT NULL,
    detached INTEGER NOT NULL CHECK (detached IN (0, 1)),
    concurrency INTEGER NOT NULL CHECK (concurrency >= 1),
    -- fan_out(rate="N/period"): at most rate_count children start in any window of
    -- rate_period_ms (run_children.started_at are the starts); while the rate holds the
    -- next one back, the join's wait has the due time it is allowed at. NULL: no rate.
    rate_count INTEGER CHECK (rate_count >= 1),
    rate_period_ms INTEGER CHECK (rate_period_ms >= 1),
    fail_fast INTEGER NOT NULL CHECK (fail_fast IN (0, 1)),
    total INTEGER NOT NULL CHECK (total >= 0),
    started INTEGER NOT NULL DEFAULT 0,
    ended INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL CHECK (status IN ('running', 'failing', 'joined', 'cancelled')),
    created_at INTEGER NOT NULL,
    joined_at INTEGER,
    CHECK (0 <= ended AND ended <= started AND started <= total),
    CHECK ((status = 'joined') = (joined_at IS NOT NULL)),
    CHECK ((rate_count IS NULL) = (rate_period_ms IS NULL))
) STRICT;
CREATE INDEX run_joins_by_parent ON run_joins (parent_run_id);
-- A fail_fast join whose active children the server must cancel: only those in the index.
CREATE INDEX run_joins_failing ON run_joins (wait_id) WHERE status = 'failing';

-- One child of a join, in item order: its input, and the run once it started. 'waiting'
-- until the join has room for it; 'skipped' when a fail_fast join failed or its parent
-- ended before it started; otherwise the child run's terminal status once it ended.
CREATE TABLE run_children (
    wait_id TEXT NOT NULL REFERENCES run_joins (wait_id),
    item INTEGER NOT NULL CHECK (item >= 0),
    input_json TEXT,
    input_ref TEXT REFERENCES blobs (digest),
    input_hash TEXT NOT NULL,
    child_run_id TEXT UNIQUE REFERENCES runs (run_id),
    status TEXT NOT NULL CHECK (
        status IN ('waiting', 'started', 'completed', 'failed', 'timed_out', 'cancelled',
                   'skipped')
    ),
    started_at INTEGER,
    ended_at INTEGER,
    PRIMARY KEY (wait_id, item),
    CHECK ((input_json IS NULL) != (input_ref IS NULL)),
    CHECK ((status IN ('waiting', 'skipped')) = (child_run_id IS NULL)),
    CHECK ((status IN ('waiting', 'started')) = (ended_at IS NULL))
) STRICT;
-- The children a join may start next (item order), and a child run's row when it ends.
CREATE INDEX run_children_waiting ON run_children (wait_id, item) WHERE status = 'waiting';

-- Events sent to a run (``run signal``, ``store/signals.py``): durable, ordered per run by
-- ``seq``, kept until a ``wait_event`` node of that name consumes one, exactly once (in the
-- same transaction that settles the consuming attempt). A rejected one was refused by the
-- node's validate and is never consumed; a discarded one was still pending when its run
-- restarted (a new round takes no events of the old one).
CREATE TABLE run_signals (
    signal_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    name TEXT NOT NULL,
    seq INTEGER NOT NULL CHECK (seq >= 1),
    data_json TEXT,
    data_ref TEXT REFERENCES blobs (digest),
    -- The sender's key: the same key again adopts this signal (per run).
    idempotency_key TEXT,
    fingerprint TEXT NOT NULL,
    sent_by TEXT,
    status TEXT NOT NULL CHECK (status IN ('pending', 'consumed', 'rejected', 'discarded')),
    attempt_id TEXT REFERENCES node_attempts (attempt_id),
    error TEXT,
    created_at INTEGER NOT NULL,
    settled_at INTEGER,
    UNIQUE (run_id, seq),
    UNIQUE (run_id, idempotency_key),
    CHECK (data_json IS NULL OR data_ref IS NULL),
    CHECK ((status = 'pending') = (settled_at IS NULL)),
    CHECK ((status = 'consumed') = (attempt_id IS NOT NULL)),
    CHECK ((status = 'rejected') = (error IS NOT NULL))
) STRICT;
CREATE INDEX run_signals_pending ON run_signals (run_id, name, seq) WHERE status = 'pending';
CREATE INDEX run_signals_by_attempt ON run_signals (attempt_id) WHERE attempt_id IS NOT NULL;

-- Immutable history: exactly one event per run revision.
CREATE TABLE events (
    event_id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    revision INTEGER NOT NULL,
    type TEXT NOT NULL,
    -- runs.status right after this event: diagnose compares it with the run row.
    run_status TEXT NOT NULL,
    generation INTEGER,
    data_json TEXT NOT NULL,
    at INTEGER NOT NULL,
    UNIQUE (run_id, revision)
) STRICT;
CREATE TRIGGER events_are_immutable_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are immutable');
END;

-- How far each OpenTelemetry exporter of the server has read the events (server/telemetry.py):
-- the event id after which its next batch starts. Written after the batch was exported, in
-- its own transaction, so it commits in the same order as the events it covers.
CREATE TABLE telemetry_cursors (
    name TEXT PRIMARY KEY,
    event_id INTEGER NOT NULL CHECK (event_id >= 0),
    updated_at INTEGER NOT NULL
) STRICT;

-- Runs removed by retention (``state prune`` and the server's daily prune): what is kept of
-- each is this row. A row can only be written for a run that has ended.
CREATE TABLE pruned_runs (
    run_id TEXT PRIMARY KEY,
    workflow_name TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('completed', 'failed', 'timed_out', 'cancelled')),
    created_at INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    events INTEGER NOT NULL CHECK (events >= 0),
    pruned_at INTEGER NOT NULL
) STRICT;
-- No deletion may ever remove a run that has not ended (retention removes ended trees
-- only, deepest first; this refuses a live run whatever asks).
CREATE TRIGGER runs_live_never_deleted BEFORE DELETE ON runs
WHEN OLD.status NOT IN ('completed', 'failed', 'timed_out', 'cancelled')
BEGIN
    SELECT RAISE(ABORT, 'a run that has not ended cannot be deleted');
END;
CREATE TRIGGER pruned_runs_only_ended BEFORE INSERT ON pruned_runs
WHEN (SELECT status FROM runs WHERE run_id = NEW.run_id) IS NOT NEW.status
BEGIN
    SELECT RAISE(ABORT, 'only an ended run can be pruned, with its recorded status');
END;

-- Events are never deleted, except together with their whole run by retention
-- (``store/retention.py``): only the events of a run recorded in ``pruned_runs`` (which
-- refuses a run that has not ended) may go.
CREATE TRIGGER events_are_immutable_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM pruned_runs p WHERE p.run_id = OLD.run_id)
BEGIN
    SELECT RAISE(ABORT, 'events are immutable');
END;

-- What one node attempt printed or logged and what its shell commands wrote (the last
-- ``LOG_TAIL_BYTES`` of it, see ``store/attempt_logs.py``), and its bounded traceback when a
-- callback raised. Written by the attempt's runner under its claim.
CREATE TABLE attempt_logs (
    attempt_id TEXT PRIMARY KEY REFERENCES node_attempts (attempt_id),
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    text TEXT NOT NULL,
    -- Every byte the attempt produced, kept or not (>= the UTF-8 length of ``text``).
    total_bytes INTEGER NOT NULL CHECK (total_bytes >= 0),
    traceback TEXT,
    updated_at INTEGER NOT NULL
) STRICT;
CREATE INDEX attempt_logs_by_run ON attempt_logs (run_id);

-- The latest ``ctx.publish_update`` value of one node attempt (``store/progress.py``): kept
-- as the attempt's one value, replaced by each newer one, never one row per update. At
-- most ``MAX_PROGRESS_BYTES`` of canonical JSON. ``updates`` counts the values the runner
-- delivered, ``published`` the values the callback published (the runner coalesces them),
-- ``sampled`` those history kept as ``node.update`` events, the last at ``sampled_at``.
-- Written by the attempt's runner under its claim.
CREATE TABLE attempt_progress (
    attempt_id TEXT PRIMARY KEY REFERENCES node_attempts (attempt_id),
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    value_json TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    updates INTEGER NOT NULL CHECK (updates >= 1),
    published INTEGER NOT NULL CHECK (published >= updates),
    sampled INTEGER NOT NULL CHECK (sampled BETWEEN 0 AND updates),
    sampled_at INTEGER,
    CHECK ((sampled = 0) = (sampled_at IS NULL))
) STRICT;
CREATE INDEX attempt_progress_by_run ON attempt_progress (run_id, updated_at);

-- The values a run's callbacks published with ``ctx.publish(key, value)``
-- (``store/published.py``): one row per (run, key), the latest value, replaced by a later
-- publish of the same key (``version`` counts them). Written by the publishing attempt's
-- runner under its claim; kept when that attempt later fails (a reader may have seen it).
-- At most ``MAX_KEYS`` keys a run and ``MAX_VALUE_BYTES`` of canonical JSON each.
CREATE TABLE published_values (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    key TEXT NOT NULL CHECK (length(key) BETWEEN 1 AND 128),
    value_json TEXT NOT NULL,
    version INTEGER NOT NULL CHECK (version >= 1),
    attempt_id TEXT NOT NULL REFERENCES node_attempts (attempt_id),
    node_id TEXT NOT NULL,
    published_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, key)
) STRICT;
-- A node attempt's rows are deleted by prune and restart: its values are found by attempt.
CREATE INDEX published_values_by_attempt ON published_values (attempt_id);

-- Durable command receipts: a retry with the same client and idempotency key gets the
-- stored receipt; the fingerprint (which excludes the request id) detects a changed payload.
CREATE TABLE server_commands (
    command_id INTEGER PRIMARY KEY AUTOINCREMENT,
    client_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    operation TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    run_id TEXT,
    outcome TEXT NOT NULL,
    receipt_json TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (client_id, idempotency_key)
) STRICT;
CREATE INDEX server_commands_by_run ON server_commands (run_id) WHERE run_id IS NOT NULL;

-- Runner child processes, one row per runner epoch (globally increasing).
CREATE TABLE run_runners (
    runner_epoch INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    generation INTEGER NOT NULL,
    server_epoch INTEGER NOT NULL,
    command TEXT NOT NULL CHECK (command IN ('start', 'resume', 'restart')),
    launch_json TEXT NOT NULL,
    pid INTEGER,
    process_start REAL,
    status TEXT NOT NULL CHECK (status IN ('launching', 'ready', 'exited')),
    -- 'refused': the child exited after the server refused one of its proposals.
    outcome TEXT CHECK (
        outcome IN ('exited', 'cancelled', 'timedOut', 'crashed', 'claimLost', 'orphaned',
                    'refused')
    ),
    -- The run's execution revision when the child said ready (progress is measured from it).
    ready_revision INTEGER,
    exit_code INTEGER,
    exit_signal INTEGER,
    output_tail TEXT,
    created_at INTEGER NOT NULL,
    ready_at INTEGER,
    exited_at INTEGER,
    CHECK ((status = 'exited') = (outcome IS NOT NULL))
) STRICT;
-- Every runner of a run, live or exited (its live ones, retention, the foreign key).
CREATE INDEX run_runners_by_run ON run_runners (run_id);
CREATE INDEX run_runners_live ON run_runners (runner_epoch) WHERE status != 'exited';

-- Process groups a runner started (shell commands, each leading its own session), recorded
-- before the command runs so that the server can stop them when the runner ends and a new
-- server can stop them after a crash. A group is signalled only while its leader still has
-- the recorded pid and process start time.
CREATE TABLE runner_processes (
    runner_epoch INTEGER NOT NULL REFERENCES run_runners (runner_epoch),
    pid INTEGER NOT NULL CHECK (pid >= 1),
    process_start REAL NOT NULL,
    command TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('live', 'ended')),
    registered_at INTEGER NOT NULL,
    ended_at INTEGER,
    PRIMARY KEY (runner_epoch, pid),
    CHECK ((status = 'ended') = (ended_at IS NOT NULL))
) STRICT;
CREATE INDEX runner_processes_live ON runner_processes (runner_epoch) WHERE status = 'live';

-- Headless Pi agents the server runs for detached runs (``pi --mode rpc`` on the run's
-- session), recorded before they act so a new server can stop them by identity.
CREATE TABLE agent_processes (
    agent_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    session_id TEXT NOT NULL,
    server_epoch INTEGER NOT NULL,
    pid INTEGER NOT NULL CHECK (pid >= 1),
    process_start REAL NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('live', 'ended')),
    exit_code INTEGER,
    output_tail TEXT,
    started_at INTEGER NOT NULL,
    ended_at INTEGER,
    CHECK ((status = 'ended') = (ended_at IS NOT NULL))
) STRICT;
CREATE UNIQUE INDEX agent_processes_one_live ON agent_processes (run_id) WHERE status = 'live';
CREATE INDEX agent_processes_by_run ON agent_processes (run_id);

-- Child messages already answered, so a repeated message id replays its reply.
CREATE TABLE runner_messages (
    runner_epoch INTEGER NOT NULL REFERENCES run_runners (runner_epoch),
    message_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    reply_json TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (runner_epoch, message_id)
) STRICT;

-- Interactive steps (agent and assistant-message steps, checkpoints, human decisions)
-- waiting for an answer. ``validating``: one submission is being checked by a runner.
CREATE TABLE interactive_requests (
    request_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    attempt_id TEXT NOT NULL REFERENCES node_attempts (attempt_id),
    node_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('checkpoint', 'agent', 'assistant', 'decision')),
    -- 'failed': an agent step whose model ended its turns without submitting after every
    -- reminder (store/reminders.py); its attempt fails as missingSubmission.
    status TEXT NOT NULL CHECK (
        status IN ('pending', 'validating', 'answered', 'timed_out', 'cancelled', 'failed')
    ),
    request_json TEXT NOT NULL,
    -- 1: only a person answers it (a human decision, or a checkpoint(for_person=True)): no
    -- model turn, no headless agent, and the model's tool and interaction.submit refuse it.
    for_person INTEGER NOT NULL DEFAULT 0 CHECK (for_person IN (0, 1)),
    answer_json TEXT,
    answer_ref TEXT REFERENCES blobs (digest),
    deadline_at INTEGER,
    origin_session TEXT,
    -- Reminders sent after model turns that ended without submitting (agent steps).
    reminders INTEGER NOT NULL DEFAULT 0 CHECK (reminders >= 0),
    -- Delivery to seats (store/delivery.py): model turns on this step that died with their
    -- seat (presented again each time), turns that ended in a provider error since the run
    -- last resumed (presented again with backoff, a bounded number of times), and times a
    -- headless agent that did not work on it was prompted again or replaced.
    turns_lost INTEGER NOT NULL DEFAULT 0 CHECK (turns_lost >= 0),
    turn_errors INTEGER NOT NULL DEFAULT 0 CHECK (turn_errors >= 0),
    agent_nudges INTEGER NOT NULL DEFAULT 0 CHECK (agent_nudges >= 0),
    -- A presentation again that is due (store ms) and why ('providerError'): a durable timer.
    present_at INTEGER,
    present_reason TEXT,
    created_at INTEGER NOT NULL,
    settled_at INTEGER,
    CHECK ((status IN ('pending', 'validating')) = (settled_at IS NULL)),
    CHECK ((present_at IS NULL) = (present_reason IS NULL)),
    CHECK (present_at IS NULL OR status IN ('pending', 'validating')),
    CHECK (kind != 'decision' OR for_person = 1),
    CHECK (for_person = 0 OR kind IN ('checkpoint', 'decision'))
) STRICT;
CREATE UNIQUE INDEX interactive_requests_one_open
    ON interactive_requests (run_id) WHERE status IN ('pending', 'validating');
-- A run's requests (history, retention) and an attempt's (its answer): never a scan of
-- every request ever made.
CREATE INDEX interactive_requests_by_run ON interactive_requests (run_id);
CREATE INDEX interactive_requests_by_attempt ON interactive_requests (attempt_id);
CREATE INDEX interactive_requests_open_by_session
    ON interactive_requests (origin_session, created_at) WHERE status IN ('pending', 'validating');
-- Deadlines are enforced every tick: the due ones are a range of this index, however many
-- requests wait without a deadline or with a later one.
CREATE INDEX interactive_requests_open_by_deadline ON interactive_requests (deadline_at)
    WHERE status IN ('pending', 'validating') AND deadline_at IS NOT NULL;
-- Presentations again that are due: the scheduler waits for the earliest.
CREATE INDEX interactive_requests_present_due ON interactive_requests (present_at)
    WHERE present_at IS NOT NULL;

-- Submitted answers, each validated by a runner: at most one validating per request, at
-- most one accepted (it settles the request).
CREATE TABLE interactive_submissions (
    submission_id TEXT PRIMARY KEY,
    request_id TEXT NOT NULL REFERENCES interactive_requests (request_id),
    status TEXT NOT NULL CHECK (status IN ('validating', 'accepted', 'rejected')),
    value_json TEXT,
    value_ref TEXT REFERENCES blobs (digest),
    submitted_by TEXT,
    error TEXT,
    -- 1: rejected because its request closed or its run was paused before validation, not
    -- by the workflow's validate (its submitter hears requestClosed, not validationRejected).
    closed INTEGER NOT NULL DEFAULT 0 CHECK (closed IN (0, 1)),
    submitted_at INTEGER NOT NULL,
    settled_at INTEGER,
    CHECK ((status = 'validating') = (settled_at IS NULL)),
    CHECK ((status = 'rejected') = (error IS NOT NULL))
) STRICT;
CREATE UNIQUE INDEX interactive_submissions_one_accepted
    ON interactive_submissions (request_id) WHERE status = 'accepted';
CREATE UNIQUE INDEX interactive_submissions_one_validating
    ON interactive_submissions (request_id) WHERE status = 'validating';
CREATE INDEX interactive_submissions_by_request ON interactive_submissions (request_id);

-- Protected checkpoints only a person answers; exactly one resolution each.
CREATE TABLE human_decisions (
    decision_id TEXT PRIMARY KEY REFERENCES interactive_requests (request_id),
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    choices_json TEXT NOT NULL,
    timeout_choice TEXT,
    status TEXT NOT NULL CHECK (status IN ('pending', 'resolved')),
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX human_decisions_by_run ON human_decisions (run_id);
CREATE TABLE human_decision_resolutions (
    decision_id TEXT PRIMARY KEY REFERENCES human_decisions (decision_id),
    resolution TEXT NOT NULL CHECK (resolution IN ('answered', 'timedOut', 'cancelled')),
    choice_id TEXT,
    resolved_by TEXT,
    resolved_at INTEGER NOT NULL
) STRICT;

-- Managed side effects, keyed by run, effect type, node and visit.
CREATE TABLE effects (
    effect_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    effect_key TEXT NOT NULL UNIQUE,
    node_attempt_id TEXT REFERENCES node_attempts (attempt_id),
    effect_type TEXT NOT NULL,
    effect_kind TEXT NOT NULL CHECK (effect_kind IN ('idempotent', 'manual')),
    node_id TEXT NOT NULL,
    visit INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    status TEXT NOT NULL CHECK (
        status IN ('pending', 'applying', 'applied', 'rejected', 'ambiguous', 'cancelled')
    ),
    attempt_count INTEGER NOT NULL DEFAULT 0,
    result_json TEXT,
    result_ref TEXT REFERENCES blobs (digest),
    error TEXT,
    -- A settled effect a fork carried from its source as a receipt (store/forks.py): the
    -- source's effect id (no foreign key). It is never reserved to run again.
    carried_from TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    CHECK (carried_from IS NULL OR status IN ('applied', 'rejected'))
) STRICT;
CREATE INDEX effects_by_run ON effects (run_id);
CREATE INDEX effects_by_status ON effects (status);
CREATE INDEX effects_by_node_attempt ON effects (node_attempt_id)
    WHERE node_attempt_id IS NOT NULL;

CREATE TABLE effect_attempts (
    effect_id TEXT NOT NULL REFERENCES effects (effect_id),
    attempt_no INTEGER NOT NULL CHECK (attempt_no >= 1),
    generation INTEGER NOT NULL,
    node_attempt_id TEXT REFERENCES node_attempts (attempt_id),
    status TEXT NOT NULL CHECK (
        status IN ('applying', 'applied', 'rejected', 'lost', 'cancelled')
    ),
    receipt_json TEXT,
    started_at INTEGER NOT NULL,
    finished_at INTEGER,
    PRIMARY KEY (effect_id, attempt_no)
) STRICT;
CREATE INDEX effect_attempts_by_node_attempt ON effect_attempts (node_attempt_id)
    WHERE node_attempt_id IS NOT NULL;

-- Pi sessions that attached as the coordinator of their runs; a newer attach fences the
-- older connection (its reports carry an older epoch).
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    coordinator_epoch INTEGER NOT NULL CHECK (coordinator_epoch >= 1),
    -- The seat incarnation that holds the current epoch (one Pi process's coordinator, a
    -- headless agent's): a turn or a delivery of any other seat is never live again.
    seat_id TEXT NOT NULL,
    attached_at INTEGER NOT NULL,
    -- When the current seat's watch connection closed; NULL while it watches.
    disconnected_at INTEGER,
    reported_at INTEGER
) STRICT;

-- Content the origin Pi session must add: the step of a request (``step``), a human
-- decision's card (``decision``), a person's checkpoint (``question``: a card and a dialog
-- for the person), notify nodes (``notification``), terminal results (``terminal``) and
-- follow-up prompts (``followUp``, store/follow_ups.py), each recorded in the same
-- transaction as its source fact and marked ``sent`` only on the session's evidence (the
-- entry id that holds it).
CREATE TABLE workflow_messages (
    message_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    source_key TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (
        kind IN ('step', 'decision', 'question', 'notification', 'terminal', 'followUp')
    ),
    request_id TEXT REFERENCES interactive_requests (request_id),
    body_json TEXT NOT NULL,
    origin_session TEXT,
    -- 1 for a step presented again (its first message vanished from the session, or the
    -- run was resumed after its turn was aborted).
    resumed INTEGER NOT NULL DEFAULT 0 CHECK (resumed IN (0, 1)),
    status TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'cancelled', 'superseded')),
    entry_id TEXT,
    -- The seat whose report proved it ``sent`` (a delivery is to one seat incarnation).
    seat_id TEXT,
    created_at INTEGER NOT NULL,
    settled_at INTEGER,
    UNIQUE (run_id, source_key),
    CHECK ((status = 'pending') = (settled_at IS NULL)),
    CHECK (status != 'sent' OR entry_id IS NOT NULL),
    CHECK ((kind IN ('step', 'decision', 'question')) = (request_id IS NOT NULL))
) STRICT;
CREATE INDEX workflow_messages_pending
    ON workflow_messages (origin_session, created_at) WHERE status = 'pending';
CREATE INDEX workflow_messages_by_run ON workflow_messages (run_id, created_at);
-- Every message of a request (counted when it is presented again, superseded, read by the
-- session), pending or settled: a lookup by request never scans the table.
CREATE INDEX workflow_messages_by_request
    ON workflow_messages (request_id) WHERE request_id IS NOT NULL;

-- Follow-up prompts queued on a run (store/follow_ups.py): sent in seq order to the run's
-- origin session as user messages, only after the run completed and its terminal message
-- was delivered. 'queued' until then; 'ready' once its workflow message exists (recorded in
-- the transaction that marked the terminal message sent); 'sent' with that message;
-- 'cancelled' (with the reason) when the run fails, times out or is cancelled; 'removed'
-- by a person before it was ready.
CREATE TABLE run_follow_ups (
    follow_up_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    seq INTEGER NOT NULL CHECK (seq >= 1),
    text TEXT NOT NULL CHECK (length(text) BETWEEN 1 AND 65536),
    origin_session TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('queued', 'ready', 'sent', 'cancelled', 'removed')),
    reason TEXT,
    message_id TEXT REFERENCES workflow_messages (message_id),
    created_by TEXT,
    created_at INTEGER NOT NULL,
    settled_at INTEGER,
    UNIQUE (run_id, seq),
    CHECK ((status IN ('ready', 'sent')) = (message_id IS NOT NULL)),
    CHECK ((status IN ('queued', 'ready')) = (settled_at IS NULL)),
    CHECK ((status = 'cancelled') = (reason IS NOT NULL))
) STRICT;
CREATE INDEX run_follow_ups_waiting ON run_follow_ups (run_id, seq)
    WHERE status IN ('queued', 'ready');
CREATE INDEX run_follow_ups_by_message ON run_follow_ups (message_id)
    WHERE message_id IS NOT NULL;

-- Model turns a session reported (started, then ended with a stop reason). ``lost``: the
-- turn's seat died or another seat attached before it ended (store/delivery.py).
CREATE TABLE workflow_turns (
    turn_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    seat_id TEXT NOT NULL,
    message_id TEXT REFERENCES workflow_messages (message_id),
    run_id TEXT REFERENCES runs (run_id),
    status TEXT NOT NULL CHECK (status IN ('started', 'ended')),
    stop_reason TEXT CHECK (stop_reason IN ('completed', 'aborted', 'error', 'lost')),
    -- The provider's error of a turn that ended ``error`` (one line, bounded).
    error TEXT,
    started_at INTEGER NOT NULL,
    ended_at INTEGER,
    CHECK ((status = 'ended') = (ended_at IS NOT NULL))
) STRICT;
CREATE INDEX workflow_turns_open ON workflow_turns (session_id) WHERE status = 'started';
CREATE INDEX workflow_turns_by_run ON workflow_turns (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX workflow_turns_by_message ON workflow_turns (message_id) WHERE message_id IS NOT NULL;

-- What renderers read: rebuilt from the canonical rows in every run transaction.
CREATE TABLE viewer_runs (
    run_id TEXT PRIMARY KEY REFERENCES runs (run_id),
    workflow_name TEXT NOT NULL,
    -- The user-facing status: a run status, or 'ambiguous' for a run parked on an effect.
    status TEXT NOT NULL,
    run_status TEXT NOT NULL,
    queue_status TEXT NOT NULL,
    park_reason TEXT,
    current_node TEXT,
    revision INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    waiting_json TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    finished_at INTEGER,
    -- The parent of a child run: run list shows root runs unless asked for children.
    parent_run_id TEXT,
    -- The source of a fork (runs.forked_from): watch and run list mark forks.
    forked_from TEXT
) STRICT;
CREATE INDEX viewer_runs_by_status ON viewer_runs (status, created_at, run_id);
CREATE INDEX viewer_runs_by_age ON viewer_runs (created_at, run_id);
CREATE INDEX viewer_runs_roots_by_age ON viewer_runs (created_at, run_id)
    WHERE parent_run_id IS NULL;

-- Durable schedules (store/schedules.py): each starts a run of its workflow at every fire
-- time while a server runs. A row is never deleted: `schedule delete` marks it 'deleted', so
-- the runs it started keep showing its name; a name is unique among the schedules not deleted.
CREATE TABLE schedules (
    schedule_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    -- What a fire starts: the workflow as run.start takes it (a name, builtin:NAME or an
    -- absolute path), the project directory it is looked up in, and the input (canonical
    -- JSON, at most 64 KiB). workflow_name is the name it resolved to when it was added.
    workflow_spec TEXT NOT NULL,
    workflow_name TEXT NOT NULL,
    project_dir TEXT,
    input_json TEXT NOT NULL,
    -- The environment every run it starts gets, recorded from the client that added it
    -- (as run_sources records a client's run's): working directory and variables.
    working_dir TEXT,
    environment_json TEXT NOT NULL,
    -- The cadence, exactly one of: every_ms (fire times anchor_at + k * every_ms, k >= 1) or
    -- cron (five fields, read in timezone, an IANA zone name always stored explicitly).
    every_ms INTEGER CHECK (every_ms IS NULL OR every_ms >= 1000),
    cron TEXT,
    timezone TEXT NOT NULL,
    anchor_at INTEGER NOT NULL,
    overlap TEXT NOT NULL CHECK (overlap IN ('skip', 'queue', 'allow')),
    catchup TEXT NOT NULL CHECK (catchup IN ('latest', 'all', 'none')),
    status TEXT NOT NULL CHECK (status IN ('active', 'paused', 'deleted')),
    -- The next fire time, set exactly while the schedule is active. Every fire time recorded
    -- in schedule_fires is earlier: the transaction that records a fire moves this past it.
    next_fire_at INTEGER,
    last_fire_at INTEGER,
    -- Who added it ("client:<client id>").
    origin TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    deleted_at INTEGER,
    CHECK ((every_ms IS NULL) != (cron IS NULL)),
    CHECK ((status = 'active') = (next_fire_at IS NOT NULL)),
    CHECK ((status = 'deleted') = (deleted_at IS NOT NULL))
) STRICT;
CREATE UNIQUE INDEX schedules_live_name ON schedules (name) WHERE status != 'deleted';
CREATE INDEX schedules_by_name ON schedules (name);
-- The scheduler's question every tick: the earliest due fire among active schedules.
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE status = 'active';

-- What a schedule did at each fire time, keyed by (schedule, fire time): the fire row, the
-- run it started (reserved in the same transaction) and the schedule's next fire time commit
-- together, so a fire is either wholly recorded or not at all. 'started' names its run (no
-- foreign key: retention may remove the run later); 'skipped' and 'failed' say why in
-- detail; 'queued' waits (overlap queue) until the schedule's previous run ends, then
-- becomes 'started' (or 'failed', or 'skipped'), settled_at set; 'missed' stands for the
-- `missed` fire times from fire_at to missed_until that the catch-up rule dropped.
-- The newest 1,000 settled rows of a schedule are kept; queued rows are always kept.
CREATE TABLE schedule_fires (
    schedule_id TEXT NOT NULL REFERENCES schedules (schedule_id),
    fire_at INTEGER NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('started', 'skipped', 'queued', 'failed', 'missed')),
    run_id TEXT,
    detail TEXT,
    missed INTEGER NOT NULL DEFAULT 0 CHECK (missed >= 0),
    missed_until INTEGER,
    recorded_at INTEGER NOT NULL,
    settled_at INTEGER,
    -- What made the fire: the cadence, a person's ``schedule trigger`` (fire_at is the
    -- moment it was handled) or ``schedule backfill`` (a past fire time of the cadence).
    source TEXT NOT NULL DEFAULT 'cadence' CHECK (source IN ('cadence', 'trigger', 'backfill')),
    -- A trigger's key: the same key again adopts this fire (per schedule).
    trigger_key TEXT CHECK (trigger_key IS NULL OR source = 'trigger'),
    PRIMARY KEY (schedule_id, fire_at),
    CHECK ((outcome = 'started') = (run_id IS NOT NULL)),
    CHECK ((outcome = 'queued') = (settled_at IS NULL)),
    CHECK ((outcome = 'missed') = (missed > 0 AND missed_until IS NOT NULL))
) STRICT;
CREATE UNIQUE INDEX schedule_fires_by_key ON schedule_fires (schedule_id, trigger_key)
    WHERE trigger_key IS NOT NULL;
-- Queued fires are looked for every tick: only they are in this index.
CREATE INDEX schedule_fires_queued ON schedule_fires (schedule_id, fire_at)
    WHERE outcome = 'queued';
