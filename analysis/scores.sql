-- Scores: the pass rate of main over time. One row per scoring (periodic checkpoints and the
-- final one): t_s (schedule seconds since the run started when main was taken: the checkpoint's own
-- schedule_s, else the time the score was recorded), passed/total hidden tests, pass_rate (ProgramBench's
-- official score); strict_pass_rate: the score without the files main ships that change the test runner,
-- named in runner_files (equal to pass_rate when there are none; null in traces older than schema 6).
SELECT coalesce(schedule_s, sched_s(ts)) AS t_s, checkpoint, passed, total, pass_rate, commit,
       strict_pass_rate, runner_files
FROM scores
ORDER BY ts;
