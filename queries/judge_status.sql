-- Judge health: rows by judge and status, so errors and timeouts are never read as failures.
-- Input: rows. Params: none.
-- Output: judge_name, judge_status, rows, share.
SELECT
  coalesce(judge_name, '(none)') AS judge_name,
  coalesce(judge_status, CASE WHEN reward IS NULL THEN '(unjudged)' ELSE 'ok' END) AS judge_status,
  count(*) AS rows,
  round(CAST(count(*) AS DOUBLE) / sum(count(*)) OVER (), 3) AS share
FROM rows
GROUP BY 1, 2
ORDER BY rows DESC, 1, 2
