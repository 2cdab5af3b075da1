-- The views every question file (analysis/*.sql) reads.
--
-- In the DuckDB CLI, set the run folder (and optionally the price table), then read this file:
--   SET VARIABLE run_dir = 'runs/20261129T181500Z';
--   SET VARIABLE prices = 'analysis/prices.csv';
--   .read analysis/views.sql
--   .read analysis/merges.sql
-- In the CLI every table must have at least one Parquet file (agensh_ray.trace.write_schema_files
-- writes an empty _schema.parquet per table); agensh_ray.analysis.views.connect() (Python) needs none: it
-- gives a table the run never wrote an empty view with the right columns.
--
-- Times: `ts` columns are UTC timestamps. Durations in the question files are *schedule
-- seconds*: wall seconds x the run's time_scale (so a sim run compressed 120x reads like the
-- run it simulates; for a real run time_scale is 1). sched_s(ts) is seconds since the run started.

-- BEGIN GENERATED TABLE VIEWS
CREATE OR REPLACE VIEW board AS
SELECT run_id, ts, worker_id, event_id, schema_version, seq, type, text, has_detail FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS BIGINT) AS seq, CAST(NULL AS VARCHAR) AS type, CAST(NULL AS VARCHAR) AS text, CAST(NULL AS BOOLEAN) AS has_detail WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/board/*.parquet', union_by_name = true)
);

CREATE OR REPLACE VIEW messages AS
SELECT run_id, ts, worker_id, event_id, schema_version, seq, kind, sender, recipient, text FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS BIGINT) AS seq, CAST(NULL AS VARCHAR) AS kind, CAST(NULL AS VARCHAR) AS sender, CAST(NULL AS VARCHAR) AS recipient, CAST(NULL AS VARCHAR) AS text WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/messages/*.parquet', union_by_name = true)
);

CREATE OR REPLACE VIEW forge AS
SELECT run_id, ts, worker_id, event_id, schema_version, seq, kind, pr, pr_author, ref, detail, verdict FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS BIGINT) AS seq, CAST(NULL AS VARCHAR) AS kind, CAST(NULL AS BIGINT) AS pr, CAST(NULL AS VARCHAR) AS pr_author, CAST(NULL AS VARCHAR) AS ref, CAST(NULL AS VARCHAR) AS detail, CAST(NULL AS VARCHAR) AS verdict WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/forge/*.parquet', union_by_name = true)
);

CREATE OR REPLACE VIEW turns AS
SELECT run_id, ts, worker_id, event_id, schema_version, turn, phase, trigger, stop_reason, duration_ms FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS BIGINT) AS turn, CAST(NULL AS VARCHAR) AS phase, CAST(NULL AS VARCHAR) AS trigger, CAST(NULL AS VARCHAR) AS stop_reason, CAST(NULL AS DOUBLE) AS duration_ms WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/turns/*.parquet', union_by_name = true)
);

CREATE OR REPLACE VIEW tool_calls AS
SELECT run_id, ts, worker_id, event_id, schema_version, tool, source, tool_call_id, duration_ms, ok, error, turn FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS VARCHAR) AS tool, CAST(NULL AS VARCHAR) AS source, CAST(NULL AS VARCHAR) AS tool_call_id, CAST(NULL AS DOUBLE) AS duration_ms, CAST(NULL AS BOOLEAN) AS ok, CAST(NULL AS VARCHAR) AS error, CAST(NULL AS BIGINT) AS turn WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/tool_calls/*.parquet', union_by_name = true)
);

CREATE OR REPLACE VIEW usage AS
SELECT run_id, ts, worker_id, event_id, schema_version, turn, input_tokens, output_tokens, cost_usd FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS BIGINT) AS turn, CAST(NULL AS BIGINT) AS input_tokens, CAST(NULL AS BIGINT) AS output_tokens, CAST(NULL AS DOUBLE) AS cost_usd WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/usage/*.parquet', union_by_name = true)
);

CREATE OR REPLACE VIEW deliveries AS
SELECT run_id, ts, worker_id, event_id, schema_version, kind, priority, via, enqueue_ts, latency_ms FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS VARCHAR) AS kind, CAST(NULL AS VARCHAR) AS priority, CAST(NULL AS VARCHAR) AS via, CAST(NULL AS TIMESTAMPTZ) AS enqueue_ts, CAST(NULL AS DOUBLE) AS latency_ms WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/deliveries/*.parquet', union_by_name = true)
);

CREATE OR REPLACE VIEW scores AS
SELECT run_id, ts, worker_id, event_id, schema_version, checkpoint, commit, passed, total, pass_rate, schedule_s, not_run, error_code, eval_json FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS VARCHAR) AS checkpoint, CAST(NULL AS VARCHAR) AS commit, CAST(NULL AS BIGINT) AS passed, CAST(NULL AS BIGINT) AS total, CAST(NULL AS DOUBLE) AS pass_rate, CAST(NULL AS DOUBLE) AS schedule_s, CAST(NULL AS BIGINT) AS not_run, CAST(NULL AS VARCHAR) AS error_code, CAST(NULL AS VARCHAR) AS eval_json WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/scores/*.parquet', union_by_name = true)
);

CREATE OR REPLACE VIEW test_results AS
SELECT run_id, ts, worker_id, event_id, schema_version, checkpoint, commit, branch, test, status, ignored FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS VARCHAR) AS checkpoint, CAST(NULL AS VARCHAR) AS commit, CAST(NULL AS VARCHAR) AS branch, CAST(NULL AS VARCHAR) AS test, CAST(NULL AS VARCHAR) AS status, CAST(NULL AS BOOLEAN) AS ignored WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/test_results/*.parquet', union_by_name = true)
);

CREATE OR REPLACE VIEW lifecycle AS
SELECT run_id, ts, worker_id, event_id, schema_version, event, detail, host, pid FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS VARCHAR) AS event, CAST(NULL AS VARCHAR) AS detail, CAST(NULL AS VARCHAR) AS host, CAST(NULL AS BIGINT) AS pid WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/lifecycle/*.parquet', union_by_name = true)
);

CREATE OR REPLACE VIEW pr_changes AS
SELECT run_id, ts, worker_id, event_id, schema_version, pr, pr_author, snapshot, path, status, old_start, old_lines, new_start, new_lines, function FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS BIGINT) AS pr, CAST(NULL AS VARCHAR) AS pr_author, CAST(NULL AS VARCHAR) AS snapshot, CAST(NULL AS VARCHAR) AS path, CAST(NULL AS VARCHAR) AS status, CAST(NULL AS BIGINT) AS old_start, CAST(NULL AS BIGINT) AS old_lines, CAST(NULL AS BIGINT) AS new_start, CAST(NULL AS BIGINT) AS new_lines, CAST(NULL AS VARCHAR) AS function WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/pr_changes/*.parquet', union_by_name = true)
);

CREATE OR REPLACE VIEW intake AS
SELECT run_id, ts, worker_id, event_id, schema_version, source, reason, delivery FROM (
    SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS VARCHAR) AS worker_id, CAST(NULL AS VARCHAR) AS event_id, CAST(NULL AS BIGINT) AS schema_version, CAST(NULL AS VARCHAR) AS source, CAST(NULL AS VARCHAR) AS reason, CAST(NULL AS VARCHAR) AS delivery WHERE false
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('run_dir') || '/trace/intake/*.parquet', union_by_name = true)
);
-- END GENERATED TABLE VIEWS

-- Run settings from config.json (connect() substitutes time_scale 1 when it is missing).
CREATE OR REPLACE VIEW run_config AS
SELECT CAST(workers AS BIGINT) AS workers, CAST(harness AS VARCHAR) AS harness,
       CAST(coalesce(time_scale, 1.0) AS DOUBLE) AS time_scale, CAST(minutes AS DOUBLE) AS minutes
FROM read_json_auto(getvariable('run_dir') || '/config.json');

-- The run: id, first and last event of the lifecycle, scores and forge tables (small tables, so
-- this is cheap; a live run ends at its latest event so far), workers (from config.json, else
-- those with lifecycle rows), time scale, harness.
CREATE OR REPLACE VIEW run_info AS
WITH span AS (
    SELECT min(ts) AS lo, max(ts) AS hi FROM lifecycle
    UNION ALL SELECT min(ts), max(ts) FROM scores
    UNION ALL SELECT min(ts), max(ts) FROM forge
)
SELECT
    coalesce((SELECT any_value(run_id) FROM lifecycle), (SELECT any_value(run_id) FROM scores),
             regexp_extract(getvariable('run_dir'), '([^/]+)/*$', 1)) AS run_id,
    (SELECT min(lo) FROM span) AS started,
    (SELECT max(hi) FROM span) AS ended,
    coalesce(c.workers, (SELECT count(DISTINCT worker_id) FROM lifecycle)) AS workers,
    c.harness,
    c.time_scale
FROM run_config c;

-- Schedule seconds since the run started, and between two timestamps.
CREATE OR REPLACE MACRO sched_s(t) AS
    (epoch(t) - (SELECT epoch(started) FROM run_info)) * (SELECT time_scale FROM run_info);
CREATE OR REPLACE MACRO sched_dur_s(a, b) AS
    (epoch(b) - epoch(a)) * (SELECT time_scale FROM run_info);

-- The price table (a setting): USD per million tokens, by model or harness name.
CREATE OR REPLACE VIEW prices AS
SELECT CAST(model AS VARCHAR) AS model, CAST(input_usd_per_mtok AS DOUBLE) AS input_usd_per_mtok,
       CAST(output_usd_per_mtok AS DOUBLE) AS output_usd_per_mtok
FROM read_csv(coalesce(getvariable('prices'), 'analysis/prices.csv'), header = true, all_varchar = true);

-- One row per pull request, from the forge events. A review is a pr_reviewed event by someone
-- other than the PR's author (the author may only leave `comment` reviews on their own PR);
-- state at the end: merged | closed (unmerged) | open.
CREATE OR REPLACE VIEW prs AS
SELECT
    pr,
    coalesce(max(pr_author), arg_min(worker_id, ts) FILTER (WHERE kind = 'pr_opened')) AS author,
    min(ts) FILTER (WHERE kind = 'pr_opened') AS opened_ts,
    min(ts) FILTER (WHERE kind = 'pr_merged') AS merged_ts,
    arg_min(worker_id, ts) FILTER (WHERE kind = 'pr_merged') AS merged_by,
    min(ts) FILTER (WHERE kind = 'pr_closed') AS closed_ts,
    arg_min(worker_id, ts) FILTER (WHERE kind = 'pr_closed') AS closed_by,
    count(*) FILTER (WHERE kind = 'pr_reviewed' AND worker_id IS DISTINCT FROM pr_author) AS reviews,
    count(*) FILTER (WHERE kind = 'pr_reviewed' AND worker_id IS DISTINCT FROM pr_author
                     AND coalesce(verdict, trim(split_part(detail, ':', 1))) = 'approve') AS approvals,
    count(*) FILTER (WHERE kind = 'pr_commented') AS comments,
    count(*) FILTER (WHERE kind = 'merge_conflict') AS conflicts,
    count(*) FILTER (WHERE kind = 'push') AS pushes,
    CASE WHEN count(*) FILTER (WHERE kind = 'pr_merged') > 0 THEN 'merged'
         WHEN count(*) FILTER (WHERE kind = 'pr_closed') > 0 THEN 'closed'
         ELSE 'open' END AS state
FROM forge
WHERE pr IS NOT NULL
GROUP BY pr;

-- Role thresholds (settings; redefine this view to change them).
CREATE OR REPLACE VIEW role_thresholds AS
SELECT 2 AS integrator_min_merges, 2 AS reviewer_min_reviews, 1 AS builder_min_prs;

-- One row per worker: what it did, and its role.
--   prs_authored       PRs it opened;  prs_merged: of those, merged (by anyone)
--   merged_own         its own PRs it merged itself;  merged_for_others: peers' PRs it merged
--   reviews_given      reviews of peers' PRs;  approvals_given: of those, approvals
--   claims, fails      CLAIM and FAIL board entries;  board_entries: all its board entries
--   dms_sent/received, channel_posts, turns (turns started)
-- Primary role, first that holds:
--   integrator  merged_for_others >= integrator_min_merges (2) and >= prs_authored
--   reviewer    reviews_given >= reviewer_min_reviews (2) and >= prs_authored
--   builder     prs_authored >= builder_min_prs (1)
--   scout       no PR, but board entries, DMs or channel posts
--   idle        none of the above
-- labels: every role whose threshold alone holds (integrator, reviewer, builder), else the primary role.
CREATE OR REPLACE VIEW workers AS
WITH ids AS (
    SELECT worker_id FROM lifecycle UNION SELECT worker_id FROM forge UNION SELECT worker_id FROM board
    UNION SELECT sender FROM messages UNION SELECT worker_id FROM turns
),
f AS (
    SELECT worker_id,
           count(*) FILTER (WHERE kind = 'pr_opened') AS prs_authored,
           count(*) FILTER (WHERE kind = 'pr_merged' AND worker_id = pr_author) AS merged_own,
           count(*) FILTER (WHERE kind = 'pr_merged' AND worker_id IS DISTINCT FROM pr_author) AS merged_for_others,
           count(*) FILTER (WHERE kind = 'pr_reviewed' AND worker_id IS DISTINCT FROM pr_author) AS reviews_given,
           count(*) FILTER (WHERE kind = 'pr_reviewed' AND worker_id IS DISTINCT FROM pr_author
                            AND coalesce(verdict, trim(split_part(detail, ':', 1))) = 'approve') AS approvals_given
    FROM forge GROUP BY worker_id
),
p AS (SELECT author AS worker_id, count(*) FILTER (WHERE state = 'merged') AS prs_merged FROM prs GROUP BY author),
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
t AS (SELECT worker_id, count(*) AS turns FROM turns WHERE phase = 'start' GROUP BY worker_id),
w AS (
    SELECT ids.worker_id,
           coalesce(f.prs_authored, 0) AS prs_authored, coalesce(p.prs_merged, 0) AS prs_merged,
           coalesce(f.merged_own, 0) AS merged_own, coalesce(f.merged_for_others, 0) AS merged_for_others,
           coalesce(f.reviews_given, 0) AS reviews_given, coalesce(f.approvals_given, 0) AS approvals_given,
           coalesce(b.claims, 0) AS claims, coalesce(b.fails, 0) AS fails,
           coalesce(b.board_entries, 0) AS board_entries,
           coalesce(ms.dms_sent, 0) AS dms_sent, coalesce(mr.dms_received, 0) AS dms_received,
           coalesce(ms.channel_posts, 0) AS channel_posts, coalesce(t.turns, 0) AS turns
    FROM ids
    LEFT JOIN f USING (worker_id) LEFT JOIN p USING (worker_id) LEFT JOIN b USING (worker_id)
    LEFT JOIN ms USING (worker_id) LEFT JOIN mr USING (worker_id) LEFT JOIN t USING (worker_id)
    WHERE ids.worker_id IS NOT NULL
),
r AS (
    SELECT w.*,
           CASE WHEN merged_for_others >= integrator_min_merges AND merged_for_others >= prs_authored THEN 'integrator'
                WHEN reviews_given >= reviewer_min_reviews AND reviews_given >= prs_authored THEN 'reviewer'
                WHEN prs_authored >= builder_min_prs THEN 'builder'
                WHEN board_entries + dms_sent + channel_posts > 0 THEN 'scout'
                ELSE 'idle' END AS role,
           concat_ws(' ',
                CASE WHEN merged_for_others >= integrator_min_merges THEN 'integrator' END,
                CASE WHEN reviews_given >= reviewer_min_reviews THEN 'reviewer' END,
                CASE WHEN prs_authored >= builder_min_prs THEN 'builder' END) AS labels
    FROM w, role_thresholds
)
SELECT * REPLACE (CASE WHEN labels = '' THEN role ELSE labels END AS labels) FROM r;
