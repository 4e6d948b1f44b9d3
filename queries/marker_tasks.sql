-- Per-(marker, task) values for marker summaries: every non-null value of each marker in each task.
-- Input: __marker_rows (task_id, markers). Params: none.
-- Output: marker, task_id, vals (null when the marker is present only as null in that task).
WITH e AS (
  SELECT task_id, unnest(map_entries(markers)) AS m
  FROM __marker_rows
  WHERE markers IS NOT NULL
)
SELECT
  m['key'] AS marker,
  task_id,
  array_agg(m['value']) FILTER (WHERE m['value'] IS NOT NULL) AS vals
FROM e
GROUP BY 1, 2
ORDER BY 1, 2
