-- Tool results by tool and status: how often each tool came back with something other than ok.
-- Input: rows. Params: none.
-- Output: tool, status, calls, rollouts, share_of_tool_calls.
-- `status` is the result's `status` field when it is a JSON object, else `(no status)`.
WITH calls AS (
  SELECT rollout_id, unnest(steps) AS s
  FROM rows
)
SELECT
  s['tool'] AS tool,
  coalesce(json_get_str(s['result'], 'status'), '(no status)') AS status,
  count(*) AS calls,
  count(DISTINCT rollout_id) AS rollouts,
  round(CAST(count(*) AS DOUBLE) / sum(count(*)) OVER (PARTITION BY s['tool']), 3) AS share_of_tool_calls
FROM calls
WHERE s['tool'] IS NOT NULL
GROUP BY 1, 2
ORDER BY tool, calls DESC
