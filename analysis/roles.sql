-- Roles: per worker of the run (every configured worker, one row each, started or not), what it did
-- and the role that emerged.
-- Counts (view worker_activity in views.sql): PRs authored and merged, own PRs it merged, peers' PRs
-- it merged (integrator work), peers' PRs it reviewed (reviewer work), claims, FAILs, board entries,
-- DMs sent and received, channel posts, turns. PRs are distinct PRs, judged by their real author.
-- Roles are decided in views.sql (view `workers`); the thresholds are relative to the run (view
-- role_thresholds, answered by role_thresholds.sql), by default:
--   integrator  merged at least max(2, ceil(2 x the run's peer merges / workers)) peers' PRs, and at
--               least as many as it authored
--   reviewer    reviewed at least max(2, ceil(2 x the run's peer reviews / workers)) peers' PRs, and at
--               least as many as it authored
--   builder     authored >= 1 PR
--   scout       no PR of its own, but board entries, DMs, channel posts, or peers' PRs merged or
--               reviewed below the thresholds
--   idle        none of the above (turns alone do not count; a worker that never started is idle)
-- `role` is the first that holds; `labels` lists every threshold that holds on its own.
SELECT worker_id, role, labels, prs_authored, prs_merged, merged_own, merged_for_others,
       reviews_given, approvals_given, claims, fails, board_entries, dms_sent, dms_received,
       channel_posts, turns
FROM workers
ORDER BY worker_id;
