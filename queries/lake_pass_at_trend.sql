-- A lake's pass@1 run by run, overall and per slice, with its 95% interval and n.
-- Input: a lake (`wai sql --lake LAKE`): table results_pass_at. Params: none.
-- Output: run_time, run_id, stage, slice, k, pass_at_1, ci_low, ci_high, n_groups, n_rows.
SELECT
  run_time,
  run_id,
  stage,
  CASE WHEN slice_by IS NULL THEN '(all)' ELSE concat(slice_by, '=', CAST(slice AS VARCHAR)) END AS slice,
  k,
  pass_at_1,
  ci_low,
  ci_high,
  n_groups,
  n_rows
FROM results_pass_at
WHERE pass_at_1 IS NOT NULL
ORDER BY run_time, run_id, stage, slice_by NULLS FIRST, slice, k
