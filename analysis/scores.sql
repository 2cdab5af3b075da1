-- Scores: the pass rate of main over time. One row per scoring (periodic checkpoints and the
-- final one): t_s (schedule seconds since the run started when main was taken: the checkpoint's own
-- schedule_s, else the time the score was recorded), passed/total hidden tests, pass_rate.
SELECT coalesce(schedule_s, sched_s(ts)) AS t_s, checkpoint, passed, total, pass_rate, commit
FROM scores
ORDER BY ts;
