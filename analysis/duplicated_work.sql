-- Duplicated work: pairs of PRs by different authors that change the same lines or functions.
-- Reads table pr_changes (the forge's snapshot of each PR's diff, one row per change block, no
-- context), using each PR's first snapshot (when it was opened: the work its author did alone).
-- A pair (pr_a < pr_b) duplicates work in a file when:
--   same new file  both PRs create the file;
--   same lines     both remove or rewrite overlapping ranges of the file's existing lines
--                  (old-side line numbers: exact when both PRs branched from the same main,
--                  approximate otherwise);
--   same function  both remove or rewrite lines under the same hunk heading (git's
--                  enclosing function/class), in different places.
-- Pure insertions next to each other (two PRs adding a line to a shared registry) do not count:
-- they show up as merge conflicts in hotspots.sql.
-- Authors are the PRs' real authors (view prs: whoever opened the PR), not the rows' pr_author copies;
-- a pair whose author is unknown on either side is left out (it cannot be said to be two workers).
-- One row per pair and file: reason (the first that holds, in the order above), overlap_lines
-- (old lines both change), functions (shared headings; null if none). A pair touching several files
-- has a row per file.
WITH snap AS (SELECT pr, arg_min(event_id, ts) AS ev FROM pr_changes GROUP BY pr),
ch AS (
    SELECT c.*, p.author FROM pr_changes c JOIN snap s ON c.pr = s.pr AND c.event_id = s.ev
    JOIN prs p ON p.pr = c.pr
    WHERE p.author IS NOT NULL
),
added AS (SELECT DISTINCT pr, author, path FROM ch WHERE status = 'added'),
edits AS (SELECT pr, author, path, old_start, old_lines, function FROM ch WHERE old_lines > 0),
hits AS (
    SELECT a.pr AS pr_a, a.author AS author_a, b.pr AS pr_b, b.author AS author_b, a.path,
           1 AS rank, 0 AS overlap, NULL AS function
    FROM added a JOIN added b ON a.path = b.path AND a.pr < b.pr AND a.author <> b.author
    UNION ALL
    SELECT a.pr, a.author, b.pr, b.author, a.path, 2,
           least(a.old_start + a.old_lines, b.old_start + b.old_lines) - greatest(a.old_start, b.old_start),
           NULL
    FROM edits a JOIN edits b
      ON a.path = b.path AND a.pr < b.pr AND a.author <> b.author
     AND a.old_start < b.old_start + b.old_lines AND b.old_start < a.old_start + a.old_lines
    UNION ALL
    SELECT a.pr, a.author, b.pr, b.author, a.path, 3, 0, a.function
    FROM edits a JOIN edits b
      ON a.path = b.path AND a.function = b.function AND a.pr < b.pr AND a.author <> b.author
    WHERE a.function <> ''
)
SELECT pr_a, author_a, pr_b, author_b, path,
       CASE min(rank) WHEN 1 THEN 'same new file' WHEN 2 THEN 'same lines' ELSE 'same function' END AS reason,
       CAST(sum(overlap) AS BIGINT) AS overlap_lines,
       string_agg(DISTINCT function, '; ' ORDER BY function) AS functions
FROM hits
GROUP BY pr_a, author_a, pr_b, author_b, path
ORDER BY pr_a, pr_b, path;
