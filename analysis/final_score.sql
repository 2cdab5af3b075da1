-- Final score: the score of main at the end. One row.
-- checkpoints: scorings of main (periodic and final); final_*: the latest scoring (the final
-- checkpoint of a finished run; the latest periodic one of a live run); best_pass_rate: the
-- highest seen. Time to each milestone: score_milestones.sql.
SELECT count(*) AS checkpoints,
       arg_max(pass_rate, ts) AS final_pass_rate,
       arg_max(passed, ts) AS final_passed,
       arg_max(total, ts) AS total,
       max(pass_rate) AS best_pass_rate
FROM scores;
