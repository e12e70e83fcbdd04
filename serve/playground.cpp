// The playground page, embedded so that `seqtape serve` needs no files besides the model.
#include "serve/playground.h"

namespace seqtape::serve {

const std::string& playground_html() {
  static const std::string html = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>seqtape playground</title>
<style>
  body { font: 15px/1.4 system-ui, sans-serif; max-width: 860px; margin: 2em auto; padding: 0 1em; color: #222; }
  h1 { font-size: 1.3em; }
  textarea { width: 100%; font: 16px monospace; box-sizing: border-box; }
  fieldset { border: 1px solid #ccc; margin: .8em 0; display: flex; flex-wrap: wrap; gap: .6em 1.2em; }
  label { white-space: nowrap; }
  input[type=number] { width: 5.5em; }
  #output { white-space: pre-wrap; font: 18px monospace; border: 1px solid #ccc; min-height: 3em; padding: .5em; background: #fafafa; }
  #status { color: #555; margin-top: .5em; font-size: .9em; }
  #model { color: #555; font-size: .9em; }
  .error { color: #b00; }
  #output .out { border-bottom: 1px dashed #ddd; }
  #output .out:last-child { border-bottom: none; }
  #warning { color: #8a5a00; background: #fff4d6; padding: .3em .5em; margin-top: .5em; }
  #warning:empty { display: none; }
  #results { font-size: .9em; color: #333; }
  #results ol { margin: .2em 0 .6em; }
  .score { color: #777; font-family: monospace; }
  input:disabled { background: #eee; }
  #trace_view { width: 100%; height: 640px; border: 1px solid #ccc; margin-top: .8em; }
  #trace_view[hidden] { display: none; }
</style>
</head>
<body>
<h1>seqtape playground</h1>
<div id="model">loading the model…</div>
<p><label for="source">Inputs, one per line</label></p>
<textarea id="source" rows="3">我爱</textarea>
<fieldset>
  <legend>Decoding</legend>
  <label>max_new <input id="max_new" type="number" min="1"></label>
  <label>min_new <input id="min_new" type="number" min="0"></label>
  <label>beam <input id="beam" type="number" min="1"></label>
  <label>n_best <input id="n_best" type="number" min="1"></label>
  <label><input id="sample" type="checkbox"> sample</label>
  <label>temperature <input id="temperature" type="number" min="0" step="0.1"></label>
  <label>top_k <input id="top_k" type="number" min="0"></label>
  <label>top_p <input id="top_p" type="number" min="0.01" max="1" step="0.05"></label>
  <label>seed <input id="seed" type="number" min="0"></label>
  <label>repetition_penalty <input id="repetition_penalty" type="number" min="0.1" step="0.1"></label>
</fieldset>
<button id="go">Generate</button> <button id="stop" disabled>Stop</button>
<label title="record the first input's decoding and step through it (attention per layer and head)"><input id="trace" type="checkbox"> trace</label>
<h2 style="font-size:1.1em">Output</h2>
<div id="output" aria-live="polite"></div>
<div id="warning" role="alert"></div>
<div id="status"></div>
<div id="results"></div>
<iframe id="trace_view" title="the request's trace in the step-through player" hidden></iframe>
<script>
const $ = (id) => document.getElementById(id);
let controller = null;

fetch("/v1/model").then((r) => r.json()).then((m) => {
  // The server's table of options: each input's default and help, and which act only when
  // sampling.
  for (const o of m.options) {
    const e = $(o.name);
    if (!e) continue;
    e.title = o.help;
    if (e.type === "number") e.value = o.default;
    else if (e.type === "checkbox") e.checked = o.default;
    if (o.needs === "sample") e.classList.add("sampling");
  }
  syncSampling();
  $("model").textContent = `${m.model || "model"}: ${m.config.arch}, ${m.parameters} parameters, ` +
    `vocabulary ${m.vocab_size}, max_new ≤ ${m.limits.max_new}, beam ≤ ${m.limits.beam}`;
  $("max_new").max = m.limits.max_new;
  $("max_new").value = Math.min(Number($("max_new").value), m.limits.max_new);
  $("beam").max = m.limits.beam;
}).catch(() => { $("model").textContent = "cannot reach /v1/model"; });

// The sampling fields count only when sampling: they are editable only then.
function syncSampling() {
  for (const e of document.querySelectorAll(".sampling")) e.disabled = !$("sample").checked;
}
$("sample").addEventListener("change", syncSampling);
syncSampling();

// One input per non-blank line.
function lines() {
  return $("source").value.split("\n").map((l) => l.replace(/\r$/, "")).filter((l) => l.trim() !== "");
}

function body() {
  const ins = lines();
  const b = ins.length === 1 ? { input: ins[0] } : { inputs: ins };
  b.stream = true;
  // Every option input; the sampling ones only when sampling.
  for (const e of document.querySelectorAll("fieldset input[type=number]"))
    if (!e.classList.contains("sampling") || $("sample").checked) b[e.id] = Number(e.value);
  if ($("sample").checked) b.sample = true;
  return b;
}

// Reads a text/event-stream body: calls onEvent(name, data) per event.
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let name = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) name = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      onEvent(name, data ? JSON.parse(data) : null);
    }
  }
}

// "2…4 (3 steps)": the first and last cache length, not every one.
function compactLengths(c) {
  if (c.length === 0) return "none";
  return c.length === 1 ? `${c[0]} (1 step)` : `${c[0]}…${c[c.length - 1]} (${c.length} steps)`;
}

function escapeHtml(s) {
  return s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

// The result of one input: its line in the results, its n-best with scores, its unknowns.
function showDone(data, count, ms, unknown) {
  const head = `stop: ${data.stop_reason} · ${data.tokens.length} tokens · ` +
    `cache lengths ${compactLengths(data.cache_lengths)} · score ${data.score.toFixed(4)}`;
  if (count === 1) $("status").textContent = `${head} · ${ms} ms`;
  else $("status").textContent = `${count} inputs · ${ms} ms`;
  const list = data.n_best || data.samples;
  let html = `<div class="result">${count > 1 ? `<b>${data.index + 1}.</b> ${escapeHtml(head)}` : ""}`;
  if (list) {
    html += `<ol class="nbest">` + list.map((h) => `<li>${escapeHtml(h.text)} <span class="score">` +
      `score ${h.score.toFixed(4)} · normalized ${h.normalized_score.toFixed(4)}</span></li>`).join("") + `</ol>`;
  }
  $("results").insertAdjacentHTML("beforeend", html + "</div>");
  if (data.unk > 0) unknown.push([data.index, data.unk, [...data.input].length]);
  $("warning").textContent = unknown.map(([i, n, of]) =>
    `${count > 1 ? `input ${i + 1}: ` : ""}${n} of ${of} characters are unknown to the model (read as <unk>)`).join("; ");
}

async function generate() {
  $("output").textContent = "";
  $("status").textContent = "";
  $("status").className = "";
  $("results").textContent = "";
  $("warning").textContent = "";
  delete $("output").dataset.done;
  const count = lines().length;
  const outs = [];
  for (let i = 0; i < count; i++) {
    const d = document.createElement("div");
    d.className = "out";
    $("output").appendChild(d);
    outs.push(d);
  }
  const unknown = [];
  let finished = 0;
  $("go").disabled = true;
  $("stop").disabled = false;
  controller = new AbortController();
  const t0 = performance.now();
  try {
    const r = await fetch("/v1/generate", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body()), signal: controller.signal,
    });
    if (!r.ok) {
      const e = await r.json();
      throw new Error(e.error + (e.field ? ` (field ${e.field})` : ""));
    }
    await readEvents(r, (name, data) => {
      if (name === "piece") outs[data.index].textContent += data.text;
      else if (name === "done") {
        showDone(data, count, (performance.now() - t0).toFixed(0), unknown);
        if (++finished === count) $("output").dataset.done = "1";
      } else if (name === "error") throw new Error(data.error);
    });
  } catch (e) {
    if (e.name !== "AbortError") { $("status").textContent = String(e.message || e); $("status").className = "error"; }
    else $("status").textContent = "stopped";
  } finally {
    $("go").disabled = false;
    $("stop").disabled = true;
  }
}
// The first input's decoding recorded by the server (POST /v1/trace) and opened in web/'s
// step-through player, which the server serves at /player/.
async function showTrace() {
  const b = body();
  delete b.stream;
  if (b.inputs) { b.input = b.inputs[0]; delete b.inputs; }
  const r = await fetch("/v1/trace", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(b) });
  const text = await r.text();
  if (!r.ok) throw new Error("trace: " + JSON.parse(text).error);
  const url = URL.createObjectURL(new Blob([text], { type: "application/json" }));
  $("trace_view").src = "/player/player.html?trace=" + encodeURIComponent(url);
  $("trace_view").hidden = false;
}

$("go").addEventListener("click", async () => {
  $("trace_view").hidden = true;
  await generate();
  if ($("trace").checked && $("output").dataset.done === "1")
    showTrace().catch((e) => { $("status").textContent = String(e.message || e); $("status").className = "error"; });
});
$("stop").addEventListener("click", () => controller && controller.abort());
$("source").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("go").click(); });
</script>
</body>
</html>
)HTML";
  return html;
}

}  // namespace seqtape::serve
