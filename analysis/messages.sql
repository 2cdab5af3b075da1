-- Messages: DM and channel volume and the shape of the DM graph. One row.
-- dms, channel_posts: messages of each kind; dm_senders / dm_recipients: distinct workers;
-- dm_edges: distinct (sender -> recipient) pairs; reciprocal_pairs: unordered pairs with DMs
-- both ways; max_out_degree / max_in_degree: most distinct recipients one worker wrote to /
-- senders one worker heard from; workers_without_dm: the run's workers (view roster, started or
-- not) that neither sent nor received a DM. dm_edges.sql lists the edges.
WITH dm AS (SELECT sender, recipient FROM messages WHERE kind = 'dm'),
e AS (SELECT DISTINCT sender, recipient FROM dm),
touched AS (SELECT sender AS w FROM dm UNION SELECT recipient FROM dm)
SELECT
    (SELECT count(*) FROM dm) AS dms,
    (SELECT count(*) FROM messages WHERE kind = 'channel') AS channel_posts,
    (SELECT count(DISTINCT sender) FROM dm) AS dm_senders,
    (SELECT count(DISTINCT recipient) FROM dm) AS dm_recipients,
    (SELECT count(*) FROM e) AS dm_edges,
    (SELECT count(*) FROM e a JOIN e b ON a.sender = b.recipient AND a.recipient = b.sender AND a.sender < a.recipient)
        AS reciprocal_pairs,
    coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM e GROUP BY sender)), 0) AS max_out_degree,
    coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM e GROUP BY recipient)), 0) AS max_in_degree,
    (SELECT count(*) FROM roster WHERE worker_id NOT IN (SELECT w FROM touched WHERE w IS NOT NULL))
        AS workers_without_dm;
