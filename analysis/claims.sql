-- Claims: colliding claims. One row per CLAIM that collides with an earlier, still-live claim
-- by another worker.
-- What a claim is about (its keys): the path-like tokens of its text, lower-cased: runs of letters
-- and digits of any script, `_ . / -`, trailing `. / -` dropped, that hold a `/` (a/b/c) or look like
-- name.ext (`docs/naïve.md` is one key, not `docs/na` + `ve.md`); a claim with none has its whole
-- text (lower-cased, spaces collapsed) as its key.
-- Two claims collide when they share a key, come from two known workers (a claim whose row has no
-- worker collides with none), and the later one is
-- at most window_s schedule seconds after the earlier (default 3600 = the board's claim TTL,
-- after which the recent view hides a claim). Each colliding claim is paired with the latest such
-- earlier claim; `shared` lists the keys they share; settled_by_dm: the two workers exchanged a
-- DM (either way) within window_s after the later claim, as the prompt asks them to.
WITH params AS (SELECT 3600.0 AS window_s),
c AS (SELECT seq, ts, worker_id, text FROM board WHERE type = 'CLAIM'),
tok AS (
    SELECT seq, regexp_replace(unnest(regexp_extract_all(lower(text), '[\p{L}\p{N}_./\-]+')), '[./\-]+$', '') AS key
    FROM c
),
pk AS (
    SELECT DISTINCT seq, key FROM tok
    WHERE contains(key, '/') OR regexp_full_match(key, '[\p{L}\p{N}_\-]+\.\p{L}[\p{L}\p{N}]{0,4}')
),
k AS (
    SELECT c.seq, c.ts, c.worker_id, c.text, pk.key FROM c JOIN pk USING (seq)
    UNION ALL
    SELECT seq, ts, worker_id, text, regexp_replace(lower(trim(text)), '\s+', ' ', 'g') FROM c
    WHERE seq NOT IN (SELECT seq FROM pk)
),
pairs AS (
    SELECT b.seq, b.ts, b.worker_id, b.text, a.seq AS earlier_seq, a.worker_id AS earlier_worker, a.ts AS earlier_ts,
           string_agg(DISTINCT a.key, ', ' ORDER BY a.key) AS shared
    FROM k b JOIN k a
      ON a.key = b.key AND a.seq < b.seq AND a.worker_id <> b.worker_id
     AND a.ts >= b.ts - to_microseconds(CAST((SELECT window_s FROM params) / (SELECT time_scale FROM run_info) * 1e6 AS BIGINT))
    GROUP BY ALL
),
latest AS (
    SELECT seq, any_value(ts) AS ts, any_value(worker_id) AS worker_id, any_value(text) AS text,
           arg_max(earlier_seq, earlier_seq) AS earlier_seq, arg_max(earlier_worker, earlier_seq) AS earlier_worker,
           arg_max(earlier_ts, earlier_seq) AS earlier_ts, arg_max(shared, earlier_seq) AS shared
    FROM pairs GROUP BY seq
),
dm AS (
    SELECT ts, least(sender, recipient) AS lo, greatest(sender, recipient) AS hi
    FROM messages WHERE kind = 'dm'
),
settled AS (
    SELECT DISTINCT l.seq
    FROM latest l JOIN dm
      ON dm.lo = least(l.worker_id, l.earlier_worker) AND dm.hi = greatest(l.worker_id, l.earlier_worker)
     AND dm.ts >= l.ts
     AND dm.ts <= l.ts + to_microseconds(CAST((SELECT window_s FROM params) / (SELECT time_scale FROM run_info) * 1e6 AS BIGINT))
)
SELECT l.seq, l.worker_id, sched_s(l.ts) AS claimed_s, l.text, l.earlier_seq, l.earlier_worker,
       sched_dur_s(l.earlier_ts, l.ts) AS gap_s, l.shared,
       l.seq IN (SELECT seq FROM settled) AS settled_by_dm
FROM latest l
ORDER BY l.seq;
