// wai report: the transcript browser. Reads the page's embedded data (#wai-data) and builds the
// list, the filters and the row view with DOM calls only: every string from the rows is set as
// text, never parsed as HTML, so a row cannot put markup or script on the page.
(function () {
  "use strict";
  var node = document.getElementById("wai-data");
  if (!node) return;
  var data = JSON.parse(node.textContent);
  var t = data.transcripts;
  var root = document.getElementById("transcripts");
  if (!t || !root) return;
  var rows = t.rows;
  // Rows by their key (their id; `id#2` for a later row sharing an id).
  var byKey = new Map();
  rows.forEach(function (r) { byKey.set(r.key || r.id, r); });
  var PAGE = 100;
  var shown = PAGE;
  // A task a link asked for (`#task=ID`): its rows exactly, until the search or a filter changes.
  var taskFilter = null;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function $(id) { return document.getElementById(id); }

  function verdictOf(r) {
    if (r.reward === null || r.reward === undefined) return "unjudged";
    return r.reward >= 1 ? "pass" : "fail";
  }
  function fill(select, values) {
    values.forEach(function (v) {
      var o = el("option", null, v);
      o.value = v;
      select.appendChild(o);
    });
  }
  function distinct(get) {
    var seen = new Set();
    rows.forEach(function (r) { get(r).forEach(function (v) { if (typeof v === "string" && v !== "") seen.add(v); }); });
    return Array.from(seen).sort();
  }
  function decoded(text) {
    try { return decodeURIComponent(text); } catch (e) { return text; }
  }

  var q = $("t-search"), fv = $("t-verdict"), ft = $("t-tool"), fi = $("t-tier"),
      fs = $("t-slice"), fj = $("t-status"), fm = $("t-marker");
  fill(ft, distinct(function (r) { return r.tools || []; }));
  fill(fi, distinct(function (r) { return [r.dims && r.dims.tier]; }));
  fill(fs, distinct(function (r) {
    return Object.keys(r.dims || {}).filter(function (k) {
      return k !== "tier" && typeof r.dims[k] === "string" && (t.slice_keys || []).indexOf(k) >= 0;
    }).map(function (k) { return k + "=" + r.dims[k]; });
  }));
  fill(fj, distinct(function (r) { return [r.status]; }));
  fill(fm, distinct(function (r) { return r.failed_markers || []; }));

  function matches(r) {
    if (taskFilter !== null && r.task !== taskFilter) return false;
    var needle = q.value.trim().toLowerCase();
    if (needle) {
      var hay = [r.prompt, r.final, r.reason, r.id, r.task].join("\n").toLowerCase();
      if (hay.indexOf(needle) < 0) return false;
    }
    if (fv.value && verdictOf(r) !== fv.value) return false;
    if (ft.value && (r.tools || []).indexOf(ft.value) < 0) return false;
    if (fi.value && !(r.dims && r.dims.tier === fi.value)) return false;
    if (fs.value) {
      var i = fs.value.indexOf("=");
      var k = fs.value.slice(0, i), v = fs.value.slice(i + 1);
      if (!(r.dims && r.dims[k] === v)) return false;
    }
    if (fj.value && r.status !== fj.value) return false;
    if (fm.value && (r.failed_markers || []).indexOf(fm.value) < 0) return false;
    return true;
  }

  function render() {
    var list = $("t-list");
    list.replaceChildren();
    var found = rows.filter(matches);
    found.slice(0, shown).forEach(function (r) {
      var li = el("li", "t-item");
      var a = el("a");
      a.href = "#row=" + encodeURIComponent(r.key || r.id);
      a.dataset.id = r.key || r.id;
      var v = verdictOf(r);
      a.appendChild(el("span", "badge " + v, v));
      a.appendChild(el("span", "t-prompt", r.prompt || "(no prompt)"));
      var meta = [(r.tools || []).join(", ") || "no tool call"];
      if (r.dims && r.dims.tier) meta.push(r.dims.tier);
      if (r.status && r.status !== "ok") meta.push("judge: " + r.status);
      a.appendChild(el("span", "t-meta", meta.join(" · ")));
      li.appendChild(a);
      list.appendChild(li);
    });
    $("t-count").textContent = (taskFilter !== null ? "task " + taskFilter + ": " : "") +
      found.length + " of " + rows.length + " rows in this page match" +
      (found.length > shown ? " (first " + shown + " listed)" : "");
    $("t-more").hidden = found.length <= shown;
  }

  // A text of more than FOLD lines is folded under its name and line count (click to open), so
  // a long tool result does not push the rest of the conversation out of sight.
  var FOLD = 12;
  function folded(name, text, cls) {
    var lines = String(text).split("\n").length;
    if (lines <= FOLD) {
      var box = el("div");
      box.appendChild(el("div", "sub", name));
      box.appendChild(el("pre", cls, text));
      return box;
    }
    var details = el("details");
    details.appendChild(el("summary", "sub", name + " (" + lines + " lines)"));
    details.appendChild(el("pre", cls, text));
    return details;
  }

  function kv(parent, key, value) {
    parent.appendChild(el("dt", null, key));
    parent.appendChild(el("dd", null, value));
  }
  function block(title, text, cls) {
    var d = el("div", "turn " + (cls || ""));
    d.appendChild(el("div", "who", title));
    d.appendChild(el("pre", null, text));
    return d;
  }

  function openRow(id, quiet) {
    var r = byKey.get(id);
    var view = $("t-row");
    view.replaceChildren();
    if (!r) {
      view.appendChild(el("p", "muted", "Row " + id + " is not among the rows this page holds."));
      view.hidden = false;
      return;
    }
    var v = verdictOf(r);
    var head = el("div", "row-head");
    head.appendChild(el("span", "badge " + v, v));
    head.appendChild(el("h3", null, "Row " + r.id));
    view.appendChild(head);
    var meta = el("dl", "row-meta");
    kv(meta, "task", r.task);
    if (r.index !== null && r.index !== undefined) kv(meta, "repeat", r.index);
    kv(meta, "reward", r.reward === null || r.reward === undefined ? "none" : r.reward);
    if (r.status) kv(meta, "judge status", r.status);
    if (r.judge) kv(meta, "judge", r.judge);
    if (r.model) kv(meta, "model", r.model);
    if (r.finish) kv(meta, "finish", r.finish);
    Object.keys(r.dims || {}).forEach(function (k) { kv(meta, "dims." + k, r.dims[k]); });
    view.appendChild(meta);

    var convo = el("div", "conversation");
    convo.setAttribute("aria-label", "conversation");
    if (r.prompt) convo.appendChild(block("user", r.prompt, "user"));
    (r.turns || []).forEach(function (turn) {
      if (turn.kind === "tool") {
        var d = el("div", "turn tool" + (turn.error ? " error" : ""));
        var who = el("div", "who", "tool call: " + turn.tool);
        if (turn.fault) who.appendChild(el("span", "fault", "fault injected: " + turn.fault));
        else if (turn.error) who.appendChild(el("span", "fault", "error"));
        d.appendChild(who);
        d.appendChild(folded("arguments", turn.args, "args"));
        d.appendChild(folded("result", turn.result === null || turn.result === undefined ? "(no result)" : turn.result, "result"));
        convo.appendChild(d);
      } else {
        convo.appendChild(block(turn.kind === "user" ? "user" : "agent", turn.text, turn.kind));
      }
    });
    if (r.final) convo.appendChild(block("agent (final reply)", r.final, "agent final"));
    view.appendChild(convo);

    var verdict = el("div", "verdict");
    verdict.appendChild(el("h4", null, "Verdict"));
    verdict.appendChild(el("p", null, v + (r.reason ? ": " + r.reason : "")));
    var marks = Object.keys(r.markers || {});
    if (marks.length) {
      var ul = el("ul", "markers");
      marks.forEach(function (m) {
        var val = r.markers[m];
        var word = val === null ? "does not apply" : (val >= 1 ? "kept" : "broken");
        ul.appendChild(el("li", "marker " + (val === null ? "na" : val >= 1 ? "kept" : "broken"), m + ": " + word + (val === null ? "" : " (" + val + ")")));
      });
      verdict.appendChild(ul);
    }
    view.appendChild(verdict);
    if (r.faults && r.faults.length) {
      view.appendChild(el("h4", null, "Faults the world injected"));
      view.appendChild(el("pre", null, JSON.stringify(r.faults, null, 2)));
    }
    if (r.lineage) {
      view.appendChild(el("h4", null, "Lineage"));
      view.appendChild(el("pre", null, JSON.stringify(r.lineage, null, 2)));
    }
    if (r.clipped) view.appendChild(el("p", "muted", r.clipped + " characters cut from long texts of this row (the rows file has them whole)."));
    view.hidden = false;
    if (!quiet) view.scrollIntoView({ block: "start" });
  }

  function fromHash() {
    var m = /^#row=(.*)$/.exec(location.hash);
    if (m) { openRow(decoded(m[1])); return; }
    // A link from another section (a judge's disagreement) names a task: list exactly its rows
    // (the search and filters cleared), open the first.
    var task = /^#task=(.*)$/.exec(location.hash);
    if (task) {
      taskFilter = decoded(task[1]);
      q.value = "";
      [fv, ft, fi, fs, fj, fm].forEach(function (e) { e.value = ""; });
      shown = PAGE;
      render();
      var first = rows.filter(function (r) { return r.task === taskFilter; })[0];
      if (first) openRow(first.key || first.id);
      else {
        var view = $("t-row");
        view.replaceChildren(el("p", "muted", "No row of task " + taskFilter + " is among the rows this page holds."));
        view.hidden = false;
        root.scrollIntoView({ block: "start" });
      }
    }
  }

  [q].forEach(function (e) { e.addEventListener("input", function () { taskFilter = null; shown = PAGE; render(); }); });
  [fv, ft, fi, fs, fj, fm].forEach(function (e) { e.addEventListener("change", function () { taskFilter = null; shown = PAGE; render(); }); });
  $("t-more").addEventListener("click", function () { shown += PAGE; render(); });
  $("t-list").addEventListener("click", function (ev) {
    var a = ev.target.closest("a[data-id]");
    if (!a) return;
    ev.preventDefault();
    history.replaceState(null, "", "#row=" + encodeURIComponent(a.dataset.id));
    openRow(a.dataset.id);
  });
  window.addEventListener("hashchange", fromHash);
  render();
  if (/^#(row|task)=/.test(location.hash)) fromHash();
  else if (rows.length) openRow(rows[0].key || rows[0].id, true);
})();
