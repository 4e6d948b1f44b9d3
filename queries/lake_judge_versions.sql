-- Which judge graded what: a lake's scored rows by scoring run, judge and judge version.
-- Input: a lake (`wai sql --lake LAKE`): table scored. Params: none.
-- Output: scoring_run_id, judge_name, judge_version, rows, passed, unjudged.
SELECT
  json_get_str(lineage, 'scoring_run_id') AS scoring_run_id,
  coalesce(judge_name, '(none)') AS judge_name,
  coalesce(json_get_str(lineage, 'judge_version'), '(none)') AS judge_version,
  count(*) AS rows,
  sum(CASE WHEN reward = 1 THEN 1 ELSE 0 END) AS passed,
  sum(CASE WHEN reward IS NULL THEN 1 ELSE 0 END) AS unjudged
FROM scored
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
