-- Score milestones: how long main took to reach each milestone. One row per milestone.
-- milestone: a fraction of the hidden tests (a setting: the variable `milestones`, which connect()
-- and the report's --milestones set; default 25%, 50%, 75% and 90%); time_to_s: schedule seconds from
-- the schedule's start to the first scoring with pass_rate >= milestone, null if never reached, timed when
-- that checkpoint took main, at most the schedule's end (view scorings), as time_to_score.sql and
-- scores.sql time it: how long scoring took is not the team's time;
-- checkpoint / passed / total: that scoring.
WITH m AS (
    SELECT unnest(CAST(coalesce(getvariable('milestones'), [0.25, 0.5, 0.75, 0.9]) AS DOUBLE[])) AS milestone
),
s AS (SELECT t_s, checkpoint, passed, total, pass_rate FROM scorings)
SELECT m.milestone, min(s.t_s) AS time_to_s,
       arg_min(s.checkpoint, s.t_s) AS checkpoint, arg_min(s.passed, s.t_s) AS passed, arg_min(s.total, s.t_s) AS total
FROM m LEFT JOIN s ON s.pass_rate >= m.milestone - 1e-9
GROUP BY m.milestone
ORDER BY m.milestone;
