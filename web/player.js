// seqtape step-through player: reads a seqtape-trace (web/TRACE_FORMAT.md) and shows it frame by
// frame. A classic script (no modules, no build step) so the page also works from file://.
(function () {
  "use strict";

  var $ = function (id) { return document.getElementById(id); };
  var state = { trace: null, frames: [], at: 0, timer: null, pick: { kind: "self", layer: 0, head: 0 } };

  // ---- loading ---------------------------------------------------------------------------

  function validate(t) {
    if (!t || typeof t !== "object") throw new Error("not a JSON object");
    if (t.format !== "seqtape-trace") throw new Error('"format" is not "seqtape-trace"');
    if (t.version !== 1) throw new Error("unsupported version " + t.version + " (this player reads 1)");
    if (!Array.isArray(t.steps) || t.steps.length === 0) throw new Error('"steps" is missing or empty');
    if (!Array.isArray(t.vocab)) throw new Error('"vocab" is missing');
    if (!t.input || !Array.isArray(t.input.ids)) throw new Error('"input.ids" is missing');
    t.steps.forEach(function (s, i) {
      ["fed", "sequence", "candidates"].forEach(function (k) {
        if (!Array.isArray(s[k])) throw new Error("steps[" + i + "]." + k + " is missing");
      });
      // null only for a pruned beam hypothesis
      if (s.selected !== null && (!s.selected || typeof s.selected.id !== "number"))
        throw new Error("steps[" + i + "].selected is missing");
    });
    return t;
  }

  function showError(msg) {
    var e = $("load-error");
    e.textContent = msg;
    e.hidden = !msg;
  }

  function load(trace, name) {
    try {
      state.trace = validate(trace);
    } catch (err) {
      showError("Cannot read " + name + ": " + err.message);
      return false;
    }
    showError("");
    state.frames = buildFrames(state.trace);
    $("trace-name").textContent = "Showing: " + name;
    pause();
    var m = /step=(\d+)/.exec(window.location.hash);  // #step=N opens at step N (links, screenshots)
    go(m ? Number(m[1]) - 1 : 0);
    return true;
  }

  function loadText(text, name) {
    var t;
    try {
      t = JSON.parse(text);
    } catch (err) {
      showError("Cannot read " + name + ": invalid JSON (" + err.message + ")");
      return;
    }
    load(t, name);
  }

  function loadFile(file) {
    var r = new FileReader();
    r.onload = function () { loadText(String(r.result), file.name); };
    r.onerror = function () { showError("Cannot read " + file.name); };
    r.readAsText(file);
  }

  // ---- frames ----------------------------------------------------------------------------

  // One opening frame with the input alone, then per step: the call, the scores, the selection.
  function buildFrames(t) {
    var frames = [{ kind: "input" }];
    t.steps.forEach(function (s) {
      frames.push({ kind: "process", step: s });
      frames.push({ kind: "score", step: s });
      frames.push({ kind: "select", step: s });
    });
    return frames;
  }

  function tokenText(id) {
    var v = state.trace.vocab;
    return id >= 0 && id < v.length ? v[id] : "#" + id;
  }

  function prompt() {
    return state.trace.decoder_prompt || state.trace.input.ids;
  }

  function ids(list) { return "[" + list.join(",") + "]"; }
  function toks(list) { return list.map(tokenText).join(" "); }
  function fmt(p, d) { return Number(p).toFixed(d === undefined ? 3 : d); }

  function stopText(s) {
    if (!s.stop || !s.stop.stopped) return "continue";
    return "stop: " + s.stop.reason;
  }

  function roundLabel(s) {
    var beam = state.trace.search && state.trace.search.kind === "beam";
    if (!beam) return "Round " + (s.index + 1);
    return "Round " + (s.index + 1) + (s.hypothesis === null || s.hypothesis === undefined
      ? " · a hypothesis that ends (from " + s.parent + ")"
      : " · hypothesis " + s.hypothesis + " (from " + s.parent + ")");
  }

  function caption(f) {
    if (f.kind === "input") {
      var p = prompt();
      return 'Input is "' + (state.trace.input.text || toks(state.trace.input.ids)) + '" = ' +
        ids(state.trace.input.ids) + "; nothing generated yet. Cache length 0." +
        (state.trace.decoder_prompt ? " The decoder starts from " + toks(p) + "." : "");
    }
    var s = f.step;
    if (f.kind === "process") {
      if (s.phase === "prefill")
        return roundLabel(s) + " · prefill: process the " + s.fed.length + " given token(s) " +
          toks(s.fed) + " " + ids(s.fed) + " in one call; the cache grows " + s.cache_before +
          " → " + s.cache_after + ".";
      return roundLabel(s) + " · decode: feed only the token selected last round, " + toks(s.fed) +
        " " + ids(s.fed) + "; the cache grows " + s.cache_before + " → " + s.cache_after +
        ". The history is not re-run: it is read from the cache.";
    }
    var best = s.candidates[0] || s.selected || { token: "–", prob: 0 };
    if (f.kind === "score")
      return roundLabel(s) + ": the last processed position scores every candidate; the highest is " +
        best.token + " (" + fmt(best.prob) + ").";
    var out = s.sequence.length, cache = s.cache_after;
    if (!s.selected)
      return roundLabel(s) + ": none of this hypothesis' candidates is among the " +
        (state.trace.search.beam_size || "") + " best of the round: it is pruned.";
    var msg = roundLabel(s) + ": select " + s.selected.token + " (" + fmt(s.selected.prob) + "). " +
      "It is appended but not yet processed: output " + out + " tokens, cache " + cache + ". ";
    if (s.stop && s.stop.stopped)
      msg += "Stop check: " + s.stop.reason + " — decoding ends.";
    else
      msg += "Stop check: no stop, the next round feeds " + s.selected.token + ".";
    return msg;
  }

  // ---- rendering -------------------------------------------------------------------------

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  var STATE_LABEL = {
    processed: "processed",
    feeding: "feeding now",
    pending: "pending",
    selected: "selected · pending"
  };

  // Encoder-decoder traces: the source sentence the decoder attends to, above the output.
  function renderSource() {
    var p = $("source");
    var t = state.trace;
    p.hidden = !t.decoder_prompt;
    if (p.hidden) return;
    p.textContent = "";
    p.appendChild(el("b", "", "Source: "));
    p.appendChild(document.createTextNode((t.input.text || "") + "  (" + toks(t.input.ids) + ")"));
  }

  function renderTokens(f) {
    renderSource();
    var box = $("tokens");
    box.textContent = "";
    var seq, status;
    if (f.kind === "input") {
      seq = prompt();
      status = function () { return "pending"; };
    } else {
      var s = f.step;
      var pruned = !s.selected;
      seq = f.kind === "select" || pruned ? s.sequence : s.sequence.slice(0, s.sequence.length - 1);
      status = function (i) {
        if (f.kind === "select" && !pruned && i === seq.length - 1) return "selected";
        if (f.kind === "process" && i >= s.cache_before && i < s.cache_after) return "feeding";
        return i < s.cache_after ? "processed" : "pending";
      };
    }
    seq.forEach(function (id, i) {
      var st = status(i);
      var t = el("div", "tok " + st);
      t.setAttribute("data-state", st);
      t.appendChild(el("span", "t", tokenText(id)));
      t.appendChild(el("span", "meta", "pos " + i + " · id " + id));
      t.appendChild(el("span", "state", STATE_LABEL[st]));
      t.title = tokenText(id) + " (id " + id + ", position " + i + "): " + STATE_LABEL[st];
      box.appendChild(t);
    });
  }

  function renderCache(f) {
    var box = $("cache");
    box.textContent = "";
    var n = f.kind === "input" ? 0 : f.step.cache_after;
    var before = f.kind === "process" ? f.step.cache_before : n;
    var seq = f.kind === "input" ? prompt() : f.step.sequence;
    $("cache-length").textContent = String(n);
    $("phase").textContent = f.kind === "input" ? "–" : f.step.phase;
    if (n === 0) box.appendChild(el("div", "slot empty", "empty"));
    for (var i = 0; i < n; i++) {
      var isNew = i >= before;
      var slot = el("div", "slot" + (isNew ? " new" : ""));
      slot.appendChild(el("span", "", tokenText(seq[i])));
      slot.appendChild(el("span", "k", "K/V " + i + (isNew ? " · new" : "")));
      slot.title = "cache position " + i + ": K/V of " + tokenText(seq[i]) + (isNew ? " (added this round)" : "");
      box.appendChild(slot);
    }
  }

  function renderCandidates(f) {
    var box = $("candidates");
    box.textContent = "";
    var showScores = f.kind === "score" || f.kind === "select";
    $("selected-token").textContent =
      f.kind !== "select" ? "–" : f.step.selected ? f.step.selected.token : "none (pruned)";
    $("stop").textContent = f.kind === "select" ? stopText(f.step) : "–";
    var d = f.kind === "input" ? null : f.step.max_abs_delta;
    $("delta").textContent = d === null || d === undefined ? "–" : Number(d).toExponential(1);
    if (!showScores) {
      box.appendChild(el("p", "placeholder", f.kind === "process"
        ? "Scores appear once the call has finished (next frame)."
        : "No call yet."));
      return;
    }
    var cands = f.step.candidates.slice();
    var selId = f.step.selected ? f.step.selected.id : -1;
    if (f.step.selected && !cands.some(function (c) { return c.id === selId; })) cands.push(f.step.selected);
    cands.forEach(function (c, i) {
      box.appendChild(el("span", "cand-token", c.token + "  (" + c.id + ")"));
      var bar = el("div", "cand-bar");
      var fill = el("span");
      fill.style.width = Math.max(0, Math.min(1, c.prob)) * 100 + "%";
      bar.appendChild(fill);
      bar.title = c.token + ": probability " + fmt(c.prob, 4);
      bar.setAttribute("role", "img");
      bar.setAttribute("aria-label", c.token + " probability " + fmt(c.prob, 3));
      box.appendChild(bar);
      box.appendChild(el("span", "cand-prob", fmt(c.prob)));
      var mark = "";
      if (f.kind === "select" && c.id === selId) mark = "✓ selected";
      else if (f.kind === "score" && i === 0) mark = "highest";
      box.appendChild(el("span", "cand-mark", mark));
    });
  }

  // Token labels of an attention map's queries and keys: decoder self-attention is over the
  // decoded sequence, cross-attention reads the source, the encoder attends within the source.
  function axes(a, seq) {
    var src = state.trace.input.ids;
    var enc = /^encoder\./.test(a.name);
    return { q: enc ? src : seq, k: enc || a.kind === "cross" ? src : seq, causal: !enc && a.kind === "self" };
  }

  // The picker's kind of a map: the encoder's self-attention, the decoder's self or cross.
  function attnKind(a) {
    return /^encoder\./.test(a.name) ? "encoder self" : a.kind === "cross" ? "cross" : "self";
  }

  // Fills a <select> with `values`, keeping `want` selected when it is one of them.
  function fillSelect(sel, values, want) {
    var keep = values.indexOf(want) >= 0 ? want : values[0];
    sel.textContent = "";
    values.forEach(function (v) {
      var o = el("option", "", String(v));
      o.value = String(v);
      sel.appendChild(o);
    });
    sel.value = String(keep);
    sel.disabled = values.length < 2;
    return keep;
  }

  function unique(list) {
    return list.filter(function (v, i) { return list.indexOf(v) === i; });
  }

  // The one map the picker (kind, layer, head) selects among this step's maps; the choice is
  // kept across steps where it exists.
  function pickAttention(maps) {
    var pick = state.pick;
    pick.kind = fillSelect($("attn-kind"), unique(maps.map(attnKind)), pick.kind);
    var ofKind = maps.filter(function (a) { return attnKind(a) === pick.kind; });
    pick.layer = fillSelect($("attn-layer"), unique(ofKind.map(function (a) { return a.layer; })), pick.layer);
    var ofLayer = ofKind.filter(function (a) { return a.layer === pick.layer; });
    pick.head = fillSelect($("attn-head"), unique(ofLayer.map(function (a) { return a.head; })), pick.head);
    return ofLayer.filter(function (a) { return a.head === pick.head; })[0];
  }

  function heatmap(a, seq) {
    var wrap = el("div", "heatmap-box");
    wrap.appendChild(el("div", "heatmap-title", a.name + " · head " + a.head + " · " + a.kind +
      "-attention (rows: queries fed this round, columns: keys)"));
    var table = el("table", "heatmap");
    table.setAttribute("aria-label", a.name + " head " + a.head + " attention weights");
    var head = el("tr");
    var ax = axes(a, seq);
    head.appendChild(el("th", "", "q \\ k"));
    a.cols.forEach(function (c) {
      head.appendChild(el("th", "", tokenText(ax.k[c]) + " " + c));
    });
    table.appendChild(head);
    a.rows.forEach(function (r, ri) {
      var tr = el("tr");
      tr.appendChild(el("th", "", tokenText(ax.q[r]) + " " + r));
      a.cols.forEach(function (c, ci) {
        var w = a.weights[ri][ci];
        var masked = ax.causal && c > r;
        var td = el("td", masked ? "masked" : "", masked ? "–" : fmt(w, 2));
        td.title = "query " + tokenText(ax.q[r]) + " (pos " + r + ") → key " + tokenText(ax.k[c]) + " (pos " + c + "): " +
          (masked ? "masked (future position), weight 0" : fmt(w, 4));
        if (!masked) {
          td.style.background = "rgba(74,127,181," + Math.max(0.04, w) + ")";
          td.style.color = w > 0.55 ? "#fff" : "";
        }
        tr.appendChild(td);
      });
      table.appendChild(tr);
    });
    wrap.appendChild(table);
    return wrap;
  }

  function renderAttention(f) {
    var box = $("attention");
    box.textContent = "";
    var maps = f.kind === "input" || !f.step.attention ? [] : f.step.attention;
    if (maps.length === 0) {
      ["attn-kind", "attn-layer", "attn-head"].forEach(function (id) {
        $(id).textContent = "";
        $(id).disabled = true;
      });
      box.appendChild(el("p", "placeholder", f.kind === "input" ? "No call yet." : "No attention recorded in this trace."));
      return;
    }
    box.appendChild(heatmap(pickAttention(maps), f.step.sequence));
  }

  function render() {
    var f = state.frames[state.at];
    var n = state.frames.length;
    $("counter").textContent = (state.at + 1) + " / " + n;
    $("player").setAttribute("data-frame", String(state.at + 1));
    $("player").setAttribute("data-frames", String(n));
    $("caption").textContent = caption(f);
    renderTokens(f);
    renderCache(f);
    renderCandidates(f);
    renderAttention(f);
    $("prev").disabled = state.at === 0;
    $("next").disabled = state.at === n - 1;
  }

  // ---- navigation ------------------------------------------------------------------------

  function go(i) {
    if (!state.frames.length) return;
    state.at = Math.max(0, Math.min(state.frames.length - 1, i));
    render();
  }

  function next() {
    go(state.at + 1);
    if (state.at === state.frames.length - 1) pause();  // playback stops at the last step
  }

  function prev() { go(state.at - 1); }

  function play() {
    if (!state.frames.length) return;
    if (state.at === state.frames.length - 1) go(0);
    pause();
    state.timer = setInterval(next, Number($("dwell").value) || 1600);
    $("play").textContent = "❚❚ Pause";
    $("play").setAttribute("aria-label", "Pause");
  }

  function pause() {
    if (state.timer) clearInterval(state.timer);
    state.timer = null;
    $("play").textContent = "▶ Play";
    $("play").setAttribute("aria-label", "Play");
  }

  function toggle() { if (state.timer) pause(); else play(); }

  ["attn-kind", "attn-layer", "attn-head"].forEach(function (id) {
    $(id).addEventListener("change", function () {
      var v = $(id).value;
      if (id === "attn-kind") state.pick.kind = v;
      else if (id === "attn-layer") state.pick.layer = Number(v);
      else state.pick.head = Number(v);
      render();
    });
  });
  $("prev").addEventListener("click", function () { pause(); prev(); });
  $("next").addEventListener("click", function () { pause(); next(); });
  $("play").addEventListener("click", toggle);
  $("dwell").addEventListener("change", function () { if (state.timer) play(); });

  $("player").addEventListener("keydown", function (e) {
    var tag = e.target && e.target.tagName;
    if (tag === "SELECT" || tag === "INPUT") return;
    if (e.key === "ArrowRight") {
      pause();
      next();
      e.preventDefault();
    } else if (e.key === "ArrowLeft") {
      pause();
      prev();
      e.preventDefault();
    } else if ((e.key === " " || e.key === "Spacebar") && tag !== "BUTTON") {
      toggle();  // a focused button handles space itself (it clicks)
      e.preventDefault();
    }
  });

  $("file").addEventListener("change", function (e) {
    if (e.target.files && e.target.files[0]) loadFile(e.target.files[0]);
  });
  document.addEventListener("dragover", function (e) {
    e.preventDefault();
    document.body.classList.add("dragging");
  });
  document.addEventListener("dragleave", function () { document.body.classList.remove("dragging"); });
  document.addEventListener("drop", function (e) {
    e.preventDefault();
    document.body.classList.remove("dragging");
    if (e.dataTransfer && e.dataTransfer.files && e.dataTransfer.files[0]) loadFile(e.dataTransfer.files[0]);
  });

  // ---- start -----------------------------------------------------------------------------

  function loadEmbedded() {
    var t = window.SEQTAPE_EMBEDDED_TRACE;
    if (t) return load(t, "the embedded trace (f15_trace.js)" + (t.input && t.input.text ? ", input " + t.input.text : ""));
    showError("No trace loaded: open a trace file or drop one on the page.");
    return false;
  }

  var url = new URLSearchParams(window.location.search).get("trace");
  if (url) {
    fetch(url)
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      })
      .then(function (text) { loadText(text, url); })
      .catch(function (err) {
        loadEmbedded();
        showError("Cannot fetch " + url + " (" + err.message + "); from file:// use the file picker. Showing the embedded F15 trace.");
      });
  } else {
    loadEmbedded();
  }

  // For tests and the console.
  window.seqtapePlayer = { load: load, go: go, next: next, prev: prev, play: play, pause: pause, state: state };
})();
