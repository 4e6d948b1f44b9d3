-- A lake's compare verdicts run by run: the headline, the gate, the delta with its interval.
-- Input: a lake (`wai sql --lake LAKE`): table results_compare. Params: none.
-- Output: run_time, run_id, stage, headline_word, ok, headline_metric, target_delta, target_ci_low, target_ci_high, n_paired_tasks.
SELECT
  run_time,
  run_id,
  stage,
  headline_word,
  ok,
  headline_metric,
  target_delta,
  target_ci_low,
  target_ci_high,
  n_paired_tasks
FROM results_compare
ORDER BY run_time, run_id, stage
