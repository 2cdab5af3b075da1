-- The views every question file (analysis/*.sql) reads.
--
-- In Python, agensh_ray.analysis.views.connect(run_dir) sets everything up. In the DuckDB CLI, set the
-- run's settings first (the run folder, the price table, the run's worker ids, the score milestones:
-- `python -m agensh_ray.analysis.views --settings RUN_DIR` prints them as SET VARIABLE statements),
-- then read this file and a question:
--   python -m agensh_ray.analysis.views --settings runs/20261129T181500Z > settings.sql
--   duckdb -c ".read settings.sql" -c ".read analysis/views.sql" -c ".read analysis/merges.sql"
-- Without worker_ids the run's workers are those seen in the trace (a worker that never started is
-- then missing). In the CLI every table must have at least one Parquet file
-- (agensh_ray.trace.write_schema_files writes an empty _schema.parquet per table); connect() needs
-- none: it gives a table the run never wrote an empty view with the right columns.
--
-- One row per event: each table's view (`forge`) keeps one row of each set of copies, rows equal in
-- the table's identity columns (event_id; for pr_changes the change block too, for deliveries the
-- worker too: docs/trace.md); `<table>_rows` (`forge_rows`) has every row as written. Copies appear
-- when two writers record the same event (an actor and the reconciliation from its durable log).
-- Denormalised columns are never trusted where another table is the source of truth: a PR's author
-- is whoever opened it (view prs), not a row's pr_author.
--
-- Times: `ts` columns are UTC timestamps. Durations in the question files are *schedule
-- seconds*: wall seconds x the run's time_scale (so a sim run compressed 120x reads like the
-- run it simulates; for a real run time_scale is 1). sched_s(ts) is seconds since the schedule started
-- (the first worker's launch: run_info.schedule_started), one clock for every question.

-- BEGIN GENERATED TABLE VIEWS
CREATE OR REPLACE VIEW board_rows AS
SELECT run_id, ts, worker_id, event_id, schema_version, seq, type, text, has_detail FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS BIGINT) AS seq, CAST(NULL AS VARCHAR) AS type, CAST(NULL AS VARCHAR) AS text, CAST(NULL AS BOOLEAN) AS has_detail WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/board/*.parquet', union_by_name = true)
);
CREATE OR REPLACE VIEW board AS
SELECT * FROM board_rows WHERE coalesce(event_id, '') = ''
UNION ALL
(SELECT DISTINCT ON (event_id) * FROM board_rows WHERE event_id <> '' ORDER BY event_id, ts);

CREATE OR REPLACE VIEW messages_rows AS
SELECT run_id, ts, worker_id, event_id, schema_version, seq, kind, sender, recipient, text FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS BIGINT) AS seq, CAST(NULL AS VARCHAR) AS kind, CAST(NULL AS VARCHAR) AS sender, CAST(NULL AS VARCHAR) AS recipient, CAST(NULL AS VARCHAR) AS text WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/messages/*.parquet', union_by_name = true)
);
CREATE OR REPLACE VIEW messages AS
SELECT * FROM messages_rows WHERE coalesce(event_id, '') = ''
UNION ALL
(SELECT DISTINCT ON (event_id) * FROM messages_rows WHERE event_id <> '' ORDER BY event_id, ts);

CREATE OR REPLACE VIEW forge_rows AS
SELECT run_id, ts, worker_id, event_id, schema_version, seq, kind, pr, pr_author, ref, detail, verdict FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS BIGINT) AS seq, CAST(NULL AS VARCHAR) AS kind, CAST(NULL AS BIGINT) AS pr, CAST(NULL AS VARCHAR) AS pr_author, CAST(NULL AS VARCHAR) AS ref, CAST(NULL AS VARCHAR) AS detail, CAST(NULL AS VARCHAR) AS verdict WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/forge/*.parquet', union_by_name = true)
);
CREATE OR REPLACE VIEW forge AS
SELECT * FROM forge_rows WHERE coalesce(event_id, '') = ''
UNION ALL
(SELECT DISTINCT ON (event_id) * FROM forge_rows WHERE event_id <> '' ORDER BY event_id, ts);

CREATE OR REPLACE VIEW turns_rows AS
SELECT run_id, ts, worker_id, event_id, schema_version, turn, phase, trigger, stop_reason, duration_ms, model FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS BIGINT) AS turn, CAST(NULL AS VARCHAR) AS phase, CAST(NULL AS VARCHAR) AS trigger, CAST(NULL AS VARCHAR) AS stop_reason, CAST(NULL AS DOUBLE) AS duration_ms, CAST(NULL AS VARCHAR) AS model WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/turns/*.parquet', union_by_name = true)
);
CREATE OR REPLACE VIEW turns AS
SELECT * FROM turns_rows WHERE coalesce(event_id, '') = ''
UNION ALL
(SELECT DISTINCT ON (event_id) * FROM turns_rows WHERE event_id <> '' ORDER BY event_id, ts);

CREATE OR REPLACE VIEW tool_calls_rows AS
SELECT run_id, ts, worker_id, event_id, schema_version, tool, source, tool_call_id, duration_ms, ok, error, turn, life FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS VARCHAR) AS tool, CAST(NULL AS VARCHAR) AS source, CAST(NULL AS VARCHAR) AS tool_call_id, CAST(NULL AS DOUBLE) AS duration_ms, CAST(NULL AS BOOLEAN) AS ok, CAST(NULL AS VARCHAR) AS error, CAST(NULL AS BIGINT) AS turn, CAST(NULL AS VARCHAR) AS life WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/tool_calls/*.parquet', union_by_name = true)
);
CREATE OR REPLACE VIEW tool_calls AS
SELECT * FROM tool_calls_rows WHERE coalesce(event_id, '') = ''
UNION ALL
(SELECT DISTINCT ON (event_id) * FROM tool_calls_rows WHERE event_id <> '' ORDER BY event_id, ts);

CREATE OR REPLACE VIEW usage_rows AS
SELECT run_id, ts, worker_id, event_id, schema_version, turn, life, input_tokens, output_tokens, cost_usd FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS BIGINT) AS turn, CAST(NULL AS VARCHAR) AS life, CAST(NULL AS BIGINT) AS input_tokens, CAST(NULL AS BIGINT) AS output_tokens, CAST(NULL AS DOUBLE) AS cost_usd WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/usage/*.parquet', union_by_name = true)
);
CREATE OR REPLACE VIEW usage AS
SELECT * FROM usage_rows WHERE coalesce(event_id, '') = ''
UNION ALL
(SELECT DISTINCT ON (event_id) * FROM usage_rows WHERE event_id <> '' ORDER BY event_id, ts);

CREATE OR REPLACE VIEW deliveries_rows AS
SELECT run_id, ts, worker_id, event_id, schema_version, kind, priority, via, enqueue_ts, latency_ms FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS VARCHAR) AS kind, CAST(NULL AS VARCHAR) AS priority, CAST(NULL AS VARCHAR) AS via, CAST(NULL AS TIMESTAMPTZ) AS enqueue_ts, CAST(NULL AS DOUBLE) AS latency_ms WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/deliveries/*.parquet', union_by_name = true)
);
CREATE OR REPLACE VIEW deliveries AS
SELECT * FROM deliveries_rows WHERE coalesce(event_id, '') = ''
UNION ALL
(SELECT DISTINCT ON (event_id, worker_id) * FROM deliveries_rows WHERE event_id <> '' ORDER BY event_id, worker_id, ts);

CREATE OR REPLACE VIEW scores_rows AS
SELECT run_id, ts, worker_id, event_id, schema_version, checkpoint, commit, passed, total, pass_rate, schedule_s, not_run, error_code, eval_json, runner_files, strict_pass_rate, strict_passed, strict_eval_json FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS VARCHAR) AS checkpoint, CAST(NULL AS VARCHAR) AS commit, CAST(NULL AS BIGINT) AS passed, CAST(NULL AS BIGINT) AS total, CAST(NULL AS DOUBLE) AS pass_rate, CAST(NULL AS DOUBLE) AS schedule_s, CAST(NULL AS BIGINT) AS not_run, CAST(NULL AS VARCHAR) AS error_code, CAST(NULL AS VARCHAR) AS eval_json, CAST(NULL AS VARCHAR) AS runner_files, CAST(NULL AS DOUBLE) AS strict_pass_rate, CAST(NULL AS BIGINT) AS strict_passed, CAST(NULL AS VARCHAR) AS strict_eval_json WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/scores/*.parquet', union_by_name = true)
);
CREATE OR REPLACE VIEW scores AS
SELECT * FROM scores_rows WHERE coalesce(event_id, '') = ''
UNION ALL
(SELECT DISTINCT ON (event_id) * FROM scores_rows WHERE event_id <> '' ORDER BY event_id, ts);

CREATE OR REPLACE VIEW test_results_rows AS
SELECT run_id, ts, worker_id, event_id, schema_version, checkpoint, commit, branch, test, status, ignored FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS VARCHAR) AS checkpoint, CAST(NULL AS VARCHAR) AS commit, CAST(NULL AS VARCHAR) AS branch, CAST(NULL AS VARCHAR) AS test, CAST(NULL AS VARCHAR) AS status, CAST(NULL AS BOOLEAN) AS ignored WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/test_results/*.parquet', union_by_name = true)
);
CREATE OR REPLACE VIEW test_results AS
SELECT * FROM test_results_rows WHERE coalesce(event_id, '') = ''
UNION ALL
(SELECT DISTINCT ON (event_id, branch, test) * FROM test_results_rows WHERE event_id <> '' ORDER BY event_id, branch, test, ts);

CREATE OR REPLACE VIEW lifecycle_rows AS
SELECT run_id, ts, worker_id, event_id, schema_version, event, detail, host, pid, node FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS VARCHAR) AS event, CAST(NULL AS VARCHAR) AS detail, CAST(NULL AS VARCHAR) AS host, CAST(NULL AS BIGINT) AS pid, CAST(NULL AS VARCHAR) AS node WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/lifecycle/*.parquet', union_by_name = true)
);
CREATE OR REPLACE VIEW lifecycle AS
SELECT * FROM lifecycle_rows WHERE coalesce(event_id, '') = ''
UNION ALL
(SELECT DISTINCT ON (event_id) * FROM lifecycle_rows WHERE event_id <> '' ORDER BY event_id, ts);

CREATE OR REPLACE VIEW llm_calls_rows AS
SELECT run_id, ts, worker_id, event_id, schema_version, gateway, provider, api, model, model_used, stream, status, http_status, input_tokens, cached_tokens, cache_write_tokens, output_tokens, cost_usd, latency_ms, ttfb_ms, queued_ms, retries, retry_statuses, error FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS VARCHAR) AS gateway, CAST(NULL AS VARCHAR) AS provider, CAST(NULL AS VARCHAR) AS api, CAST(NULL AS VARCHAR) AS model, CAST(NULL AS VARCHAR) AS model_used, CAST(NULL AS BOOLEAN) AS stream, CAST(NULL AS VARCHAR) AS status, CAST(NULL AS BIGINT) AS http_status, CAST(NULL AS BIGINT) AS input_tokens, CAST(NULL AS BIGINT) AS cached_tokens, CAST(NULL AS BIGINT) AS cache_write_tokens, CAST(NULL AS BIGINT) AS output_tokens, CAST(NULL AS DOUBLE) AS cost_usd, CAST(NULL AS DOUBLE) AS latency_ms, CAST(NULL AS DOUBLE) AS ttfb_ms, CAST(NULL AS DOUBLE) AS queued_ms, CAST(NULL AS BIGINT) AS retries, CAST(NULL AS VARCHAR) AS retry_statuses, CAST(NULL AS VARCHAR) AS error WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/llm_calls/*.parquet', union_by_name = true)
);
CREATE OR REPLACE VIEW llm_calls AS
SELECT * FROM llm_calls_rows WHERE coalesce(event_id, '') = ''
UNION ALL
(SELECT DISTINCT ON (event_id, ts) * FROM llm_calls_rows WHERE event_id <> '' ORDER BY event_id, ts, ts);

CREATE OR REPLACE VIEW pr_changes_rows AS
SELECT run_id, ts, worker_id, event_id, schema_version, pr, pr_author, snapshot, path, status, old_start, old_lines, new_start, new_lines, function FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS BIGINT) AS pr, CAST(NULL AS VARCHAR) AS pr_author, CAST(NULL AS VARCHAR) AS snapshot, CAST(NULL AS VARCHAR) AS path, CAST(NULL AS VARCHAR) AS status, CAST(NULL AS BIGINT) AS old_start, CAST(NULL AS BIGINT) AS old_lines, CAST(NULL AS BIGINT) AS new_start, CAST(NULL AS BIGINT) AS new_lines, CAST(NULL AS VARCHAR) AS function WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/pr_changes/*.parquet', union_by_name = true)
);
CREATE OR REPLACE VIEW pr_changes AS
SELECT * FROM pr_changes_rows WHERE coalesce(event_id, '') = ''
UNION ALL
(SELECT DISTINCT ON (event_id, path, status, old_start, old_lines, new_start, new_lines, function) * FROM pr_changes_rows WHERE event_id <> '' ORDER BY event_id, path, status, old_start, old_lines, new_start, new_lines, function, ts);

CREATE OR REPLACE VIEW intake_rows AS
SELECT run_id, ts, worker_id, event_id, schema_version, source, reason, delivery FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS VARCHAR) AS source, CAST(NULL AS VARCHAR) AS reason, CAST(NULL AS VARCHAR) AS delivery WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/intake/*.parquet', union_by_name = true)
);
CREATE OR REPLACE VIEW intake AS
SELECT * FROM intake_rows WHERE coalesce(event_id, '') = ''
UNION ALL
(SELECT DISTINCT ON (event_id, ts, source) * FROM intake_rows WHERE event_id <> '' ORDER BY event_id, ts, source, ts);

CREATE OR REPLACE VIEW clock_rows AS
SELECT run_id, ts, worker_id, event_id, schema_version, scope, window_s, time_scale, agent_tool_median_ms, server_tool_median_ms, tool_latency_ratio, cpu_wait_share, machine_bound, why FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS VARCHAR) AS scope, CAST(NULL AS DOUBLE) AS window_s, CAST(NULL AS DOUBLE) AS time_scale, CAST(NULL AS DOUBLE) AS agent_tool_median_ms, CAST(NULL AS DOUBLE) AS server_tool_median_ms, CAST(NULL AS DOUBLE) AS tool_latency_ratio, CAST(NULL AS DOUBLE) AS cpu_wait_share, CAST(NULL AS BOOLEAN) AS machine_bound, CAST(NULL AS VARCHAR) AS why WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/clock/*.parquet', union_by_name = true)
);
CREATE OR REPLACE VIEW clock AS
SELECT * FROM clock_rows WHERE coalesce(event_id, '') = ''
UNION ALL
(SELECT DISTINCT ON (event_id) * FROM clock_rows WHERE event_id <> '' ORDER BY event_id, ts);
-- END GENERATED TABLE VIEWS

-- Run settings from config.json (connect() reads config.json itself: a missing key is null, a missing
-- time_scale 1).
-- claim_rule and claim_life_wall_s: how long a claim lives without renewal, in wall seconds, by the run's
-- rule (lease | legacy), as the board and the agents' prompt have it: connect() computes them from
-- config.json with agensh_ray.board.leases.claim_life_wall_s (a run from before the rule existed: legacy,
-- claim_ttl_s / time_scale). Read here without connect(): the legacy rule with the default TTL.
CREATE OR REPLACE VIEW run_config AS
SELECT CAST(workers AS BIGINT) AS workers, CAST(harness AS VARCHAR) AS harness,
       CAST(coalesce(time_scale, 1.0) AS DOUBLE) AS time_scale, CAST(minutes AS DOUBLE) AS minutes,
       'legacy' AS claim_rule, 3600.0 / CAST(coalesce(time_scale, 1.0) AS DOUBLE) AS claim_life_wall_s
FROM read_json_auto(getvariable('run_dir') || '/config.json');

-- The run's workers, one row each: agensh_ray.config.worker_ids(config.json's `workers`), which
-- connect() puts in the variable worker_ids, so a worker that never started is one of them. A run
-- with no `workers` setting: every worker seen in lifecycle, turns, forge, board, messages (senders)
-- or usage.
CREATE OR REPLACE VIEW roster AS
SELECT DISTINCT unnest(getvariable('worker_ids')) AS worker_id
UNION ALL
SELECT worker_id FROM (
    SELECT worker_id FROM lifecycle UNION SELECT worker_id FROM turns UNION SELECT worker_id FROM forge
    UNION SELECT worker_id FROM board UNION SELECT sender FROM messages UNION SELECT worker_id FROM usage
) WHERE worker_id IS NOT NULL AND getvariable('worker_ids') IS NULL;

-- The run and its one clock. started / ended: its first and latest event (lifecycle, scores, forge: small
-- tables, so this is cheap; a live run ends at its latest event so far): the wall time, set-up and final
-- scoring included. The schedule (what every question times, in schedule seconds, sched_s):
--   schedule_started  when the schedule started, the first worker's launch: driver.json's start_wall (the
--                     variable schedule_start_us, which connect() reads; a resumed driver keeps it), else the
--                     first lifecycle row of a worker, else the first event
--   schedule_ended    the configured schedule's end (schedule_started + minutes x 60 / time_scale wall
--                     seconds; a run that ended at its deadline, summary.json says, ends there), or the
--                     workers' last event (lifecycle, turns, forge, board, messages) if that came first: a run
--                     that ended early (done, a budget, a signal) or is still running
-- set-up is started -> schedule_started (Ray, the actors, the clones); after it, schedule_ended -> ended
-- (stopping the workers, the final checkpoint). ended_how: summary.json's "ended" (deadline | done |
-- budget | interrupted; null while the run runs), the variable run_ended.
CREATE OR REPLACE VIEW run_info AS
WITH span AS (
    SELECT min(ts) AS lo, max(ts) AS hi FROM lifecycle
    UNION ALL SELECT min(ts), max(ts) FROM scores
    UNION ALL SELECT min(ts), max(ts) FROM forge
),
b AS (SELECT min(lo) AS started, max(hi) AS ended FROM span),
work AS (
    SELECT max(ts) AS hi FROM (
        SELECT ts FROM lifecycle WHERE worker_id IS NOT NULL UNION ALL SELECT ts FROM turns
        UNION ALL SELECT ts FROM forge UNION ALL SELECT ts FROM board UNION ALL SELECT ts FROM messages)
),
s AS (
    SELECT coalesce(make_timestamptz(CAST(getvariable('schedule_start_us') AS BIGINT)),
                    (SELECT min(ts) FROM lifecycle WHERE worker_id IS NOT NULL), b.started) AS t0
    FROM b
)
SELECT
    coalesce((SELECT any_value(run_id) FROM lifecycle), (SELECT any_value(run_id) FROM scores),
             regexp_extract(getvariable('run_dir'), '([^/]+)/*$', 1)) AS run_id,
    least(b.started, s.t0) AS started,
    greatest(b.ended, s.t0) AS ended,
    s.t0 AS schedule_started,
    CASE WHEN s.t0 IS NULL THEN NULL
         ELSE greatest(s.t0, least(CASE WHEN getvariable('run_ended') = 'deadline' THEN 'infinity'::TIMESTAMPTZ
                                        ELSE coalesce(w.hi, b.ended, s.t0) END,
                                   coalesce(s.t0 + to_microseconds(CAST(c.minutes * 60e6 / c.time_scale AS BIGINT)),
                                            'infinity'::TIMESTAMPTZ))) END AS schedule_ended,
    c.minutes * 60 AS configured_s,
    CAST(getvariable('run_ended') AS VARCHAR) AS ended_how,
    (SELECT count(*) FROM roster) AS workers,
    c.harness,
    c.time_scale,
    c.claim_rule,
    c.claim_life_wall_s
FROM run_config c, b, s, work w;

-- The key of a CLAIM, a release (FAIL `release KEY: ...`) or a PATCH_SUMMARY (`KEY: ...`): its text up to
-- the first colon (all of it without one), a leading claim/release word dropped, lower-cased, spaces
-- collapsed, at most 60 characters. agensh_ray.board.leases.claim_key, in SQL (a test
-- checks that the two agree).
CREATE OR REPLACE MACRO claim_key(t) AS
    left(trim(regexp_replace(regexp_replace(lower(trim(
        CASE WHEN contains(t, ':') AND trim(split_part(t, ':', 1)) <> '' THEN split_part(t, ':', 1) ELSE t END)),
        '^(claim(ed|ing)?|release[sd]?)\b *', ''), ' +', ' ', 'g')), 60);

-- Schedule seconds since the schedule started (run_info.schedule_started: the first worker's launch; negative
-- during the set-up), and between two timestamps.
CREATE OR REPLACE MACRO sched_s(t) AS
    (epoch(t) - (SELECT epoch(schedule_started) FROM run_info)) * (SELECT time_scale FROM run_info);
CREATE OR REPLACE MACRO sched_dur_s(a, b) AS
    (epoch(b) - epoch(a)) * (SELECT time_scale FROM run_info);

-- One row per scoring of main (view scores) with t_s, the schedule time it stands for: when the checkpoint
-- took main (scores.schedule_s; the time the score was recorded in traces without it), at most the
-- configured schedule's end: the final checkpoint takes main after the workers were stopped at the
-- deadline, and scores main as the schedule left it (scores.sql, score_milestones.sql and time_to_score.sql time scores by it).
CREATE OR REPLACE VIEW scorings AS
SELECT least(coalesce(schedule_s, sched_s(ts)), coalesce((SELECT configured_s FROM run_info), 'infinity'::DOUBLE)) AS t_s,
       *
FROM scores;

-- Workers' lives, up time and turns, in wall timestamps within the schedule (idle.sql and efficiency.sql
-- read them). A life: each `started` lifecycle row of a worker begins one (a new agent session: a first
-- launch, a resumed driver or a restarted host); turns are numbered from 1 in each life, so a turn is known
-- by its worker, life and number (its event_id's life in new traces, `turn:<worker>:<life>:<n>:<phase>`;
-- in older traces the worker's `started` rows before it).
--   worker_lives  worker_id, life (1, 2, .. in time order), l0 (its start), host, next_life
--   worker_downs  worker_id, ts: a down row (crashed, stopped, gave_up) or its host's death (an actor_died /
--                 actor_killed / actor_lost row of `host <its host>` within the life: a hung host killed
--                 writes actor_killed, not actor_died)
--   worker_up     one row per up interval: iv (the `started` or `restarted` row's ts that begins it), t0, t1:
--                 from that row to the first of its next down, its next up row (a resume or restart that
--                 wrote no down row: the time before it stays up time), the schedule's end; clipped to
--                 the schedule (t1 <= t0: an interval outside it)
--   worker_busy   one row per turn started within the schedule: iv (the up interval it started in, null
--                 outside any), trigger, t0, t1: from its start row to its end row of the same life, never
--                 past the end of its up interval (a turn killed with its agent, host or driver ends where
--                 the trace shows that end); outside any up interval (a trace without lifecycle rows) to
--                 its end row, else the next down or up row, else the schedule's end
CREATE OR REPLACE VIEW worker_lives AS
SELECT worker_id, row_number() OVER (PARTITION BY worker_id ORDER BY ts) AS life, ts AS l0, host,
       lead(ts) OVER (PARTITION BY worker_id ORDER BY ts) AS next_life
FROM lifecycle WHERE worker_id IS NOT NULL AND event = 'started';

CREATE OR REPLACE VIEW worker_downs AS
SELECT worker_id, ts FROM lifecycle WHERE worker_id IS NOT NULL AND event IN ('crashed', 'stopped', 'gave_up')
UNION ALL
SELECT l.worker_id, h.ts FROM worker_lives l JOIN lifecycle h
  ON h.worker_id IS NULL AND h.event IN ('actor_died', 'actor_killed', 'actor_lost') AND h.host = 'host ' || l.host
 AND h.ts >= l.l0 AND h.ts < coalesce(l.next_life, 'infinity'::TIMESTAMPTZ);

CREATE OR REPLACE VIEW worker_up AS
WITH ups AS (SELECT worker_id, ts FROM lifecycle WHERE worker_id IS NOT NULL AND event IN ('started', 'restarted'))
SELECT u.worker_id, u.ts AS iv,
       greatest(u.ts, (SELECT schedule_started FROM run_info)) AS t0,
       least((SELECT min(d.ts) FROM worker_downs d WHERE d.worker_id = u.worker_id AND d.ts >= u.ts),
             (SELECT min(n.ts) FROM ups n WHERE n.worker_id = u.worker_id AND n.ts > u.ts),
             (SELECT schedule_ended FROM run_info)) AS t1
FROM ups u;

CREATE OR REPLACE VIEW worker_busy AS
WITH sch AS (SELECT schedule_started AS s0, schedule_ended AS s1 FROM run_info),
ups AS (SELECT worker_id, ts FROM lifecycle WHERE worker_id IS NOT NULL AND event IN ('started', 'restarted')),
tr AS (
    SELECT t.worker_id, t.ts, t.turn, t.phase, t.trigger,
           coalesce(CASE WHEN starts_with(t.event_id, 'turn:') THEN string_split(t.event_id, ':')[-3] END,
                    CAST((SELECT count(*) FROM worker_lives l WHERE l.worker_id = t.worker_id AND l.l0 <= t.ts)
                         AS VARCHAR)) AS life
    FROM turns t
),
starts AS (SELECT * FROM tr WHERE phase = 'start'),
ends AS (SELECT worker_id, life, turn, ts FROM tr WHERE phase = 'end'),
busy0 AS (
    SELECT s.worker_id, s.ts AS t0, s.trigger,
           (SELECT min(e.ts) FROM ends e
            WHERE e.worker_id = s.worker_id AND e.life = s.life AND e.turn = s.turn AND e.ts >= s.ts) AS end_ts,
           (SELECT max(u.iv) FROM worker_up u WHERE u.worker_id = s.worker_id AND u.t0 <= s.ts AND s.ts < u.t1) AS iv
    FROM starts s
)
SELECT b.worker_id, b.iv, b.trigger, greatest(b.t0, (SELECT s0 FROM sch)) AS t0,
       least(coalesce(b.end_ts, 'infinity'::TIMESTAMPTZ), coalesce(u.t1, 'infinity'::TIMESTAMPTZ),
             CASE WHEN u.iv IS NULL THEN least(
                 coalesce((SELECT min(d.ts) FROM worker_downs d WHERE d.worker_id = b.worker_id AND d.ts >= b.t0),
                          'infinity'::TIMESTAMPTZ),
                 coalesce((SELECT min(n.ts) FROM ups n WHERE n.worker_id = b.worker_id AND n.ts > b.t0),
                          'infinity'::TIMESTAMPTZ)) ELSE 'infinity'::TIMESTAMPTZ END,
             (SELECT s1 FROM sch)) AS t1
FROM busy0 b LEFT JOIN worker_up u ON u.worker_id = b.worker_id AND u.iv = b.iv
WHERE b.t0 <= (SELECT s1 FROM sch);

-- The price table (a setting): USD per million tokens, by model or harness name (the first row of a
-- name counts).
CREATE OR REPLACE VIEW prices AS
SELECT DISTINCT ON (model) CAST(model AS VARCHAR) AS model, CAST(input_usd_per_mtok AS DOUBLE) AS input_usd_per_mtok,
       CAST(output_usd_per_mtok AS DOUBLE) AS output_usd_per_mtok
FROM read_csv(coalesce(getvariable('prices'), 'analysis/prices.csv'), header = true, all_varchar = true);

-- One row per charged model call, with the model that prices it and its cost (cost.sql and
-- cost_per_model.sql read it). A run whose agents went through the model gateway (table llm_calls has
-- rows) counts those: one row per model request, tokens from the provider's usage fields (input_tokens
-- include cached ones), model the one that answered (model_used, else the one asked for), cost as the
-- gateway priced it (LiteLLM's price map or the run's override); a call the gateway could not price (a
-- model no price table knows, or an answer without usage) has a null cost_usd and unpriced true: unknown,
-- never $0. Otherwise table usage: tokens as the agent reports them, one row per turn (the sim agent
-- reports none); its rows name no model, so they are priced by the price-table row (view prices) named
-- like the run's harness: cost_usd = input_tokens x input price + output_tokens x output price (priced
-- true), else what the agent reported (reported_cost_usd). Only this view knows where calls come from.
CREATE OR REPLACE VIEW charged_calls AS
WITH calls AS (
    SELECT worker_id, coalesce(model_used, model) AS model, input_tokens, cached_tokens, output_tokens,
           CAST(NULL AS DOUBLE) AS reported_cost_usd, cost_usd AS gateway_cost_usd, true AS via_gateway
    FROM llm_calls
    UNION ALL
    SELECT u.worker_id, r.harness AS model, u.input_tokens, CAST(0 AS BIGINT), u.output_tokens,
           u.cost_usd AS reported_cost_usd, CAST(NULL AS DOUBLE) AS gateway_cost_usd, false AS via_gateway
    FROM usage u, run_info r
    WHERE NOT EXISTS (SELECT 1 FROM llm_calls)
)
SELECT c.worker_id, c.model, coalesce(c.input_tokens, 0) AS input_tokens,
       coalesce(c.cached_tokens, 0) AS cached_tokens, coalesce(c.output_tokens, 0) AS output_tokens,
       coalesce(c.reported_cost_usd, 0) AS reported_cost_usd,
       NOT c.via_gateway AND p.model IS NOT NULL AS priced, c.via_gateway,
       c.via_gateway AND c.gateway_cost_usd IS NULL AS unpriced,
       CASE WHEN c.via_gateway THEN c.gateway_cost_usd
            WHEN p.model IS NOT NULL
            THEN (coalesce(c.input_tokens, 0) * p.input_usd_per_mtok
                  + coalesce(c.output_tokens, 0) * p.output_usd_per_mtok) / 1e6
            ELSE coalesce(c.reported_cost_usd, 0) END AS cost_usd
FROM calls c LEFT JOIN prices p ON p.model = c.model;

-- One row per pull request, from the forge events.
--   author     whoever opened it (the actor of its first pr_opened event); only a PR with no such event
--              falls back to the rows' pr_author copies (the most common non-null one; null if none)
--   merged_by  the actor of its first merge (a later merge event of a merged PR changes nothing; null
--              when that row has no actor)
--   reviews    pr_reviewed events by anyone but the author (the author may only leave `comment`
--              reviews on their own PR); approvals: of those, `approve` verdicts
--   state      at the end: merged | closed (unmerged) | open
CREATE OR REPLACE VIEW prs AS
WITH f AS (SELECT * FROM forge WHERE pr IS NOT NULL),
a AS (
    SELECT pr, coalesce(arg_min(worker_id, ts) FILTER (WHERE kind = 'pr_opened'), mode(pr_author)) AS author
    FROM f GROUP BY pr
)
SELECT
    pr,
    any_value(a.author) AS author,
    min(ts) FILTER (WHERE kind = 'pr_opened') AS opened_ts,
    min(ts) FILTER (WHERE kind = 'pr_merged') AS merged_ts,
    arg_min_null(worker_id, ts) FILTER (WHERE kind = 'pr_merged') AS merged_by,
    min(ts) FILTER (WHERE kind = 'pr_closed') AS closed_ts,
    arg_min_null(worker_id, ts) FILTER (WHERE kind = 'pr_closed') AS closed_by,
    count(*) FILTER (WHERE kind = 'pr_reviewed' AND worker_id IS DISTINCT FROM a.author) AS reviews,
    count(*) FILTER (WHERE kind = 'pr_reviewed' AND worker_id IS DISTINCT FROM a.author
                     AND coalesce(verdict, trim(split_part(detail, ':', 1))) = 'approve') AS approvals,
    count(*) FILTER (WHERE kind = 'pr_commented') AS comments,
    count(*) FILTER (WHERE kind = 'merge_conflict') AS conflicts,
    count(*) FILTER (WHERE kind = 'push') AS pushes,
    CASE WHEN count(*) FILTER (WHERE kind = 'pr_merged') > 0 THEN 'merged'
         WHEN count(*) FILTER (WHERE kind = 'pr_closed') > 0 THEN 'closed'
         ELSE 'open' END AS state
FROM f JOIN a USING (pr)
GROUP BY pr;

-- One row per worker (view roster): what it did. PRs come from view prs, so every count of PRs is
-- of distinct PRs and judged by the PR's real author:
--   prs_authored       PRs it opened;  prs_merged: of those, merged (by anyone)
--   merged_own         its own PRs it merged;  merged_for_others: peers' PRs it merged (the first merge)
--   reviews_given      peers' PRs it reviewed;  approvals_given: of those, PRs it approved
--   claims, fails      CLAIM and FAIL board entries;  board_entries: all its board entries
--   dms_sent/received, channel_posts, turns (turns started)
CREATE OR REPLACE VIEW worker_activity AS
WITH rv AS (
    SELECT f.worker_id, count(DISTINCT f.pr) AS reviews_given,
           count(DISTINCT f.pr) FILTER (WHERE coalesce(f.verdict, trim(split_part(f.detail, ':', 1))) = 'approve')
               AS approvals_given
    FROM forge f JOIN prs p USING (pr)
    WHERE f.kind = 'pr_reviewed' AND f.worker_id IS DISTINCT FROM p.author
    GROUP BY f.worker_id
),
au AS (
    SELECT author AS worker_id, count(*) AS prs_authored, count(*) FILTER (WHERE state = 'merged') AS prs_merged
    FROM prs GROUP BY author
),
mg AS (
    SELECT merged_by AS worker_id, count(*) FILTER (WHERE merged_by = author) AS merged_own,
           count(*) FILTER (WHERE merged_by <> author) AS merged_for_others
    FROM prs WHERE state = 'merged' GROUP BY merged_by
),
b AS (
    SELECT worker_id, count(*) AS board_entries, count(*) FILTER (WHERE type = 'CLAIM') AS claims,
           count(*) FILTER (WHERE type = 'FAIL') AS fails
    FROM board GROUP BY worker_id
),
ms AS (
    SELECT sender AS worker_id, count(*) FILTER (WHERE kind = 'dm') AS dms_sent,
           count(*) FILTER (WHERE kind = 'channel') AS channel_posts
    FROM messages GROUP BY sender
),
mr AS (SELECT recipient AS worker_id, count(*) AS dms_received FROM messages WHERE kind = 'dm' GROUP BY recipient),
t AS (SELECT worker_id, count(*) AS turns FROM turns WHERE phase = 'start' GROUP BY worker_id)
SELECT r.worker_id,
       coalesce(au.prs_authored, 0) AS prs_authored, coalesce(au.prs_merged, 0) AS prs_merged,
       coalesce(mg.merged_own, 0) AS merged_own, coalesce(mg.merged_for_others, 0) AS merged_for_others,
       coalesce(rv.reviews_given, 0) AS reviews_given, coalesce(rv.approvals_given, 0) AS approvals_given,
       coalesce(b.claims, 0) AS claims, coalesce(b.fails, 0) AS fails,
       coalesce(b.board_entries, 0) AS board_entries,
       coalesce(ms.dms_sent, 0) AS dms_sent, coalesce(mr.dms_received, 0) AS dms_received,
       coalesce(ms.channel_posts, 0) AS channel_posts, coalesce(t.turns, 0) AS turns
FROM roster r
LEFT JOIN au USING (worker_id) LEFT JOIN mg USING (worker_id) LEFT JOIN rv USING (worker_id)
LEFT JOIN b USING (worker_id) LEFT JOIN ms USING (worker_id) LEFT JOIN mr USING (worker_id)
LEFT JOIN t USING (worker_id);

-- Role thresholds: settings (redefine role_settings to change them) ...
CREATE OR REPLACE VIEW role_settings AS
SELECT 2 AS integrator_floor, 2 AS reviewer_floor, CAST(2 AS DOUBLE) AS even_share_multiple, 1 AS builder_min_prs;

-- ... and the thresholds they give in this run, relative to it. With N the run's workers (roster), M
-- the run's peer merges (sum of merged_for_others) and R its peer reviews (sum of reviews_given):
--   integrator_min_merges = max(integrator_floor, ceil(even_share_multiple x M / N))
--   reviewer_min_reviews  = max(reviewer_floor,   ceil(even_share_multiple x R / N))
-- that is, by default, at least twice an even share of the run's peer merges (reviews), and at least 2:
-- in a run where one worker merged 12 peers' PRs, one that merged 2 is not an integrator.
CREATE OR REPLACE VIEW role_thresholds AS
WITH t AS (
    SELECT count(*) AS workers, CAST(coalesce(sum(merged_for_others), 0) AS BIGINT) AS peer_merges,
           CAST(coalesce(sum(reviews_given), 0) AS BIGINT) AS peer_reviews
    FROM worker_activity
)
SELECT t.workers, t.peer_merges, t.peer_reviews, s.integrator_floor, s.reviewer_floor, s.even_share_multiple,
       greatest(s.integrator_floor,
                coalesce(CAST(ceil(round(s.even_share_multiple * t.peer_merges / nullif(t.workers, 0), 9)) AS BIGINT), 0))
           AS integrator_min_merges,
       greatest(s.reviewer_floor,
                coalesce(CAST(ceil(round(s.even_share_multiple * t.peer_reviews / nullif(t.workers, 0), 9)) AS BIGINT), 0))
           AS reviewer_min_reviews,
       s.builder_min_prs
FROM t, role_settings s;

-- One row per worker: its activity (view worker_activity) and its role. Primary role, first that holds:
--   integrator  merged_for_others >= integrator_min_merges and >= prs_authored
--   reviewer    reviews_given >= reviewer_min_reviews and >= prs_authored
--   builder     prs_authored >= builder_min_prs (1)
--   scout       no PR of its own, but board entries, DMs, channel posts, or merges or reviews of peers'
--               PRs below the thresholds above
--   idle        none of the above (turns alone do not count; a worker that never started is idle)
-- labels: every role whose threshold alone holds (integrator, reviewer, builder), else the primary role.
CREATE OR REPLACE VIEW workers AS
WITH r AS (
    SELECT w.*,
           CASE WHEN merged_for_others >= integrator_min_merges AND merged_for_others >= prs_authored THEN 'integrator'
                WHEN reviews_given >= reviewer_min_reviews AND reviews_given >= prs_authored THEN 'reviewer'
                WHEN prs_authored >= builder_min_prs THEN 'builder'
                WHEN board_entries + dms_sent + channel_posts + merged_for_others + reviews_given > 0 THEN 'scout'
                ELSE 'idle' END AS role,
           concat_ws(' ',
                CASE WHEN merged_for_others >= integrator_min_merges THEN 'integrator' END,
                CASE WHEN reviews_given >= reviewer_min_reviews THEN 'reviewer' END,
                CASE WHEN prs_authored >= builder_min_prs THEN 'builder' END) AS labels
    FROM worker_activity w, role_thresholds
)
SELECT * REPLACE (CASE WHEN labels = '' THEN role ELSE labels END AS labels) FROM r;

-- Organizational efficiency (issue 30): what duplicated_work.sql, pr_work.sql and efficiency.sql read.

-- Pairs of PRs by different authors that duplicate work, one row per pair (pr_a < pr_b) and file:
-- reason (same new file | same lines | same function), overlap_lines, functions. The rules are
-- duplicated_work.sql's (its header says them); the view lets efficiency.sql count the same pairs.
CREATE OR REPLACE VIEW pr_duplicate_pairs AS
WITH snap AS (SELECT pr, arg_min(event_id, ts) AS ev FROM pr_changes GROUP BY pr),
ch AS (
    SELECT c.*, p.author FROM pr_changes c JOIN snap s ON c.pr = s.pr AND c.event_id = s.ev
    JOIN prs p ON p.pr = c.pr
    WHERE p.author IS NOT NULL
),
added AS (SELECT DISTINCT pr, author, path FROM ch WHERE status = 'added'),
edits AS (SELECT pr, author, path, old_start, old_lines, function FROM ch WHERE old_lines > 0),
hits AS (
    SELECT a.pr AS pr_a, a.author AS author_a, b.pr AS pr_b, b.author AS author_b, a.path,
           1 AS rank, 0 AS overlap, NULL AS function
    FROM added a JOIN added b ON a.path = b.path AND a.pr < b.pr AND a.author <> b.author
    UNION ALL
    SELECT a.pr, a.author, b.pr, b.author, a.path, 2,
           least(a.old_start + a.old_lines, b.old_start + b.old_lines) - greatest(a.old_start, b.old_start),
           NULL
    FROM edits a JOIN edits b
      ON a.path = b.path AND a.pr < b.pr AND a.author <> b.author
     AND a.old_start < b.old_start + b.old_lines AND b.old_start < a.old_start + a.old_lines
    UNION ALL
    SELECT a.pr, a.author, b.pr, b.author, a.path, 3, 0, a.function
    FROM edits a JOIN edits b
      ON a.path = b.path AND a.function = b.function AND a.pr < b.pr AND a.author <> b.author
    WHERE a.function <> ''
)
SELECT pr_a, author_a, pr_b, author_b, path,
       CASE min(rank) WHEN 1 THEN 'same new file' WHEN 2 THEN 'same lines' ELSE 'same function' END AS reason,
       CAST(sum(overlap) AS BIGINT) AS overlap_lines,
       string_agg(DISTINCT function, '; ' ORDER BY function) AS functions
FROM hits
GROUP BY pr_a, author_a, pr_b, author_b, path;

-- One row per PR with a known author: the work its author put into it, and whether that work was on a
-- feature someone else merged.
--   work_start  when its author started on it: the latest of the author's latest CLAIM before the PR was
--               opened, the author's previous PR's opening, and the author's latest start or restart
--               (lifecycle) before it; null for a PR with no pr_opened event
--   work_end    when that work ended: the PR's merge, else its closing, else the schedule's end; at most
--               the schedule's end (stopping and final scoring are not work)
--   work_s      schedule seconds between the two (a worker holding several PRs open at once counts the
--               time in each)
--   duplicate_of  the PR by another author it duplicates work with (view pr_duplicate_pairs) that was
--               merged, this PR being unmerged or merged after it (the earliest merged such PR); null when
--               none: its work was not on a feature someone else merged
CREATE OR REPLACE VIEW pr_work AS
WITH p AS (
    SELECT pr, author, state, opened_ts, merged_ts, closed_ts,
           lag(opened_ts) OVER (PARTITION BY author ORDER BY opened_ts, pr) AS prev_opened
    FROM prs WHERE author IS NOT NULL
),
cl AS (SELECT worker_id, ts FROM board WHERE type = 'CLAIM' AND worker_id IS NOT NULL),
up AS (SELECT worker_id, ts FROM lifecycle WHERE event IN ('started', 'restarted') AND worker_id IS NOT NULL),
s AS (
    SELECT c.*, up.ts AS up_ts FROM (
        SELECT p.*, cl.ts AS claimed_ts FROM p ASOF LEFT JOIN cl ON cl.worker_id = p.author AND cl.ts <= p.opened_ts
    ) c ASOF LEFT JOIN up ON up.worker_id = c.author AND up.ts <= c.opened_ts
),
pairs AS (
    SELECT pr_a AS pr, pr_b AS other FROM pr_duplicate_pairs
    UNION SELECT pr_b, pr_a FROM pr_duplicate_pairs
),
dup AS (
    SELECT s.pr, arg_min(o.pr, o.merged_ts) AS duplicate_of
    FROM s JOIN pairs ON pairs.pr = s.pr JOIN prs o ON o.pr = pairs.other
    WHERE o.state = 'merged' AND o.author IS DISTINCT FROM s.author
      AND (s.state <> 'merged' OR o.merged_ts < s.merged_ts OR (o.merged_ts = s.merged_ts AND o.pr < s.pr))
    GROUP BY s.pr
),
w AS (
    SELECT s.pr, s.author, s.state, s.opened_ts,
           CASE WHEN s.opened_ts IS NOT NULL THEN greatest(s.claimed_ts, s.prev_opened, s.up_ts) END AS start0,
           least(coalesce(s.merged_ts, s.closed_ts, r.schedule_ended, r.ended), r.schedule_ended) AS work_end
    FROM s, run_info r
)
SELECT w.pr, w.author, w.state, coalesce(w.start0, w.opened_ts) AS work_start, w.work_end,
       greatest(0.0, sched_dur_s(coalesce(w.start0, w.opened_ts), w.work_end)) AS work_s, dup.duplicate_of
FROM w LEFT JOIN dup USING (pr);
