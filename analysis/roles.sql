-- Roles: per worker, what it did and the role that emerged.
-- Counts: PRs authored and merged, own PRs it merged, peers' PRs it merged (integrator work),
-- reviews of peers' PRs it gave (reviewer work), claims, FAILs, board entries, DMs sent and
-- received, channel posts, turns.
-- Roles are decided in views.sql (view `workers`, thresholds in view `role_thresholds`):
--   integrator  merged >= 2 peers' PRs, and at least as many as it authored
--   reviewer    >= 2 reviews of peers' PRs, and at least as many as it authored
--   builder     authored >= 1 PR
--   scout       no PR, but board entries, DMs or channel posts
--   idle        none of the above
-- `role` is the first that holds; `labels` lists every threshold that holds on its own.
SELECT worker_id, role, labels, prs_authored, prs_merged, merged_own, merged_for_others,
       reviews_given, approvals_given, claims, fails, board_entries, dms_sent, dms_received,
       channel_posts, turns
FROM workers
ORDER BY worker_id;
