// Browser test of the `seqtape serve` playground page in headless Chromium (Debian's chromium +
// chromium-driver), driven through WebDriver with Node's built-in fetch, as web/test/player_test.mjs.
//
//   node tests/serve/playground_test.mjs --url http://127.0.0.1:PORT/
//
// The server (started by tests/serve/test_serve.cpp over datasets/f15, slowed to 300 ms per
// decoding step) must be running. Types 我爱, presses Generate, and checks that the output
// streams in (学习 shown before the answer is done), ends as 学习！ with stop eos and cache
// lengths 2, 3, 4, and that an option over the server's limit shows the error naming the field.
// Exit codes: 0 pass, 1 fail, 77 skip (no /usr/bin/chromium on this machine).

import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const url = opt("--url", "");
const chromium = process.env.SEQTAPE_CHROMIUM || "/usr/bin/chromium";
const driverBin = process.env.SEQTAPE_CHROMEDRIVER || "/usr/bin/chromedriver";
if (!url) {
  console.error("usage: node playground_test.mjs --url http://127.0.0.1:PORT/");
  process.exit(1);
}
if (!existsSync(chromium)) {
  console.log(`SKIP: ${chromium} not found (scripts/setup.sh installs Debian's chromium)`);
  process.exit(77);
}
if (!existsSync(driverBin)) {
  console.error(`FAIL: ${driverBin} not found: install chromium-driver (scripts/setup.sh)`);
  process.exit(1);
}

const deadline = Date.now() + 50_000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const failures = [];
function check(cond, what) {
  console.log(`${cond ? "ok  " : "FAIL"} ${what}`);
  if (!cond) failures.push(what);
}
function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.unref();
    s.on("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

let driver = null, profile = null, base = "", session = "";
async function wd(method, path, body) {
  if (Date.now() > deadline) throw new Error("playground test took longer than 50 s");
  const r = await fetch(base + path, {
    method, headers: { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const j = await r.json();
  if (!r.ok || (j.value && j.value.error))
    throw new Error(`${method} ${path}: ${j.value ? j.value.error + ": " + j.value.message : r.status}`);
  return j.value;
}
const js = (script, ...a) => wd("POST", `/session/${session}/execute/sync`, { script, args: a });
const shown = () => js(`return { out: document.getElementById("output").textContent,
  done: document.getElementById("output").dataset.done || "",
  status: document.getElementById("status").textContent,
  model: document.getElementById("model").textContent };`);

async function main() {
  const port = await freePort();
  driver = spawn(driverBin, [`--port=${port}`], { stdio: "ignore" });
  base = `http://127.0.0.1:${port}`;
  for (;;) {
    try {
      const s = await (await fetch(base + "/status")).json();
      if (s.value && s.value.ready) break;
    } catch {}
    if (Date.now() > deadline) throw new Error("chromedriver did not start");
    await sleep(100);
  }
  profile = mkdtempSync(join(tmpdir(), "seqtape-chromium-"));
  const s = await wd("POST", "/session", {
    capabilities: { alwaysMatch: { browserName: "chrome", "goog:chromeOptions": { binary: chromium, args: [
      "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--disable-dev-shm-usage", `--user-data-dir=${profile}`, "--window-size=1000,900"] } } },
  });
  session = s.sessionId;
  await wd("POST", `/session/${session}/url`, { url });

  // Console errors and uncaught exceptions from here on, kept in the page.
  await js(`window.pageErrors = [];
    window.addEventListener("error", (e) => window.pageErrors.push(String(e.message)));
    window.addEventListener("unhandledrejection", (e) => window.pageErrors.push(String(e.reason)));
    const ce = console.error; console.error = (...a) => { window.pageErrors.push(a.join(" ")); ce(...a); };`);
  let v = await shown();
  for (let i = 0; i < 50 && /loading/.test(v.model); i++) { await sleep(100); v = await shown(); }
  check(/219 parameters/.test(v.model) && /vocabulary 7/.test(v.model), `model line: "${v.model}"`);

  // Every state the output passes through, recorded in the page (polling could miss one on a
  // loaded machine).
  await js(`const o = document.getElementById("output");
    window.seen = [];
    new MutationObserver(() => {
      const s = o.textContent + "|" + (o.dataset.done || "");
      if (window.seen[window.seen.length - 1] !== s) window.seen.push(s);
    }).observe(o, { childList: true, characterData: true, subtree: true, attributes: true });
    document.getElementById("source").value = "我爱"; document.getElementById("go").click();`);
  for (let i = 0; i < 400; i++) {
    v = await shown();
    if (v.done) break;
    await sleep(50);
  }
  const seen = await js(`return window.seen;`);
  check(seen.includes("学习|"), `the output streams in: 学习 shown before the answer is done (${seen.join(" → ")})`);
  check(v.out === "学习！" && v.done === "1", `final output 学习！ (got "${v.out}")`);
  check(/stop: eos/.test(v.status) && /cache lengths 2…4 \(3 steps\)/.test(v.status),
    `status, with compact cache lengths: "${v.status}"`);

  // The sampling fields are editable only when sampling.
  const disabled = () => js(`return ["temperature", "top_k", "top_p", "seed"].map((f) => document.getElementById(f).disabled);`);
  check((await disabled()).every((d) => d), "sampling fields disabled while sample is off");
  await js(`document.getElementById("sample").click();`);
  check((await disabled()).every((d) => !d), "sampling fields enabled once sample is ticked");
  await js(`document.getElementById("sample").click();`);

  // One input per line, each with its output; a beam's n-best with scores.
  const finish = async () => {
    for (let i = 0; i < 400; i++) {
      v = await shown();
      if (v.done) return;
      await sleep(50);
    }
  };
  await js(`document.getElementById("source").value = "我爱\\n\\n爱我";
    document.getElementById("beam").value = "3"; document.getElementById("n_best").value = "3";
    document.getElementById("max_new").value = "4"; document.getElementById("go").click();`);
  await finish();
  const multi = await js(`return {
    outs: [...document.querySelectorAll("#output .out")].map((d) => d.textContent),
    nbest: [...document.querySelectorAll("#results ol.nbest")].map((o) => [...o.querySelectorAll("li")].map((li) => li.textContent)) };`);
  check(multi.outs.length === 2 && multi.outs[0] === "学习！", `two inputs, two outputs: ${JSON.stringify(multi.outs)} (${v.status})`);
  check(multi.nbest.length === 2 && multi.nbest.every((l) => l.length === 3 && l.every((t) => /score -?\d/.test(t))),
    `n-best of 3 with scores per input: ${JSON.stringify(multi.nbest)}`);
  // f15 has no <unk> (an unknown character is a 400), so the warning is shown from a done event
  // as a model with <unk> answers it: 3 of the 4 characters of "xyz我" unknown.
  const warned = await js(`showDone({ index: 1, input: "xyz我", unk: 3, stop_reason: "eos", tokens: [3],
      cache_lengths: [5], score: -1 }, 2, 1, []);
    return { text: document.getElementById("warning").textContent,
      shown: document.getElementById("warning").offsetHeight > 0 };`);
  check(warned.shown && /input 2: 3 of 4 characters are unknown/.test(warned.text),
    `visible warning with the count of unknown characters: "${warned.text}"`);
  await js(`document.getElementById("source").value = "我爱"; document.getElementById("beam").value = "1";
    document.getElementById("n_best").value = "1"; document.getElementById("max_new").value = "64";`);

  // The trace toggle: the request's trace, recorded by the server, opens in the step-through
  // player (served by the server) with its layer/head picker.
  await js(`document.getElementById("trace").checked = true; document.getElementById("go").click();`);
  let player = null;
  for (let i = 0; i < 200; i++) {
    player = await js(`const f = document.getElementById("trace_view");
      const w = f.hidden ? null : f.contentWindow;
      const p = w && w.seqtapePlayer;
      if (!p || !p.state.trace) return null;
      p.go(1);  // the first call: the one with attention maps (step 0 is the input)
      const d = w.document;
      return { input: p.state.trace.input.text, source: p.state.trace.source, frames: p.state.frames.length,
        layers: d.getElementById("attn-layer").options.length, heads: d.getElementById("attn-head").options.length,
        visible: f.offsetHeight > 0 };`);
    if (player) break;
    await sleep(50);
  }
  check(player && player.input === "我爱" && player.frames > 0 && player.layers >= 1 && player.heads >= 1 && player.visible,
    `the trace opens in the player with its layer/head picker: ${JSON.stringify(player)}`);
  await js(`document.getElementById("trace").checked = false;`);

  // What the page looks like now, as a PNG of the window.
  const png = Buffer.from(await wd("GET", `/session/${session}/screenshot`), "base64");
  const shot = join(profile, "playground.png");
  writeFileSync(shot, png);
  check(png.subarray(1, 4).toString() === "PNG" && png.readUInt32BE(16) >= 800 && png.length > 10000,
    `screenshot ${shot}: ${png.length} bytes, ${png.readUInt32BE(16)}x${png.readUInt32BE(20)}`);

  await js(`document.getElementById("output").dataset.done = "";
    document.getElementById("max_new").value = "100000"; document.getElementById("go").click();`);
  for (let i = 0; i < 50; i++) {
    v = await shown();
    if (/max_new/.test(v.status)) break;
    await sleep(50);
  }
  check(/max_new/.test(v.status) && /limit/.test(v.status), `over the limit: the error names max_new ("${v.status}")`);
  const errors = await js(`return window.pageErrors;`);
  check(Array.isArray(errors) && errors.length === 0, `no console errors: ${JSON.stringify(errors)}`);
}

let code = 0;
try {
  await main();
  code = failures.length ? 1 : 0;
} catch (e) {
  console.log(`FAIL ${e.message}`);
  code = 1;
} finally {
  try { if (session) await wd("DELETE", `/session/${session}`); } catch {}
  if (driver) driver.kill();
  if (profile) rmSync(profile, { recursive: true, force: true });
}
console.log(code === 0 ? "playground test: passed" : `playground test: ${failures.length} check(s) failed`);
process.exit(code);
