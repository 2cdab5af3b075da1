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
-- has a row per file. (The pairs are view pr_duplicate_pairs in views.sql, which efficiency.sql and
-- pr_work.sql read too.)
SELECT * FROM pr_duplicate_pairs
ORDER BY pr_a, pr_b, path;
