-- pass@1, pass^k and pass@k per value of one `dims` key ($key), from per-task counts, at k = $k.
-- Input: rows. Params: $key (a dims key, e.g. tier), $k (an integer).
-- Output: value, tasks, tasks_at_k, pass_at_1, pass_pow_k, pass_at_k (means over tasks; tasks with fewer than $k graded rollouts are left out of the k-way numbers).
-- Point estimates only: `wai pass-at --by dims.KEY` gives the same numbers with task-bootstrap intervals.
WITH tasks AS (
  SELECT
    coalesce(element_at(dims, CAST($key AS VARCHAR))[1], '(unset)') AS value,
    task_id,
    count(CASE WHEN reward = 0 OR reward = 1 THEN 1 END) AS n,
    count(CASE WHEN reward = 1 THEN 1 END) AS c
  FROM rows
  GROUP BY 1, 2
)
SELECT
  value,
  count(*) AS tasks,
  count(pass_at_k(n, c, CAST($k AS BIGINT))) AS tasks_at_k,
  round(avg(CAST(c AS DOUBLE) / n), 4) AS pass_at_1,
  round(avg(pass_pow_k(n, c, CAST($k AS BIGINT))), 4) AS pass_pow_k,
  round(avg(pass_at_k(n, c, CAST($k AS BIGINT))), 4) AS pass_at_k
FROM tasks
WHERE n > 0
GROUP BY value
ORDER BY value
