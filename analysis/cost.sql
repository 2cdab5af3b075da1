-- Cost: tokens in/out and cost per worker, per role and for the run, and cost per merged PR.
-- A run whose agents went through the model gateway (table llm_calls has rows): tokens and cost are
-- the gateway's own count, the sum of llm_calls per worker (the provider's usage fields, priced by the
-- model that answered: LiteLLM's price map or the run's override; input_tokens include cached ones).
-- Otherwise, as follows.
-- Tokens: table usage (what the agent reports; the sim agent reports none, so sim runs cost 0).
-- Price: the price table (view `prices`, a setting: analysis/prices.csv by default, USD per
-- million tokens) row whose model is the run's harness; cost_usd = input_tokens x input price +
-- output_tokens x output price. When the table has no row for the harness, cost_usd is the cost
-- the agent reported (reported_cost_usd).
-- Roles: view `workers` (see roles.sql). merged_prs: PRs authored by the worker(s) that merged;
-- cost_per_merged_pr = cost_usd / merged_prs (null when none merged).
-- level: run (one row), role (one per role present), worker (one per worker).
WITH gw AS (
    SELECT worker_id, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
           sum(coalesce(cost_usd, 0)) AS cost_usd
    FROM llm_calls GROUP BY worker_id
),
via_gateway AS (SELECT count(*) > 0 AS yes FROM llm_calls),
u AS (
    SELECT worker_id, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
           sum(cost_usd) AS reported_cost_usd
    FROM usage GROUP BY worker_id
),
price AS (SELECT p.* FROM run_info r JOIN prices p ON p.model = r.harness LIMIT 1),
w AS (
    SELECT w.worker_id, w.role, w.prs_merged,
           CASE WHEN (SELECT yes FROM via_gateway) THEN coalesce(gw.input_tokens, 0)
                ELSE coalesce(u.input_tokens, 0) END AS input_tokens,
           CASE WHEN (SELECT yes FROM via_gateway) THEN coalesce(gw.output_tokens, 0)
                ELSE coalesce(u.output_tokens, 0) END AS output_tokens,
           coalesce(u.reported_cost_usd, 0) AS reported_cost_usd,
           CASE WHEN (SELECT yes FROM via_gateway) THEN coalesce(gw.cost_usd, 0)
                ELSE coalesce((SELECT (coalesce(u.input_tokens, 0) * input_usd_per_mtok
                                       + coalesce(u.output_tokens, 0) * output_usd_per_mtok) / 1e6 FROM price),
                              coalesce(u.reported_cost_usd, 0)) END AS cost_usd
    FROM workers w LEFT JOIN u USING (worker_id) LEFT JOIN gw USING (worker_id)
)
SELECT
    CASE WHEN grouping(worker_id) = 0 THEN 'worker' WHEN grouping(role) = 0 THEN 'role' ELSE 'run' END AS level,
    CASE WHEN grouping(worker_id) = 0 THEN worker_id END AS worker_id,
    CASE WHEN grouping(role) = 0 THEN role END AS role,
    count(*) AS workers,
    CAST(coalesce(sum(input_tokens), 0) AS BIGINT) AS input_tokens,
    CAST(coalesce(sum(output_tokens), 0) AS BIGINT) AS output_tokens,
    coalesce(sum(reported_cost_usd), 0) AS reported_cost_usd,
    coalesce(sum(cost_usd), 0) AS cost_usd,
    CAST(coalesce(sum(prs_merged), 0) AS BIGINT) AS merged_prs,
    sum(cost_usd) / nullif(sum(prs_merged), 0) AS cost_per_merged_pr
FROM w
GROUP BY GROUPING SETS ((worker_id, role), (role), ())
ORDER BY CASE level WHEN 'run' THEN 0 WHEN 'role' THEN 1 ELSE 2 END, coalesce(worker_id, role);
