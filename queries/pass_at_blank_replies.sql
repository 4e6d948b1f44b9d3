-- Spoken replies of rows whose final_text is blank: the last non-blank assistant message, else ''.
-- Input: __pass_at_rows (slice, final_text, messages). Params: none. Run only when such rows exist,
--   since it reads `messages`.
-- Output: one row per slice: spoken_known, spoken_answered, spoken_unclosed.
WITH r AS (
  SELECT
    slice,
    CASE
      WHEN messages IS NOT NULL THEN think_state(last_assistant_text(messages))
      WHEN final_text IS NOT NULL THEN think_state('')
    END AS spoken
  FROM __pass_at_rows
  WHERE final_text IS NULL OR trim(final_text) = ''
)
SELECT
  slice,
  count(spoken) AS spoken_known,
  count(CASE WHEN spoken & 1 = 1 THEN 1 END) AS spoken_answered,
  count(CASE WHEN spoken & 2 = 2 THEN 1 END) AS spoken_unclosed
FROM r
GROUP BY slice
ORDER BY slice
