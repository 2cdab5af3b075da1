-- Scores: the pass rate of main over time. One row per scoring (periodic checkpoints and the
-- final one), in schedule order: t_s (schedule seconds since the schedule started when main was taken, at
-- most the schedule's end: view scorings), passed/total hidden tests, pass_rate (ProgramBench's
-- official score); strict_pass_rate: the score without the files main ships that change the test runner,
-- named in runner_files (equal to pass_rate when there are none; null in traces older than schema 6).
SELECT t_s, checkpoint, passed, total, pass_rate, commit,
       strict_pass_rate, runner_files
FROM scorings
ORDER BY t_s, ts;
