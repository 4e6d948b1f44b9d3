-- Per-task counts for pass@k: graded binary rollouts, passes, partial and unjudged rows.
-- Input: __pass_at_rows (slice, task_id, reward). Params: none.
-- Output: slice, task_id, n, c, partial, unjudged; ordered by slice and task, so the result does not depend on partitioning.
SELECT
  slice,
  task_id,
  count(CASE WHEN reward = 0 OR reward = 1 THEN 1 END) AS n,
  count(CASE WHEN reward = 1 THEN 1 END) AS c,
  count(CASE WHEN reward IS NOT NULL AND reward <> 0 AND reward <> 1 THEN 1 END) AS partial,
  count(CASE WHEN reward IS NULL THEN 1 END) AS unjudged
FROM __pass_at_rows
GROUP BY slice, task_id
ORDER BY slice, task_id
