-- Pass rate by the values of one `dims` key ($key, e.g. tier, tool, tool_condition).
-- Input: rows. Params: $key, the dims key to slice by.
-- Output: value, rollouts, tasks, passes, pass_rate, pass_low, pass_high, mean_reward.
-- A pass is reward = 1; partial rewards count in mean_reward only. Rows without the key are `(unset)`.
SELECT
  coalesce(element_at(dims, CAST($key AS VARCHAR))[1], '(unset)') AS value,
  count(*) AS rollouts,
  count(DISTINCT task_id) AS tasks,
  sum(CASE WHEN reward = 1 THEN 1 ELSE 0 END) AS passes,
  round(avg(CASE WHEN reward = 1 THEN 1.0 ELSE 0.0 END), 3) AS pass_rate,
  round(wilson_low(sum(CASE WHEN reward = 1 THEN 1 ELSE 0 END), count(*)), 3) AS pass_low,
  round(wilson_high(sum(CASE WHEN reward = 1 THEN 1 ELSE 0 END), count(*)), 3) AS pass_high,
  round(avg(reward), 3) AS mean_reward
FROM rows
WHERE reward IS NOT NULL
GROUP BY 1
ORDER BY 1
