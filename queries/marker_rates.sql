-- Marker rates: for each marker, the rows it applies to and the share at 1.0 (good), with a Wilson interval.
-- Input: rows. Params: none.
-- Output: marker, rows_applying, tasks, at_1, rate, rate_low, rate_high.
-- A null marker value means "does not apply" and is not counted.
WITH entries AS (
  SELECT task_id, unnest(map_entries(markers)) AS e
  FROM rows
  WHERE markers IS NOT NULL
)
SELECT
  e['key'] AS marker,
  count(e['value']) AS rows_applying,
  count(DISTINCT CASE WHEN e['value'] IS NOT NULL THEN task_id END) AS tasks,
  sum(CASE WHEN e['value'] = 1 THEN 1 ELSE 0 END) AS at_1,
  round(avg(CASE WHEN e['value'] = 1 THEN 1.0 WHEN e['value'] IS NOT NULL THEN 0.0 END), 3) AS rate,
  round(wilson_low(sum(CASE WHEN e['value'] = 1 THEN 1 ELSE 0 END), count(e['value'])), 3) AS rate_low,
  round(wilson_high(sum(CASE WHEN e['value'] = 1 THEN 1 ELSE 0 END), count(e['value'])), 3) AS rate_high
FROM entries
GROUP BY 1
ORDER BY 1
