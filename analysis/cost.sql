-- Cost: tokens in/out and cost per worker, per role and for the run, and cost per merged PR.
-- calls: one row per charged model call and the model that prices it. Here, table usage: tokens as
-- the agent reports them, one row per turn (the sim agent reports none, so sim runs cost 0); its rows
-- name no model, so they are priced by the price-table row named like the run's harness. (Only this
-- CTE knows where calls come from: a table of the model requests themselves slots in here.)
-- Price: view `prices` (analysis/prices.csv by default, USD per million tokens): cost_usd =
-- input_tokens x input price + output_tokens x output price; a call whose model has no price row costs
-- what the agent reported (reported_cost_usd). cost_basis says which: price table | agent-reported |
-- mixed | none (no calls).
-- Every call counts in the run's total: calls with no worker, or by someone not among the run's
-- workers, are their own worker lines with role 'unattributed'.
-- Roles: view `workers` (see roles.sql). merged_prs: merged PRs authored by the worker(s) (for the
-- run: every merged PR); cost_per_merged_pr = cost_usd / merged_prs (null when none merged, or when no
-- call was recorded: cost_basis 'none' is no cost known, not a cost of 0).
-- level: run (one row), role (one per role present), worker (one per worker, plus unattributed).
WITH calls AS (
    SELECT u.worker_id, r.harness AS model, u.input_tokens, u.output_tokens, u.cost_usd AS reported_cost_usd
    FROM usage u, run_info r
),
priced AS (
    SELECT c.worker_id, coalesce(c.input_tokens, 0) AS input_tokens, coalesce(c.output_tokens, 0) AS output_tokens,
           coalesce(c.reported_cost_usd, 0) AS reported_cost_usd, p.model IS NOT NULL AS priced,
           CASE WHEN p.model IS NOT NULL
                THEN (coalesce(c.input_tokens, 0) * p.input_usd_per_mtok
                      + coalesce(c.output_tokens, 0) * p.output_usd_per_mtok) / 1e6
                ELSE coalesce(c.reported_cost_usd, 0) END AS cost_usd
    FROM calls c LEFT JOIN prices p ON p.model = c.model
),
u AS (
    SELECT worker_id, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
           sum(reported_cost_usd) AS reported_cost_usd, sum(cost_usd) AS cost_usd,
           count(*) AS calls, count(*) FILTER (WHERE priced) AS priced_calls
    FROM priced GROUP BY worker_id
),
w AS (
    SELECT coalesce(w.worker_id, u.worker_id) AS worker_id, coalesce(w.role, 'unattributed') AS role,
           w.worker_id IS NOT NULL AS is_worker, coalesce(w.prs_merged, 0) AS prs_merged,
           coalesce(u.input_tokens, 0) AS input_tokens, coalesce(u.output_tokens, 0) AS output_tokens,
           coalesce(u.reported_cost_usd, 0) AS reported_cost_usd, coalesce(u.cost_usd, 0) AS cost_usd,
           coalesce(u.calls, 0) AS calls, coalesce(u.priced_calls, 0) AS priced_calls
    FROM workers w FULL OUTER JOIN u ON u.worker_id = w.worker_id
),
g AS (
    SELECT
        CASE WHEN grouping(worker_id) = 0 THEN 'worker' WHEN grouping(role) = 0 THEN 'role' ELSE 'run' END AS level,
        CASE WHEN grouping(worker_id) = 0 THEN worker_id END AS worker_id,
        CASE WHEN grouping(role) = 0 THEN role END AS role,
        count(*) FILTER (WHERE is_worker) AS workers,
        CAST(sum(input_tokens) AS BIGINT) AS input_tokens,
        CAST(sum(output_tokens) AS BIGINT) AS output_tokens,
        sum(reported_cost_usd) AS reported_cost_usd,
        sum(cost_usd) AS cost_usd,
        CASE WHEN coalesce(sum(calls), 0) = 0 THEN 'none' WHEN sum(priced_calls) = sum(calls) THEN 'price table'
             WHEN sum(priced_calls) = 0 THEN 'agent-reported' ELSE 'mixed' END AS cost_basis,
        CAST(sum(prs_merged) AS BIGINT) AS merged_prs
    FROM w
    GROUP BY GROUPING SETS ((worker_id, role), (role), ())
)
SELECT level, worker_id, role, workers, coalesce(input_tokens, 0) AS input_tokens,
       coalesce(output_tokens, 0) AS output_tokens, coalesce(reported_cost_usd, 0) AS reported_cost_usd,
       coalesce(cost_usd, 0) AS cost_usd, cost_basis,
       CASE WHEN level = 'run' THEN (SELECT count(*) FROM prs WHERE state = 'merged') ELSE coalesce(merged_prs, 0) END
           AS merged_prs,
       CASE WHEN cost_basis <> 'none' THEN
           coalesce(cost_usd, 0) / nullif(CASE WHEN level = 'run' THEN (SELECT count(*) FROM prs WHERE state = 'merged')
                                               ELSE merged_prs END, 0) END AS cost_per_merged_pr
FROM g
ORDER BY CASE level WHEN 'run' THEN 0 WHEN 'role' THEN 1 ELSE 2 END, coalesce(worker_id, role), role;
