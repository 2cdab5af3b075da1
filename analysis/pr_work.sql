-- PR work: per PR with a known author, the work its author put into it and whether that work was on a
-- feature someone else merged (view pr_work in views.sql says how each column is made). One row per PR.
-- work_start_s / work_end_s: schedule seconds since the run started (when its author started on it: the
-- latest of its author's CLAIM before opening it, previous PR and start; when that work ended: merge,
-- closing or the run's end); work_s: between the two; duplicate_of: the other author's PR it duplicates
-- (duplicated_work.sql's pairs) that was merged first, null when none. efficiency.sql sums these.
SELECT pr, author, state, sched_s(work_start) AS work_start_s, sched_s(work_end) AS work_end_s, work_s,
       duplicate_of
FROM pr_work
ORDER BY pr;
