-- Idle: per worker of the run (view roster: one that never started has a row of zeros), how long
-- it sat idle, and the nudges and share-findings prompts it got. All in schedule seconds, within the
-- schedule (run_info.schedule_started -> schedule_ended: set-up and final scoring are not run time).
-- Lives: each `started` lifecycle row of a worker begins a life (a new agent session: a first launch, a
-- resumed driver or a restarted host); turns are numbered from 1 in each life, so a turn is known by its
-- worker, life and number (its event_id's life in new traces, `turn:<worker>:<life>:<n>:<phase>`; in older
-- traces the worker's `started` rows before it).
-- up_s: time its agent was up, per up interval: from a `started` or `restarted` row to the first of its
-- next down row (crashed, stopped, gave_up), its host's death (an actor_died / actor_lost row of
-- `host <its host>`), its next up row (a resume or restart that wrote no down row: the time before it
-- stays up time, and idle unless in a turn), the schedule's end.
-- busy_s: time in turns, each from its start row to its end row of the same life, and never past the end
-- of the up interval it started in (a turn killed with its agent, host or driver ends where the trace
-- shows that end); a turn started outside any up interval (a trace without lifecycle rows) ends at its end
-- row, else the next down or up row, else the schedule's end.
-- idle_s: up time outside turns, per up interval; longest_idle_s: the longest such stretch;
-- idle_share = idle_s / up_s. turns: turns started within the schedule.
-- nudges / share_findings_prompts: deliveries of kind nudge / share_findings (the router sends a
-- nudge after 10 schedule minutes without a turn, a share-findings prompt when a turn ended with
-- no board write); nudged_turns: turns whose trigger was a nudge.
WITH ids AS (SELECT worker_id FROM roster),
sch AS (SELECT schedule_started AS s0, schedule_ended AS s1 FROM run_info),
lc AS (SELECT worker_id, ts, event, host FROM lifecycle WHERE worker_id IS NOT NULL),
lives AS (
    SELECT worker_id, ts AS l0, host, row_number() OVER (PARTITION BY worker_id ORDER BY ts) AS life,
           lead(ts) OVER (PARTITION BY worker_id ORDER BY ts) AS next_life
    FROM lc WHERE event = 'started'
),
host_down AS (
    SELECT substr(host, 6) AS host, ts FROM lifecycle
    WHERE worker_id IS NULL AND event IN ('actor_died', 'actor_lost') AND host LIKE 'host %'
),
downs AS (
    SELECT worker_id, ts FROM lc WHERE event IN ('crashed', 'stopped', 'gave_up')
    UNION ALL
    SELECT l.worker_id, h.ts FROM lives l JOIN host_down h
      ON h.host = l.host AND h.ts >= l.l0 AND h.ts < coalesce(l.next_life, 'infinity'::TIMESTAMPTZ)
),
ups AS (SELECT worker_id, ts FROM lc WHERE event IN ('started', 'restarted')),
up_iv AS (
    SELECT u.worker_id, u.ts AS iv,
           greatest(u.ts, (SELECT s0 FROM sch)) AS t0,
           least((SELECT min(d.ts) FROM downs d WHERE d.worker_id = u.worker_id AND d.ts >= u.ts),
                 (SELECT min(n.ts) FROM ups n WHERE n.worker_id = u.worker_id AND n.ts > u.ts),
                 (SELECT s1 FROM sch)) AS t1
    FROM ups u
),
up_ok AS (SELECT * FROM up_iv WHERE t1 > t0),
tr AS (
    SELECT t.worker_id, t.ts, t.turn, t.phase, t.trigger,
           coalesce(CASE WHEN starts_with(t.event_id, 'turn:') THEN string_split(t.event_id, ':')[-3] END,
                    CAST((SELECT count(*) FROM lives l WHERE l.worker_id = t.worker_id AND l.l0 <= t.ts) AS VARCHAR))
               AS life
    FROM turns t
),
starts AS (SELECT * FROM tr WHERE phase = 'start'),
ends AS (SELECT worker_id, life, turn, ts FROM tr WHERE phase = 'end'),
busy0 AS (
    SELECT s.worker_id, s.ts AS t0, s.trigger,
           (SELECT min(e.ts) FROM ends e
            WHERE e.worker_id = s.worker_id AND e.life = s.life AND e.turn = s.turn AND e.ts >= s.ts) AS end_ts,
           (SELECT max(u.iv) FROM up_iv u WHERE u.worker_id = s.worker_id AND u.t0 <= s.ts AND s.ts < u.t1) AS iv
    FROM starts s
),
busy AS (
    SELECT b.worker_id, b.iv, b.trigger, greatest(b.t0, (SELECT s0 FROM sch)) AS t0,
           least(coalesce(b.end_ts, 'infinity'::TIMESTAMPTZ), coalesce(u.t1, 'infinity'::TIMESTAMPTZ),
                 CASE WHEN u.iv IS NULL THEN least(
                     coalesce((SELECT min(d.ts) FROM downs d WHERE d.worker_id = b.worker_id AND d.ts >= b.t0),
                              'infinity'::TIMESTAMPTZ),
                     coalesce((SELECT min(n.ts) FROM ups n WHERE n.worker_id = b.worker_id AND n.ts > b.t0),
                              'infinity'::TIMESTAMPTZ)) ELSE 'infinity'::TIMESTAMPTZ END,
                 (SELECT s1 FROM sch)) AS t1
    FROM busy0 b LEFT JOIN up_iv u ON u.worker_id = b.worker_id AND u.iv = b.iv
    WHERE b.t0 <= (SELECT s1 FROM sch)
),
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
