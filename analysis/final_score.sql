-- Final score: the score of main at the end. One row.
-- checkpoints: scorings of main (periodic and final); final_*: the final checkpoint's (a finished run; a
-- periodic checkpoint still being scored when the run stopped may write its row after it, and is not the
-- end), else the latest scoring (a live run's latest periodic one); best_pass_rate: the highest seen.
-- final_strict_pass_rate: that scoring's score without the files main ships that change the test runner,
-- named in final_runner_files (equal to final_pass_rate when there are none; null when the trace predates
-- schema 6). Time to each milestone: score_milestones.sql.
WITH s AS (SELECT *, [CAST(checkpoint = 'final' AS BIGINT), epoch_us(ts)] AS k FROM scores)
SELECT count(*) AS checkpoints,
       arg_max(pass_rate, k) AS final_pass_rate,
       arg_max(passed, k) AS final_passed,
       arg_max(total, k) AS total,
       max(pass_rate) AS best_pass_rate,
       arg_max_null(strict_pass_rate, k) AS final_strict_pass_rate,
       arg_max_null(runner_files, k) AS final_runner_files
FROM s;
