-- Organizational efficiency (issue 30): how much the organization got done for the worker time it had.
-- One row. Worker time is up time (view worker_up: as idle.sql counts it, per life, a host's death
-- included), counted until the run's last merge (the schedule's end when nothing merged).
--   workers, merged_prs; features_merged: merged PRs that do not duplicate an earlier-merged peer's
--   (view pr_work's duplicate_of); last_merge_s: schedule seconds to the last merge (null: none)
--   worker_hours: the workers' up time until the last merge, schedule hours;
--   features_per_worker_hour = features_merged / worker_hours
--   time_to_50_s / time_to_90_s / time_to_100_s: schedule seconds to the first scoring of main with at
--   least that share of the hidden tests (as score_milestones.sql times it; null: never reached)
--   pr_work_hours: hours authors spent on PRs (pr_work.sql); duplicate_work_hours: of those, on PRs whose
--   feature another worker merged (duplicate_of not null); duplicate_work_share = their ratio
--   merge_conflicts (forge merge_conflict events) and conflicts_per_merged_pr = merge_conflicts / merged_prs
--   idle_share: the share of the workers' up time until the last merge spent outside turns (view
--   worker_busy: a turn runs from its start to its end row of the same life, within its up interval; cut
--   at the worker's next turn start)
--   messages (DMs and channel posts), board_entries, and each per merged feature
--   agent_tool_median_ms / server_tool_median_ms: the median call of our MCP tools as the agent waited
--   for it (tool_calls source 'agent', a title ending in a tool name the server served) and as the tool
--   server served it (source 'mcp'), wall ms; tool_latency_ratio = agent / server (null when a side has
--   no call): the lag of the agents behind their own schedule (summary.json's `clock` has the run's own
--   measure when the run recorded one: agensh_ray.analysis.efficiency reads it first).
WITH cut AS (  -- the last merge, else the schedule's end
    SELECT coalesce((SELECT max(merged_ts) FROM prs WHERE state = 'merged'), (SELECT schedule_ended FROM run_info)) AS t
),
up_s AS (
    SELECT coalesce(sum(sched_dur_s(t0, least(t1, (SELECT t FROM cut)))), 0) AS s
    FROM worker_up WHERE t1 > t0 AND t0 < (SELECT t FROM cut)
),
busy AS (  -- turns inside up intervals, each cut at the worker's next turn start (a lost end row overlaps none)
    SELECT t0, least(t1, coalesce(lead(t0) OVER (PARTITION BY worker_id ORDER BY t0), 'infinity'::TIMESTAMPTZ),
                     (SELECT t FROM cut)) AS t1
    FROM worker_busy WHERE iv IS NOT NULL
),
busy_s AS (SELECT coalesce(sum(sched_dur_s(t0, t1)), 0) AS s FROM busy WHERE t1 > t0),
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
