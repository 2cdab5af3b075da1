-- Cost: tokens in/out and cost per worker, per role and for the run, and cost per merged PR.
-- The calls and their cost: view charged_calls (views.sql: the gateway's calls, else the agents' usage
-- priced by the price table or as reported; a call with no price has a null cost, unknown, never $0).
-- cost_usd is null (unknown) when any call of the row has no price: known_cost_usd is the part that is
-- known, unpriced_calls how many calls have no price (of calls). cost_basis says which: price table |
-- agent-reported | mixed | gateway | partial (some calls have no price: cost unknown, known_cost_usd a
-- lower bound) | none (no calls).
-- Every call counts in the run's total: calls with no worker, or by someone not among the run's
-- workers, are their own worker lines with role 'unattributed'.
-- Roles: view `workers` (see roles.sql). merged_prs: merged PRs authored by the worker(s) (for the
-- run: every merged PR); cost_per_merged_pr = cost_usd / merged_prs (null when none merged, when no
-- call was recorded: cost_basis 'none' is no cost known, not a cost of 0, or when the cost is unknown).
-- level: run (one row), role (one per role present), worker (one per worker, plus unattributed).
WITH u AS (
    SELECT worker_id, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
           sum(reported_cost_usd) AS reported_cost_usd, coalesce(sum(cost_usd), 0) AS cost_usd,
           count(*) AS calls, count(*) FILTER (WHERE priced) AS priced_calls,
           count(*) FILTER (WHERE unpriced) AS unpriced_calls,
           count(*) FILTER (WHERE via_gateway) AS gateway_calls
    FROM charged_calls GROUP BY worker_id
),
w AS (
    SELECT coalesce(w.worker_id, u.worker_id) AS worker_id, coalesce(w.role, 'unattributed') AS role,
           w.worker_id IS NOT NULL AS is_worker, coalesce(w.prs_merged, 0) AS prs_merged,
           coalesce(u.input_tokens, 0) AS input_tokens, coalesce(u.output_tokens, 0) AS output_tokens,
           coalesce(u.reported_cost_usd, 0) AS reported_cost_usd, coalesce(u.cost_usd, 0) AS cost_usd,
           coalesce(u.calls, 0) AS calls, coalesce(u.priced_calls, 0) AS priced_calls,
           coalesce(u.unpriced_calls, 0) AS unpriced_calls, coalesce(u.gateway_calls, 0) AS gateway_calls
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
        sum(cost_usd) AS known_cost_usd,
        CAST(sum(calls) AS BIGINT) AS calls,
        CAST(sum(unpriced_calls) AS BIGINT) AS unpriced_calls,
        CASE WHEN coalesce(sum(calls), 0) = 0 THEN 'none' WHEN sum(unpriced_calls) > 0 THEN 'partial'
             WHEN sum(gateway_calls) = sum(calls) THEN 'gateway'
             WHEN sum(priced_calls) = sum(calls) THEN 'price table'
             WHEN sum(priced_calls) = 0 THEN 'agent-reported' ELSE 'mixed' END AS cost_basis,
        CAST(sum(prs_merged) AS BIGINT) AS merged_prs
    FROM w
    GROUP BY GROUPING SETS ((worker_id, role), (role), ())
),
g2 AS (
    SELECT *, CASE WHEN coalesce(unpriced_calls, 0) = 0 THEN coalesce(known_cost_usd, 0) END AS cost_usd,
           CASE WHEN level = 'run' THEN (SELECT count(*) FROM prs WHERE state = 'merged') ELSE coalesce(merged_prs, 0) END
               AS merged
    FROM g
)
SELECT level, worker_id, role, workers, coalesce(input_tokens, 0) AS input_tokens,
       coalesce(output_tokens, 0) AS output_tokens, coalesce(reported_cost_usd, 0) AS reported_cost_usd,
       cost_usd, cost_basis, merged AS merged_prs,
       CASE WHEN cost_basis <> 'none' THEN cost_usd / nullif(merged, 0) END AS cost_per_merged_pr,
       coalesce(known_cost_usd, 0) AS known_cost_usd, coalesce(calls, 0) AS calls,
       coalesce(unpriced_calls, 0) AS unpriced_calls
FROM g2
ORDER BY CASE level WHEN 'run' THEN 0 WHEN 'role' THEN 1 ELSE 2 END, coalesce(worker_id, role), role;
