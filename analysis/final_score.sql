-- Final score: the score of main at the end. One row.
-- checkpoints: scorings of main (periodic and final); final_*: the latest scoring (the final
-- checkpoint of a finished run; the latest periodic one of a live run); best_pass_rate: the
-- highest seen. final_strict_pass_rate: the latest score without the files main ships that change the
-- test runner, named in final_runner_files (equal to final_pass_rate when there are none; null when the
-- trace predates schema 6). Time to each milestone: score_milestones.sql.
SELECT count(*) AS checkpoints,
       arg_max(pass_rate, ts) AS final_pass_rate,
       arg_max(passed, ts) AS final_passed,
       arg_max(total, ts) AS total,
       max(pass_rate) AS best_pass_rate,
       arg_max_null(strict_pass_rate, ts) AS final_strict_pass_rate,
       arg_max_null(runner_files, ts) AS final_runner_files
FROM scores;
