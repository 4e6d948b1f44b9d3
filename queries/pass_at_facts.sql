-- Per-slice facts behind pass@k's notes and run config (how the rows were made).
-- Input: __pass_at_rows (slice, reward, judge_status, reason, finish_reason, final_text, sampling,
--   policy_version, judge_meta, lineage, user_model, writer_model). Params: none.
-- Lineage keys are looked up only in rows whose text mentions them (a substring test is far
--   cheaper than a JSON parse, and most rows have neither key).
-- Output: one row per slice: row counts, the reward range, judge failures, truncation, spoken
--   replies (non-blank final_text only; think_state's bit 4 marks a blank text), and for each
--   config field its distinct count and value.
WITH r AS (
  SELECT
    slice, reward, judge_status, reason, finish_reason, final_text,
    json_get_float(sampling, 'temperature') AS temperature,
    json_get_int(sampling, 'max_tokens') AS max_tokens,
    nullif(policy_version, '') AS policy_version,
    coalesce(nullif(json_as_text(judge_meta, 'version'), ''), CASE WHEN strpos(lineage, 'judge_version') > 0 THEN nullif(json_as_text(lineage, 'judge_version'), '') END) AS judge_version,
    coalesce(
      CASE WHEN strpos(lineage, 'system_prompt_sha') > 0 THEN nullif(json_as_text(lineage, 'system_prompt_sha'), '') END,
      CASE WHEN strpos(policy_version, '@') > 0 THEN nullif(substr(policy_version, strpos(policy_version, '@') + 1), '') END
    ) AS prompt_hash,
    nullif(user_model, '') AS user_model,
    CASE WHEN writer_model <> '' AND writer_model <> 'pinned' THEN writer_model END AS writer_model,
    think_state(final_text) AS spoken
  FROM __pass_at_rows
)
SELECT
  slice,
  count(*) AS rows,
  count(reward) AS graded,
  min(reward) AS reward_min,
  max(reward) AS reward_max,
  count(CASE WHEN judge_status <> '' THEN 1 END) AS status_rows,
  count(CASE WHEN judge_status <> '' AND judge_status <> 'ok' THEN 1 END) AS failed_rows,
  array_agg(DISTINCT CASE WHEN judge_status <> '' AND judge_status <> 'ok' THEN judge_status END) AS failed_statuses,
  min(CASE WHEN judge_status <> '' AND judge_status <> 'ok' AND reason <> '' THEN reason END) AS failed_reason,
  count(finish_reason) AS finish_rows,
  count(CASE WHEN finish_reason = 'length' THEN 1 END) AS truncated_rows,
  count(CASE WHEN spoken & 4 = 0 THEN 1 END) AS spoken_known,
  count(CASE WHEN spoken & 1 = 1 THEN 1 END) AS spoken_answered,
  count(CASE WHEN spoken & 2 = 2 THEN 1 END) AS spoken_unclosed,
  count(CASE WHEN spoken IS NULL OR spoken & 4 = 4 THEN 1 END) AS blank_final,
  count(DISTINCT temperature) AS temperature_n, min(temperature) AS temperature,
  count(DISTINCT max_tokens) AS max_tokens_n, min(max_tokens) AS max_tokens,
  count(DISTINCT policy_version) AS policy_version_n, min(policy_version) AS policy_version,
  count(DISTINCT judge_version) AS judge_version_n, min(judge_version) AS judge_version,
  count(DISTINCT prompt_hash) AS prompt_hash_n, min(prompt_hash) AS prompt_hash,
  count(DISTINCT user_model) AS user_model_n, min(user_model) AS user_model,
  count(DISTINCT writer_model) AS writer_model_n, min(writer_model) AS writer_model
FROM r
GROUP BY slice
ORDER BY slice
