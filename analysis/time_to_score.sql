-- Time to score: for each tenth of the hidden tests (level 0.1 to 1.0), the schedule seconds from
-- the schedule's start to the first checkpoint whose score reached it (t_s; null: never reached). One
-- row per level. Timed when the checkpoint took main, at most the schedule's end (view scorings).
WITH s AS (SELECT t_s, pass_rate FROM scorings),
     levels AS (SELECT range / 10 AS level FROM range(1, 11))
SELECT level, min(s.t_s) FILTER (WHERE s.pass_rate >= level) AS t_s
FROM levels LEFT JOIN s ON true
GROUP BY level
ORDER BY level;
