-- Merges: the PR funnel and how PRs got merged. One row, from view prs (one row per PR: its author is
-- whoever opened it, its merger the actor of its first merge).
-- opened -> merged | closed_unmerged | open_at_end (still open at the run's end, or now for a live
-- run); merged_by_author vs merged_by_peer (the merger is not the PR's author); merged_unattributed:
-- merged, but the merger or the author is unknown (a row without an actor), so neither;
-- merged_without_review: merged with no review by anyone but the author (forge kind pr_reviewed);
-- merged_without_approval: no `approve` review; merge_conflicts: merge_conflict events,
-- prs_with_conflicts: PRs that hit at least one, conflicted_then_merged: of those, merged later;
-- time_to_merge_p50_s / p90_s: opened -> merged, schedule seconds, over merged PRs (linear
-- interpolation between ranks, quantile_cont).
WITH ttm AS (
    SELECT sched_dur_s(opened_ts, merged_ts) AS s FROM prs WHERE state = 'merged' AND opened_ts IS NOT NULL
)
SELECT
    count(*) AS opened,
    count(*) FILTER (WHERE state = 'merged') AS merged,
    count(*) FILTER (WHERE state = 'closed') AS closed_unmerged,
    count(*) FILTER (WHERE state = 'open') AS open_at_end,
    count(*) FILTER (WHERE state = 'merged' AND merged_by = author) AS merged_by_author,
    count(*) FILTER (WHERE state = 'merged' AND merged_by <> author) AS merged_by_peer,
    count(*) FILTER (WHERE state = 'merged' AND (merged_by IS NULL OR author IS NULL)) AS merged_unattributed,
    count(*) FILTER (WHERE state = 'merged' AND reviews = 0) AS merged_without_review,
    count(*) FILTER (WHERE state = 'merged' AND approvals = 0) AS merged_without_approval,
    CAST(coalesce(sum(conflicts), 0) AS BIGINT) AS merge_conflicts,
    count(*) FILTER (WHERE conflicts > 0) AS prs_with_conflicts,
    count(*) FILTER (WHERE conflicts > 0 AND state = 'merged') AS conflicted_then_merged,
    (SELECT quantile_cont(s, 0.5) FROM ttm) AS time_to_merge_p50_s,
    (SELECT quantile_cont(s, 0.9) FROM ttm) AS time_to_merge_p90_s
FROM prs;
