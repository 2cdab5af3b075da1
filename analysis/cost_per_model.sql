-- Cost per model: one row per model that answered a charged call (view charged_calls: the gateway's
-- calls by the model that answered; without the gateway the agents' usage, named after the run's harness).
-- calls, unpriced_calls (calls with no price: a model no price table knows, or an answer without usage),
-- tokens (input includes cached), known_cost_usd (what the priced calls cost), cost_usd (null when any
-- call of the model has no price: unknown, never $0), share_of_known_cost (of the run's known cost),
-- cost_basis as in cost.sql (gateway | price table | agent-reported | mixed | partial). Most expensive first.
SELECT model, count(*) AS calls, count(*) FILTER (WHERE unpriced) AS unpriced_calls,
       CAST(sum(input_tokens) AS BIGINT) AS input_tokens, CAST(sum(cached_tokens) AS BIGINT) AS cached_tokens,
       CAST(sum(output_tokens) AS BIGINT) AS output_tokens,
       coalesce(sum(cost_usd), 0) AS known_cost_usd,
       CASE WHEN count(*) FILTER (WHERE unpriced) = 0 THEN coalesce(sum(cost_usd), 0) END AS cost_usd,
       coalesce(sum(cost_usd), 0) / nullif((SELECT sum(cost_usd) FROM charged_calls), 0) AS share_of_known_cost,
       CASE WHEN count(*) FILTER (WHERE unpriced) > 0 THEN 'partial'
            WHEN bool_and(via_gateway) THEN 'gateway'
            WHEN bool_and(priced) THEN 'price table'
            WHEN NOT bool_or(priced) THEN 'agent-reported' ELSE 'mixed' END AS cost_basis
FROM charged_calls
GROUP BY model
ORDER BY known_cost_usd DESC, model;
