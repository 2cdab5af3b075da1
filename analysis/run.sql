-- Run: which run this is and how long it lasted.
-- One row: run_id, harness, workers (view roster: config.json's count, else the workers seen), time_scale,
-- started/ended (first and latest event: a live run "ends" at its latest event so far),
-- wall_s (wall seconds) and duration_s (schedule seconds = wall_s x time_scale).
SELECT run_id, harness, workers, time_scale, started, ended,
       epoch(ended) - epoch(started) AS wall_s,
       sched_dur_s(started, ended) AS duration_s
FROM run_info;
