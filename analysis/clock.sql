-- Clock: how far the run's agents lagged behind their own schedule, and whether the run was machine-bound
-- (agensh_ray/lag.py; docs/operations.md, "Machine-bound runs"). One row: the whole run's figures (the driver's
-- `clock` row of scope `run`; a run still going, or whose driver died before its end, has none: then its latest
-- window), and how many progress ticks (30 s windows) were machine-bound. agent_tool_median_ms /
-- server_tool_median_ms: the median MCP tool call as the agent waited for it and as the tool server served it
-- (wall ms); cpu_wait_share: the share of their ready time the run's processes waited for a CPU. A run older than
-- the clock (trace schema < 7) has no clock rows: every figure is null (unknown).
WITH final AS (
    SELECT * FROM clock ORDER BY (scope = 'run') DESC, ts DESC LIMIT 1
),
ticks AS (
    SELECT count(*) AS ticks, count(*) FILTER (WHERE machine_bound) AS ticks_machine_bound
    FROM clock WHERE scope = 'window'
)
SELECT f.scope, f.time_scale, f.agent_tool_median_ms, f.server_tool_median_ms, f.tool_latency_ratio,
       f.cpu_wait_share, f.machine_bound, f.why, t.ticks, t.ticks_machine_bound
FROM ticks t LEFT JOIN final f ON true;
