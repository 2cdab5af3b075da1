-- Run: which run this is and how long it lasted, on one clock (view run_info).
-- One row: run_id, harness, workers (view roster: config.json's count, else the workers seen), time_scale;
-- duration_s: the schedule in schedule seconds, from its start (the first worker's launch) to its end (the
-- configured schedule, configured_s, unless the run ended early or is still running: then the workers'
-- last event); ended_early: it stopped before its configured schedule; ended_how: summary.json's "ended"
-- (null while it runs). Wall time apart: wall_s from the first event to the latest (started/ended),
-- setup_wall_s before the schedule (Ray, the actors, the clones), after_wall_s after it (stopping the
-- workers, the final checkpoint), schedule_wall_s the schedule itself; started/ended in UTC.
SELECT run_id, harness, workers, time_scale,
       sched_dur_s(schedule_started, schedule_ended) AS duration_s,
       configured_s,
       sched_dur_s(schedule_started, schedule_ended) < configured_s - 1e-6 AS ended_early,
       ended_how,
       started, ended,
       epoch(ended) - epoch(started) AS wall_s,
       epoch(schedule_started) - epoch(started) AS setup_wall_s,
       epoch(schedule_ended) - epoch(schedule_started) AS schedule_wall_s,
       epoch(ended) - epoch(schedule_ended) AS after_wall_s
FROM run_info;
