//! The conversion's tests: the reference's rows, conversations, the leak gate, and the column path against the general one on every fixture.

use serde_json::{Map, Value, json};

use super::*;
use crate::stages::messages::conversation;
use crate::stages::task_key::task_key;

fn opts(format: Format) -> Options {
    Options {
        system_prompt: Some("Be brief.".into()),
        tools: Some(vec![
            json!({"type": "function", "function": {"name": "lookup_order"}}),
        ]),
        strip_think: true,
        mask_mode: MaskMode::Assistant,
        unroll: false,
        max_tool_output_chars: None,
        format,
        datasets: false,
        no_validate: false,
    }
}

fn row() -> Map<String, Value> {
    json!({"prompt": "Where is A1002?", "scenario_id": "sc-demo", "rollout_index": 0, "reward": 1, "reason": "ok",
           "steps": [{"tool": "lookup_order", "arguments": {"order_id": "A1002"}, "result": {"status": "ok", "data": {"id": 27111, "status": "open"}}}],
           "final_text": "<think>hm</think> A1002 is open.", "lineage": {"source": "grade"}})
    .as_object()
    .unwrap()
    .clone()
}

#[test]
fn the_reference_wire_row() {
    let (rows, facts) = training_rows(&row(), &opts(Format::Openai), &Groups::default());
    let r = Value::Object(rows[0].clone());
    // OpenAI's per-message switch, on assistant messages only; no mask column.
    let weights: Vec<&Value> = r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["weight"])
        .collect();
    assert_eq!(
        weights,
        [
            &Value::Null,
            &Value::Null,
            &json!(1),
            &Value::Null,
            &json!(1)
        ]
    );
    assert!(
        r["messages"][3].get("name").is_none(),
        "{}",
        r["messages"][3]
    );
    assert_eq!(r["messages"][2]["tool_calls"][0]["id"], "call_0000");
    assert_eq!(
        r["messages"][2]["tool_calls"][0]["function"]["arguments"],
        "{\"order_id\":\"A1002\"}"
    );
    assert_eq!(r["messages"][3]["tool_call_id"], "call_0000");
    assert_eq!(r["messages"][4]["content"], "A1002 is open.");
    let keys: Vec<&String> = rows[0].keys().collect();
    assert_eq!(
        keys,
        [
            "messages",
            "tools",
            "reward",
            "reason",
            "prompt",
            "scenario_id",
            "lineage",
            "schema_version"
        ]
    );
    assert_eq!(
        (
            facts.calls,
            facts.invalid_calls,
            facts.trained,
            facts.masked,
            facts.trl_trained
        ),
        (1, 0, 2, 0, 2)
    );
    // The fine-tuning line holds messages and tools; the rest is metadata, in order.
    let (line, meta) = split_openai(&rows[0]);
    assert_eq!(line.keys().collect::<Vec<_>>(), ["messages", "tools"]);
    assert_eq!(meta.keys().next().map(String::as_str), Some("reward"));
    // A final mask weighs the earlier assistant turn 0; TRL would still train both.
    let mut o = opts(Format::Openai);
    o.mask_mode = MaskMode::Final;
    let (rows, facts) = training_rows(&row(), &o, &Groups::default());
    assert_eq!(rows[0]["messages"][2]["weight"], 0);
    assert_eq!(rows[0]["messages"][4]["weight"], 1);
    assert_eq!((facts.trained, facts.masked, facts.trl_trained), (1, 1, 2));
    let (rows, _) = training_rows(&row(), &opts(Format::Trl), &Groups::default());
    assert_eq!(
        rows[0]["messages"][2]["tool_calls"][0]["function"]["arguments"],
        json!({"order_id": "A1002"})
    );
    assert_eq!(rows[0].keys().next_back().unwrap(), "prompt_text");
    assert!(rows[0].get("loss_mask").is_none());
    let mut o = opts(Format::Trl);
    o.mask_mode = MaskMode::Final;
    let (rows, facts) = training_rows(&row(), &o, &Groups::default());
    assert_eq!(
        rows[0]["completion"],
        json!([{"role": "assistant", "content": "A1002 is open."}])
    );
    assert_eq!(rows[0]["prompt"].as_array().unwrap().len(), 4);
    assert_eq!((facts.trained, facts.masked, facts.trl_trained), (1, 1, 1));
}

#[test]
fn a_conversation_ends_on_what_the_policy_wrote() {
    // A tool result the agent never answered: cut, and counted; the completion of a final
    // mask is the last assistant turn alone, never a tool turn after it.
    let r = json!({"prompt": "Refund A1", "messages": [
        {"role": "user", "content": "Refund A1"},
        {"role": "assistant", "content": "Looking.", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{\"id\":\"A1\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"status\":\"ok\"}"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "refund", "arguments": "{\"id\":\"A1\"}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "{\"status\":\"error\"}"}]})
    .as_object()
    .unwrap()
    .clone();
    for format in [Format::Openai, Format::Trl] {
        let mut o = opts(format);
        o.mask_mode = MaskMode::Final;
        let (rows, facts) = training_rows(&r, &o, &Groups::default());
        assert_eq!(facts.trailing_cut, 1, "{format:?}");
        let turns = rows[0]
            .get("completion")
            .or_else(|| rows[0].get("messages"))
            .and_then(Value::as_array)
            .unwrap();
        assert_eq!(turns.last().unwrap()["role"], "assistant", "{format:?}");
        assert_eq!(
            turns.last().unwrap()["tool_calls"][0]["id"],
            "c2",
            "{format:?}"
        );
    }
    // No assistant turn: nothing to train, nothing written.
    let bare = json!({"prompt": "hi", "messages": [{"role": "user", "content": "hi"}]})
        .as_object()
        .unwrap()
        .clone();
    let (rows, facts) = training_rows(&bare, &opts(Format::Openai), &Groups::default());
    assert!(rows.is_empty() && facts.no_completion);
}

#[test]
fn the_export_gate_reads_every_exported_field() {
    // A reason that quotes the reference leaks it, whatever the turns say; a tool result
    // (what the world told the agent) is not read.
    let mut r = row();
    r.insert(
        "privileged".into(),
        json!({"reference": "VAULTANSWERSECRET42", "rubric": "must cite the tracking page"}),
    );
    r.insert(
        "reason".into(),
        json!("no match; want \"VAULTANSWERSECRET42\""),
    );
    for format in [Format::Openai, Format::Trl] {
        let (_, facts) = training_rows(&r, &opts(format), &Groups::default());
        assert_eq!(
            facts.leak.as_deref(),
            Some("vaultanswersecret42"),
            "{format:?}"
        );
    }
    r.insert("reason".into(), json!("ok"));
    r["steps"][0]["result"] = json!({"note": "must cite the tracking page"});
    let (_, facts) = training_rows(&r, &opts(Format::Openai), &Groups::default());
    assert_eq!(facts.leak, None);
    assert!(facts.privileged);
    // The correct answer, given as the final reply, passes.
    r.insert("final_text".into(), json!("VAULTANSWERSECRET42"));
    let (_, facts) = training_rows(&r, &opts(Format::Trl), &Groups::default());
    assert_eq!(facts.leak, None);
}

#[test]
fn leaks_are_found_and_the_final_reply_is_kept() {
    let mut r = row();
    r.insert(
        "privileged".into(),
        json!({"reference": "the entity does not exist: say so"}),
    );
    r.insert(
        "final_text".into(),
        json!("Note: The entity does NOT exist: say so."),
    );
    let (_, facts) = training_rows(&r, &opts(Format::Openai), &Groups::default());
    assert_eq!(
        facts.leak.as_deref(),
        Some("the entity does not exist: say so")
    );
    // A step text then a different final reply: both turns are kept (reference bug 9).
    let r = json!({"prompt": "p", "steps": [{"text": "Let me check."}], "final_text": "Done."})
        .as_object()
        .unwrap()
        .clone();
    let msgs = conversation(&r);
    assert_eq!(msgs.last().unwrap()["content"], "Done.");
    assert_eq!(msgs.len(), 3);
}

#[test]
fn column_rows_equal_the_general_ones_on_every_fixture() {
    use crate::pipeline::row::testing::{ROW_FIXTURES, batch_of, fixture};
    use crate::pipeline::row::{BatchView, encode};
    let option_sets = [
        opts(Format::Openai),
        Options {
            system_prompt: None,
            tools: None,
            strip_think: false,
            mask_mode: MaskMode::Final,
            unroll: false,
            max_tool_output_chars: Some(20),
            format: Format::Openai,
            datasets: false,
            no_validate: false,
        },
        Options {
            system_prompt: Some(String::new()),
            tools: Some(Vec::new()),
            strip_think: true,
            mask_mode: MaskMode::Assistant,
            unroll: false,
            max_tool_output_chars: Some(0),
            format: Format::Openai,
            datasets: false,
            no_validate: false,
        },
    ];
    let mut fast_rows = 0;
    let mut shape_rows = 0;
    let mut stamped = 0;
    let mut seen_eval = false;
    let sets = ROW_FIXTURES.map(|f| (f, fixture(f)));
    for (name, rows) in sets.into_iter().chain([
        ("made", crate::stages::select::tests::made_rows()),
        // Every shape a conversation comes in (rows without messages are rebuilt).
        ("shapes", crate::stages::conversation::shape_rows().0),
    ]) {
        let batch = batch_of(rows);
        let view = BatchView::new(&batch).expect("view");
        // The column path reads text views, as `wai export` reads the rows.
        let views = crate::pipeline::row::testing::with_text_views(&batch);
        let wire = Wire::of(&views).expect("columns");
        let encoded: Vec<Map<String, Value>> = (0..batch.num_rows())
            .map(|i| encode(&view, i).expect("row"))
            .collect();
        let mut groups = Groups::default();
        for r in &encoded {
            groups.add(&task_key(r), r.get("reward").and_then(Value::as_f64));
        }
        for o in &option_sets {
            let mut cache = WireCache::default();
            for (i, row) in encoded.iter().enumerate() {
                let mut fast = Vec::new();
                let mut fast_meta = Vec::new();
                let Some((facts, side)) = wire
                    .write_row(i, o, &groups, &mut cache, &mut fast, &mut fast_meta)
                    .expect("written")
                else {
                    assert!(fast.is_empty() && fast_meta.is_empty());
                    continue;
                };
                fast_rows += 1;
                shape_rows += usize::from(name == "shapes");
                let (general, general_facts) = training_rows(row, o, &groups);
                assert_eq!(general.len(), 1);
                let (line, meta) = split_openai(&general[0]);
                let mut bytes = serde_json::to_vec(&line).expect("JSON");
                bytes.push(b'\n');
                let mut meta_bytes = serde_json::to_vec(&meta).expect("JSON");
                meta_bytes.push(b'\n');
                assert_eq!(
                    String::from_utf8_lossy(&fast),
                    String::from_utf8_lossy(&bytes),
                    "{name} row {i}"
                );
                assert_eq!(
                    String::from_utf8_lossy(&fast_meta),
                    String::from_utf8_lossy(&meta_bytes),
                    "{name} row {i}: metadata"
                );
                assert_eq!(facts, general_facts, "{name} row {i}");
                assert_eq!(side.with_tools, line.contains_key("tools"));
                assert_eq!(
                    side.group.as_deref(),
                    general[0].get("group_id").and_then(Value::as_str)
                );
                stamped += usize::from(side.group.is_some());
                assert_eq!(side.reward, row.get("reward").and_then(Value::as_f64));
                let lineage = |k: &str| row.get("lineage").and_then(|l| l.get(k)).cloned();
                assert_eq!(side.eval_sourced, lineage("source") == Some(json!("eval")));
                assert_eq!(side.has_policy_sha, lineage("system_prompt_sha").is_some());
                assert_eq!(
                    side.calls_tools,
                    row.get("tools_used")
                        .and_then(Value::as_array)
                        .is_some_and(|a| !a.is_empty())
                        || row
                            .get("steps")
                            .and_then(Value::as_array)
                            .is_some_and(|s| s.iter().any(|x| x.get("tool").is_some()))
                );
                assert_eq!(
                    side.with_system,
                    general[0]["messages"][0]["role"] == "system"
                );
                seen_eval |= side.eval_sourced && side.has_policy_sha;
            }
        }
    }
    assert!(fast_rows > 1000, "{fast_rows} rows took the column path");
    // Of the shapes, all but the object path's four (string arguments, content parts, a
    // `tool_trace`, an opener) and one with nothing to train, under each option set.
    assert_eq!(shape_rows, 3 * 7, "shape rows that took the column path");
    assert!(stamped > 0);
    assert!(seen_eval);
}
