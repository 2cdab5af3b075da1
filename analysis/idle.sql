-- Idle: per worker of the run (view roster: one that never started has a row of zeros), how long
-- it sat idle, and the nudges and share-findings prompts it got.
-- up_s: time its agent was up (lifecycle started/restarted -> next crashed/stopped/gave_up,
-- else the run's end); busy_s: time in turns (turn start -> its end; a turn with no end row ends
-- at the next down event or the run's end); idle_s: up time outside turns; longest_idle_s: the
-- longest such stretch; idle_share = idle_s / up_s. All in schedule seconds.
-- nudges / share_findings_prompts: deliveries of kind nudge / share_findings (the router sends a
-- nudge after 10 schedule minutes without a turn, a share-findings prompt when a turn ended with
-- no board write); nudged_turns: turns whose trigger was a nudge.
WITH ids AS (SELECT worker_id FROM roster),
ups AS (
    SELECT worker_id, ts, lead(ts) OVER (PARTITION BY worker_id ORDER BY ts) AS next_up
    FROM lifecycle WHERE event IN ('started', 'restarted')
),
downs AS (SELECT worker_id, ts FROM lifecycle WHERE event IN ('crashed', 'stopped', 'gave_up')),
up_iv AS (
    SELECT u.worker_id, u.ts AS t0,
           least(coalesce(d.ts, (SELECT ended FROM run_info)), coalesce(u.next_up, 'infinity'::TIMESTAMPTZ)) AS t1
    FROM ups u ASOF LEFT JOIN downs d ON u.worker_id = d.worker_id AND d.ts >= u.ts
),
starts AS (SELECT worker_id, turn, ts, trigger FROM turns WHERE phase = 'start'),
ends AS (SELECT worker_id, turn, ts FROM turns WHERE phase = 'end'),
busy0 AS (
    SELECT s.worker_id, s.ts AS t0, s.trigger, e.ts AS end_ts
    FROM starts s ASOF LEFT JOIN ends e ON s.worker_id = e.worker_id AND s.turn = e.turn AND e.ts >= s.ts
),
busy AS (
    SELECT b.worker_id, b.t0, b.trigger,
           least(coalesce(b.end_ts, 'infinity'::TIMESTAMPTZ), coalesce(d.ts, 'infinity'::TIMESTAMPTZ),
                 greatest(b.t0, (SELECT ended FROM run_info))) AS t1
    FROM busy0 b ASOF LEFT JOIN downs d ON b.worker_id = d.worker_id AND d.ts >= b.t0
),
marks AS (
    SELECT worker_id, t0 AS ts, 0 AS ord, 'from' AS k FROM up_iv
    UNION ALL SELECT worker_id, t1, 0, 'from' FROM busy
    UNION ALL SELECT worker_id, t0, 1, 'to' FROM busy
    UNION ALL SELECT worker_id, t1, 1, 'to' FROM up_iv
),
gaps AS (
    SELECT worker_id, sched_dur_s(lag(ts) OVER w, ts) AS gap, k, lag(k) OVER w AS prev_k
    FROM marks WINDOW w AS (PARTITION BY worker_id ORDER BY ts, ord)
),
idle AS (
    SELECT worker_id, sum(gap) AS idle_s, max(gap) AS longest_idle_s
    FROM gaps WHERE k = 'to' AND prev_k = 'from' GROUP BY worker_id
),
up AS (SELECT worker_id, sum(sched_dur_s(t0, t1)) AS up_s FROM up_iv GROUP BY worker_id),
bs AS (
    SELECT worker_id, count(*) AS turns, sum(sched_dur_s(t0, t1)) AS busy_s,
           count(*) FILTER (WHERE trigger = 'nudge') AS nudged_turns
    FROM busy GROUP BY worker_id
),
dv AS (
    SELECT worker_id, count(*) FILTER (WHERE kind = 'nudge') AS nudges,
           count(*) FILTER (WHERE kind = 'share_findings') AS share_findings_prompts
    FROM deliveries WHERE kind IN ('nudge', 'share_findings') GROUP BY worker_id
)
SELECT ids.worker_id, coalesce(up.up_s, 0) AS up_s, coalesce(bs.turns, 0) AS turns,
       coalesce(bs.busy_s, 0) AS busy_s, coalesce(idle.idle_s, 0) AS idle_s,
       coalesce(idle.idle_s, 0) / nullif(up.up_s, 0) AS idle_share,
       coalesce(idle.longest_idle_s, 0) AS longest_idle_s,
       coalesce(dv.nudges, 0) AS nudges, coalesce(dv.share_findings_prompts, 0) AS share_findings_prompts,
       coalesce(bs.nudged_turns, 0) AS nudged_turns
FROM ids
LEFT JOIN up USING (worker_id) LEFT JOIN bs USING (worker_id) LEFT JOIN idle USING (worker_id)
LEFT JOIN dv USING (worker_id)
WHERE ids.worker_id IS NOT NULL
ORDER BY ids.worker_id;
