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
</style>
</head>
<body>
<h1>seqtape playground</h1>
<div id="model">loading the model…</div>
<p><label for="source">Source</label></p>
<textarea id="source" rows="3">我爱</textarea>
<fieldset>
  <legend>Decoding</legend>
  <label>max_new <input id="max_new" type="number" value="64" min="1"></label>
  <label>min_new <input id="min_new" type="number" value="0" min="0"></label>
  <label>beam <input id="beam" type="number" value="1" min="1"></label>
  <label><input id="sample" type="checkbox"> sample</label>
  <label>temperature <input id="temperature" type="number" value="1" min="0" step="0.1"></label>
  <label>top_k <input id="top_k" type="number" value="0" min="0"></label>
  <label>top_p <input id="top_p" type="number" value="1" min="0.01" max="1" step="0.05"></label>
  <label>seed <input id="seed" type="number" value="0" min="0"></label>
  <label>repetition_penalty <input id="repetition_penalty" type="number" value="1" min="0.1" step="0.1"></label>
</fieldset>
<button id="go">Generate</button> <button id="stop" disabled>Stop</button>
<h2 style="font-size:1.1em">Output</h2>
<div id="output" aria-live="polite"></div>
<div id="status"></div>
<script>
const $ = (id) => document.getElementById(id);
let controller = null;

fetch("/v1/model").then((r) => r.json()).then((m) => {
  $("model").textContent = `${m.model || "model"}: ${m.config.arch}, ${m.parameters} parameters, ` +
    `vocabulary ${m.vocab_size}, max_new ≤ ${m.limits.max_new}, beam ≤ ${m.limits.beam}`;
  $("max_new").max = m.limits.max_new;
  $("max_new").value = Math.min(Number($("max_new").value), m.limits.max_new);
  $("beam").max = m.limits.beam;
}).catch(() => { $("model").textContent = "cannot reach /v1/model"; });

function body() {
  const b = { input: $("source").value, stream: true };
  for (const f of ["max_new", "min_new", "beam"]) b[f] = Number($(f).value);
  b.repetition_penalty = Number($("repetition_penalty").value);
  if ($("sample").checked) {
    b.sample = true;
    b.temperature = Number($("temperature").value);
    b.top_k = Number($("top_k").value);
    b.top_p = Number($("top_p").value);
    b.seed = Number($("seed").value);
  }
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

async function generate() {
  $("output").textContent = "";
  $("status").textContent = "";
  $("status").className = "";
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
      if (name === "piece") $("output").textContent += data.text;
      else if (name === "done") {
        const ms = (performance.now() - t0).toFixed(0);
        $("status").textContent = `stop: ${data.stop_reason} · ${data.tokens.length} tokens · ` +
          `cache lengths ${data.cache_lengths.join(", ")} · score ${data.score.toFixed(4)} · ${ms} ms`;
        $("output").dataset.done = "1";
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
$("go").addEventListener("click", generate);
$("stop").addEventListener("click", () => controller && controller.abort());
$("source").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) generate(); });
</script>
</body>
</html>
)HTML";
  return html;
}

}  // namespace seqtape::serve
