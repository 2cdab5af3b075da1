-- Hotspots: files by how many PRs touch them and how many merge conflicts they caused.
-- prs / authors: distinct PRs (and their real authors, view prs) whose latest pr_changes snapshot
-- touches the file (the merged diff for merged PRs, else the diff when opened or closed; one copy of
-- it, however often it was written);
-- lines_added / lines_removed: over those snapshots;
-- conflicts: merge_conflict events naming the file (forge detail "conflicting files: a, b"),
-- conflict_prs: distinct PRs that hit them. Sorted by prs, then conflicts.
WITH snap AS (SELECT pr, arg_max(event_id, ts) AS ev FROM pr_changes GROUP BY pr),
ch AS (
    SELECT c.*, p.author FROM pr_changes c JOIN snap s ON c.pr = s.pr AND c.event_id = s.ev
    LEFT JOIN prs p ON p.pr = c.pr
),
touch AS (
    SELECT path, count(DISTINCT pr) AS prs, count(DISTINCT author) AS authors,
           CAST(sum(coalesce(new_lines, 0)) AS BIGINT) AS lines_added,
           CAST(sum(coalesce(old_lines, 0)) AS BIGINT) AS lines_removed
    FROM ch GROUP BY path
),
conf AS (
    SELECT trim(f) AS path, count(*) AS conflicts, count(DISTINCT pr) AS conflict_prs
    FROM (SELECT pr, unnest(string_split(substr(detail, length('conflicting files: ') + 1), ', ')) AS f
          FROM forge WHERE kind = 'merge_conflict' AND detail LIKE 'conflicting files: %')
    GROUP BY 1
)
SELECT path, coalesce(prs, 0) AS prs, coalesce(authors, 0) AS authors,
       coalesce(conflicts, 0) AS conflicts, coalesce(conflict_prs, 0) AS conflict_prs,
       coalesce(lines_added, 0) AS lines_added, coalesce(lines_removed, 0) AS lines_removed
FROM touch FULL OUTER JOIN conf USING (path)
ORDER BY prs DESC, conflicts DESC, path;
