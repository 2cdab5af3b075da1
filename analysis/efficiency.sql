-- Organizational efficiency (issue 30): how much the organization got done for the worker time it had.
-- One row. Worker time is up time (lifecycle started/restarted -> the next crashed/stopped/gave_up, start
-- or restart, else the run's end), counted until the run's last merge (its end when nothing merged).
--   workers, merged_prs; features_merged: merged PRs that do not duplicate an earlier-merged peer's
--   (view pr_work's duplicate_of); last_merge_s: schedule seconds to the last merge (null: none)
--   worker_hours: the workers' up time until the last merge, schedule hours;
--   features_per_worker_hour = features_merged / worker_hours
--   time_to_50_s / time_to_90_s / time_to_100_s: schedule seconds to the first scoring of main with at
--   least that share of the hidden tests (as score_milestones.sql times it; null: never reached)
--   pr_work_hours: hours authors spent on PRs (pr_work.sql); duplicate_work_hours: of those, on PRs whose
--   feature another worker merged (duplicate_of not null); duplicate_work_share = their ratio
--   merge_conflicts (forge merge_conflict events) and conflicts_per_merged_pr = merge_conflicts / merged_prs
--   idle_share: the share of the workers' up time until the last merge spent outside turns (a turn runs
--   from its start to its end row, cut at the worker's next turn start, its next down event or the run's
--   end)
--   messages (DMs and channel posts), board_entries, and each per merged feature
--   agent_tool_median_ms / server_tool_median_ms: the median call of our MCP tools as the agent waited
--   for it (tool_calls source 'agent', a title ending in a tool name the server served) and as the tool
--   server served it (source 'mcp'), wall ms; tool_latency_ratio = agent / server (null when a side has
--   no call): the lag of the agents behind their own schedule (summary.json's `clock` has the run's own
--   measure when the run recorded one: agensh_ray.analysis.efficiency reads it first).
WITH cut AS (
    SELECT coalesce((SELECT max(merged_ts) FROM prs WHERE state = 'merged'), (SELECT ended FROM run_info)) AS t
),
ups AS (
    SELECT worker_id, ts, lead(ts) OVER (PARTITION BY worker_id ORDER BY ts) AS next_up
    FROM lifecycle WHERE event IN ('started', 'restarted') AND worker_id IS NOT NULL
),
downs AS (SELECT worker_id, ts FROM lifecycle WHERE event IN ('crashed', 'stopped', 'gave_up')),
up_iv AS (
    SELECT u.worker_id, u.ts AS t0,
           least(coalesce(d.ts, (SELECT ended FROM run_info)), coalesce(u.next_up, 'infinity'::TIMESTAMPTZ)) AS t1
    FROM ups u ASOF LEFT JOIN downs d ON u.worker_id = d.worker_id AND d.ts >= u.ts
),
starts AS (
    SELECT worker_id, turn, ts, lead(ts) OVER (PARTITION BY worker_id ORDER BY ts) AS next_start
    FROM turns WHERE phase = 'start' AND worker_id IS NOT NULL
),
ends AS (SELECT worker_id, turn, ts FROM turns WHERE phase = 'end'),
busy0 AS (
    SELECT s.worker_id, s.ts AS t0, s.next_start, e.ts AS end_ts
    FROM starts s ASOF LEFT JOIN ends e ON s.worker_id = e.worker_id AND s.turn = e.turn AND e.ts >= s.ts
),
busy AS (
    SELECT b.worker_id, b.t0,
           least(CASE WHEN b.end_ts <= coalesce(b.next_start, 'infinity'::TIMESTAMPTZ) THEN b.end_ts
                      ELSE 'infinity'::TIMESTAMPTZ END,
                 coalesce(b.next_start, 'infinity'::TIMESTAMPTZ), coalesce(d.ts, 'infinity'::TIMESTAMPTZ),
                 greatest(b.t0, (SELECT ended FROM run_info))) AS t1
    FROM busy0 b ASOF LEFT JOIN downs d ON b.worker_id = d.worker_id AND d.ts >= b.t0
),
up_s AS (
    SELECT coalesce(sum(sched_dur_s(t0, least(t1, (SELECT t FROM cut)))), 0) AS s
    FROM up_iv WHERE t0 < (SELECT t FROM cut)
),
busy_s AS (
    SELECT coalesce(sum(sched_dur_s(t0, least(t1, (SELECT t FROM cut)))), 0) AS s
    FROM busy WHERE t0 < (SELECT t FROM cut)
),
sc AS (SELECT coalesce(schedule_s, sched_s(ts)) AS t_s, pass_rate FROM scores),
merged AS (SELECT count(*) AS n, max(merged_ts) AS last_ts FROM prs WHERE state = 'merged'),
feat AS (SELECT count(*) AS n FROM pr_work WHERE state = 'merged' AND duplicate_of IS NULL),
work AS (
    SELECT coalesce(sum(work_s), 0) / 3600 AS h, coalesce(sum(work_s) FILTER (WHERE duplicate_of IS NOT NULL), 0) / 3600 AS dup_h
    FROM pr_work
),
srv AS (SELECT DISTINCT tool FROM tool_calls WHERE source = 'mcp' AND tool IS NOT NULL),
lag AS (
    SELECT (SELECT median(duration_ms) FROM tool_calls t
            SEMI JOIN srv ON suffix(t.tool, srv.tool)
                AND (length(t.tool) = length(srv.tool)
                     OR NOT regexp_matches(substr(t.tool, length(t.tool) - length(srv.tool), 1), '[[:alnum:]]'))
            WHERE t.source = 'agent') AS agent_ms,
           (SELECT median(duration_ms) FROM tool_calls WHERE source = 'mcp') AS server_ms
)
SELECT
    (SELECT count(*) FROM roster WHERE worker_id IS NOT NULL) AS workers,
    merged.n AS merged_prs,
    feat.n AS features_merged,
    sched_s(merged.last_ts) AS last_merge_s,
    up_s.s / 3600 AS worker_hours,
    feat.n / nullif(up_s.s / 3600, 0) AS features_per_worker_hour,
    (SELECT min(t_s) FROM sc WHERE pass_rate >= 0.5 - 1e-9) AS time_to_50_s,
    (SELECT min(t_s) FROM sc WHERE pass_rate >= 0.9 - 1e-9) AS time_to_90_s,
    (SELECT min(t_s) FROM sc WHERE pass_rate >= 1.0 - 1e-9) AS time_to_100_s,
    work.h AS pr_work_hours,
    work.dup_h AS duplicate_work_hours,
    work.dup_h / nullif(work.h, 0) AS duplicate_work_share,
    CAST((SELECT count(*) FROM forge WHERE kind = 'merge_conflict') AS BIGINT) AS merge_conflicts,
    (SELECT count(*) FROM forge WHERE kind = 'merge_conflict') / nullif(merged.n, 0) AS conflicts_per_merged_pr,
    greatest(0.0, up_s.s - busy_s.s) / nullif(up_s.s, 0) AS idle_share,
    (SELECT count(*) FROM messages) AS messages,
    (SELECT count(*) FROM messages) / nullif(feat.n, 0) AS messages_per_feature,
    (SELECT count(*) FROM board) AS board_entries,
    (SELECT count(*) FROM board) / nullif(feat.n, 0) AS board_entries_per_feature,
    lag.agent_ms AS agent_tool_median_ms,
    lag.server_ms AS server_tool_median_ms,
    lag.agent_ms / nullif(lag.server_ms, 0) AS tool_latency_ratio
FROM merged, feat, up_s, busy_s, work, lag;
