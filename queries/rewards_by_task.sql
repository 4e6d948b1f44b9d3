-- Per-task sufficient statistics: rollouts, judged rollouts, passes and mean reward of each task.
-- Input: rows. Params: none.
-- Output: task_id, rollouts, judged, passes, mean_reward.
SELECT
  task_id,
  count(*) AS rollouts,
  count(reward) AS judged,
  sum(CASE WHEN reward = 1 THEN 1 ELSE 0 END) AS passes,
  avg(reward) AS mean_reward
FROM rows
GROUP BY task_id
ORDER BY task_id
