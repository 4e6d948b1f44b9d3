-- Failures by tool and tier: judged rollouts that did not pass, with a Wilson interval.
-- Input: rows. Params: none.
-- Output: tool, tier, rollouts, tasks, failures, fail_rate, fail_low, fail_high.
-- The interval treats rollouts as independent; `tasks` says how many situations stand behind it.
SELECT
  coalesce(dims['tool'], tools_used[1], '(no tool)') AS tool,
  coalesce(dims['tier'], '(none)') AS tier,
  count(*) AS rollouts,
  count(DISTINCT task_id) AS tasks,
  sum(CASE WHEN reward < 1 THEN 1 ELSE 0 END) AS failures,
  round(avg(CASE WHEN reward < 1 THEN 1.0 ELSE 0.0 END), 3) AS fail_rate,
  round(wilson_low(sum(CASE WHEN reward < 1 THEN 1 ELSE 0 END), count(*)), 3) AS fail_low,
  round(wilson_high(sum(CASE WHEN reward < 1 THEN 1 ELSE 0 END), count(*)), 3) AS fail_high
FROM rows
WHERE reward IS NOT NULL
GROUP BY 1, 2
ORDER BY failures DESC, tool, tier
