-- Score milestones: final score and time to reach 30% and 50% of the hidden tests. One row.
-- final_*: the latest scoring (the final checkpoint of a finished run; the latest periodic one
-- of a live run); best_pass_rate: the highest seen; time_to_30_s / time_to_50_s: schedule
-- seconds from the run's start to the first scoring with pass_rate >= 0.30 / >= 0.50, null if
-- never reached.
WITH s AS (SELECT sched_s(ts) AS t_s, ts, passed, total, pass_rate FROM scores)
SELECT count(*) AS checkpoints,
       arg_max(pass_rate, ts) AS final_pass_rate,
       arg_max(passed, ts) AS final_passed,
       arg_max(total, ts) AS total,
       max(pass_rate) AS best_pass_rate,
       min(t_s) FILTER (WHERE pass_rate >= 0.30) AS time_to_30_s,
       min(t_s) FILTER (WHERE pass_rate >= 0.50) AS time_to_50_s
FROM s;
