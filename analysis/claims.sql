-- Claims: colliding claims. One row per CLAIM that collides with an earlier, still-live claim
-- by another worker.
-- What a claim is about (its keys): the path-like tokens of its text, lower-cased: runs of letters
-- and digits of any script, `_ . / -`, trailing `. / -` dropped, that hold a `/` (a/b/c) or look like
-- name.ext (`docs/naïve.md` is one key, not `docs/na` + `ve.md`); a claim with none has its whole
-- text (lower-cased, spaces collapsed) as its key.
-- Two claims collide when they share a key, come from two known workers (a claim whose row has no
-- worker collides with none), and the earlier is still live when the later is written, by the run's claim
-- rule, the one the board and the agents' prompt use (run_info.claim_rule, claim_life_wall_s; see
-- agensh_ray/board/leases.py):
--   legacy  live for claim_life_wall_s (= claim_ttl_s / time_scale) wall seconds after its entry;
--   lease   live until claim_life_wall_s after its holder's latest activity (a board entry of its own,
--           or a PR it opened, reviewed, commented or merged), unless its holder ended it first: a FAIL
--           `release KEY: ...` or a PATCH_SUMMARY `KEY: ...` with its key (claim_key), or its next CLAIM.
-- Each colliding claim is paired with the latest such earlier claim; `shared` lists the keys they share;
-- settled_by_dm: the two workers exchanged a DM (either way) within one claim life after the later
-- claim, as the prompt asks them to.
WITH params AS (SELECT claim_rule AS rule, to_microseconds(CAST(claim_life_wall_s * 1e6 AS BIGINT)) AS life
                FROM run_info),
c AS (SELECT seq, ts, worker_id, text FROM board WHERE type = 'CLAIM'),
-- What renews a claim, and what ends it, per worker (rule lease).
act AS (
    SELECT worker_id, ts FROM board WHERE worker_id IS NOT NULL
    UNION ALL
    SELECT worker_id, ts FROM forge
    WHERE kind IN ('pr_opened', 'pr_reviewed', 'pr_commented', 'pr_merged') AND worker_id IS NOT NULL
),
ends AS (
    SELECT worker_id, ts, seq, type, claim_key(text) AS ckey FROM board
    WHERE type = 'CLAIM' OR type = 'PATCH_SUMMARY' OR (type = 'FAIL' AND lower(ltrim(text)) LIKE 'release%')
),
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
    WHERE CASE WHEN (SELECT rule FROM params) = 'lease' THEN
              -- renewed by its holder's activity up to the later claim, and not ended by its holder before it
              (SELECT max(x.ts) FROM act x WHERE x.worker_id = a.worker_id AND x.ts >= a.ts AND x.ts <= b.ts)
                  >= b.ts - (SELECT life FROM params)
              AND NOT EXISTS (
                  SELECT 1 FROM ends e
                  WHERE e.worker_id = a.worker_id AND e.ts <= b.ts AND e.seq > a.seq
                    AND (e.type = 'CLAIM' OR e.ckey = claim_key(a.text)))
          ELSE a.ts >= b.ts - (SELECT life FROM params) END
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
     AND dm.ts <= l.ts + (SELECT life FROM params)
)
SELECT l.seq, l.worker_id, sched_s(l.ts) AS claimed_s, l.text, l.earlier_seq, l.earlier_worker,
       sched_dur_s(l.earlier_ts, l.ts) AS gap_s, l.shared,
       l.seq IN (SELECT seq FROM settled) AS settled_by_dm
FROM latest l
ORDER BY l.seq;
