-- Idle: per worker of the run (view roster: one that never started has a row of zeros), how long
-- it sat idle, and the nudges and share-findings prompts it got. All in schedule seconds, within the
-- schedule (run_info.schedule_started -> schedule_ended: set-up and final scoring are not run time).
-- up_s: time its agent was up, the sum of its up intervals (view worker_up: lives, up and down rows, a
-- host's death, per views.sql); busy_s: time in turns (view worker_busy: each turn from its start row to
-- its end row of the same life, never past the end of the up interval it started in).
-- idle_s: up time outside turns, per up interval; longest_idle_s: the longest such stretch;
-- idle_share = idle_s / up_s. turns: turns started within the schedule.
-- nudges / share_findings_prompts: deliveries of kind nudge / share_findings (the router sends a
-- nudge after 10 schedule minutes without a turn, a share-findings prompt when a turn ended with
-- no board write); nudged_turns: turns whose trigger was a nudge.
WITH ids AS (SELECT worker_id FROM roster),
up_ok AS (SELECT * FROM worker_up WHERE t1 > t0),
busy AS (SELECT * FROM worker_busy),
marks AS (
    SELECT worker_id, iv, t0 AS ts, 0 AS ord, 'from' AS k FROM up_ok
    UNION ALL SELECT worker_id, iv, t1, 0, 'from' FROM busy WHERE iv IS NOT NULL AND t1 > t0
    UNION ALL SELECT worker_id, iv, t0, 1, 'to' FROM busy WHERE iv IS NOT NULL AND t1 > t0
    UNION ALL SELECT worker_id, iv, t1, 1, 'to' FROM up_ok
),
gaps AS (
    SELECT worker_id, sched_dur_s(lag(ts) OVER w, ts) AS gap, k, lag(k) OVER w AS prev_k
    FROM marks WINDOW w AS (PARTITION BY worker_id, iv ORDER BY ts, ord)
),
idle AS (
    SELECT worker_id, sum(gap) AS idle_s, max(gap) AS longest_idle_s
    FROM gaps WHERE k = 'to' AND prev_k = 'from' GROUP BY worker_id
),
up AS (SELECT worker_id, sum(sched_dur_s(t0, t1)) AS up_s FROM up_ok GROUP BY worker_id),
bs AS (
    SELECT worker_id, count(*) AS turns, sum(greatest(sched_dur_s(t0, t1), 0)) AS busy_s,
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
