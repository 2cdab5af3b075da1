-- Role thresholds: how this run's roles (roles.sql) were decided, exactly as computed. One row.
-- workers: the run's workers; peer_merges: merges of a peer's PR by the run's workers; peer_reviews:
-- (reviewer, peer's PR) pairs. integrator_min_merges = max(integrator_floor, ceil(even_share_multiple
-- x peer_merges / workers)); reviewer_min_reviews likewise with peer_reviews; builder_min_prs: PRs
-- authored to be a builder. The floors and the multiple are settings (view role_settings).
SELECT workers, peer_merges, peer_reviews, integrator_floor, reviewer_floor, even_share_multiple,
       integrator_min_merges, reviewer_min_reviews, builder_min_prs
FROM role_thresholds;
