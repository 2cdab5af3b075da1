-- DM graph: its edges. One row per (sender -> recipient) with at least one DM: how many, and
-- when the first and last were sent (schedule seconds since the schedule started).
SELECT sender, recipient, count(*) AS dms, min(sched_s(ts)) AS first_s, max(sched_s(ts)) AS last_s
FROM messages
WHERE kind = 'dm'
GROUP BY sender, recipient
ORDER BY sender, recipient;
