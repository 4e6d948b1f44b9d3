-- Marker rates: for each marker, the rows it applies to and the share at 1.0 (good), with a Wilson interval.
-- Input: rows. Params: none.
-- Output: marker, rows_applying, tasks, at_1, rate, rate_low, rate_high, task_mean.
-- A null marker value means "does not apply" and is not counted. `rate` is a share of rows (every
-- row weighted alike); `task_mean` is the mean over tasks of each task's mean value (every task
-- weighted alike), the number `wai markers` prints.
WITH entries AS (
  SELECT task_id, unnest(map_entries(markers)) AS e
  FROM rows
  WHERE markers IS NOT NULL
),
per_task AS (
  SELECT e['key'] AS marker, task_id, avg(e['value']) AS mean
  FROM entries
  WHERE e['value'] IS NOT NULL
  GROUP BY 1, 2
),
task_means AS (
  SELECT marker, avg(mean) AS task_mean
  FROM per_task
  GROUP BY 1
),
rates AS (
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
)
SELECT r.marker, r.rows_applying, r.tasks, r.at_1, r.rate, r.rate_low, r.rate_high,
  round(t.task_mean, 3) AS task_mean
FROM rates r
LEFT JOIN task_means t ON r.marker = t.marker
ORDER BY 1
