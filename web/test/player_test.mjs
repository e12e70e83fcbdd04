// Browser test of web/player.html in headless Chromium (Debian's chromium + chromium-driver),
// driven through WebDriver with Node's built-in fetch — no npm packages, no downloaded browser.
//
//   node web/test/player_test.mjs [--screenshot OUT.png] [--width 1200] [--narrow]
//
// Opens the page from file:// (the embedded F15 trace), focuses the player, steps to the end with
// the right-arrow key and checks what it shows: cache lengths 2, 3, 4, selected tokens 学习, ！,
// <eos>, the counter "10 / 10", that the player stays at the last step, that playback (space) is
// still by default and stops at the end, and that every token state has a text label.
// Exit codes: 0 pass, 1 fail, 77 skip (no /usr/bin/chromium on this machine).

import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const page = resolve(here, "..", "player.html");
const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const screenshot = opt("--screenshot", "");
const width = Number(opt("--width", "1200"));
const chromium = process.env.SEQTAPE_CHROMIUM || "/usr/bin/chromium";
const driverBin = process.env.SEQTAPE_CHROMEDRIVER || "/usr/bin/chromedriver";

if (!existsSync(chromium)) {
  console.log(`SKIP: ${chromium} not found (scripts/setup.sh installs Debian's chromium)`);
  process.exit(77);
}
if (!existsSync(driverBin)) {
  console.error(`FAIL: ${chromium} exists but ${driverBin} does not: install chromium-driver (scripts/setup.sh)`);
  process.exit(1);
}

const KEY = { right: "\uE014", left: "\uE012", space: "\uE00D" };
const deadline = Date.now() + 50_000;  // the whole test stays under a minute
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

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

let driver = null;
let profile = null;
let base = "";
let session = "";
const failures = [];

function check(cond, what) {
  if (cond) console.log(`ok   ${what}`);
  else {
    console.log(`FAIL ${what}`);
    failures.push(what);
  }
}

async function wd(method, path, body) {
  if (Date.now() > deadline) throw new Error("browser test took longer than 50 s");
  const r = await fetch(base + path, {
    method,
    headers: { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const j = await r.json();
  if (!r.ok || (j.value && j.value.error)) {
    throw new Error(`${method} ${path}: ${j.value ? j.value.error + ": " + j.value.message : r.status}`);
  }
  return j.value;
}

const js = (script, ...a) => wd("POST", `/session/${session}/execute/sync`, { script, args: a });

async function key(k) {
  await wd("POST", `/session/${session}/actions`, {
    actions: [{ type: "key", id: "kbd", actions: [{ type: "keyDown", value: k }, { type: "keyUp", value: k }] }],
  });
}

// What the figure shows right now.
const shown = () =>
  js(`return {
    counter: document.getElementById("counter").textContent,
    cache: document.getElementById("cache-length").textContent,
    selected: document.getElementById("selected-token").textContent,
    phase: document.getElementById("phase").textContent,
    stop: document.getElementById("stop").textContent,
    focused: document.activeElement && document.activeElement.id,
    states: Array.from(document.querySelectorAll("#tokens .tok")).map(t => [t.dataset.state, t.querySelector(".state").textContent]),
    bars: Array.from(document.querySelectorAll("#candidates .cand-prob")).map(e => e.textContent),
    cells: Array.from(document.querySelectorAll(".heatmap td")).filter(td => !td.title).length,
    play: document.getElementById("play").textContent
  };`);

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
  const chromeArgs = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", `--user-data-dir=${profile}`, `--window-size=${width},1000`,
  ];
  const s = await wd("POST", "/session", {
    capabilities: {
      alwaysMatch: { browserName: "chrome", "goog:chromeOptions": { binary: chromium, args: chromeArgs } },
    },
  });
  session = s.sessionId;
  await wd("POST", `/session/${session}/url`, { url: pathToFileURL(page).href });

  let v = await shown();
  check(v.counter === "1 / 10", `opens at step 1 of 10 (counter "${v.counter}")`);
  check(v.cache === "0" && v.selected === "–", `step 1: input only, cache 0 (cache ${v.cache})`);
  await sleep(400);
  v = await shown();
  check(v.counter === "1 / 10", "still by default: no autoplay");

  await js(`document.getElementById("player").focus();`);
  v = await shown();
  check(v.focused === "player", "the player takes focus");

  const caches = [];
  const selected = [];
  const everyState = new Set(v.states.map(([st]) => st));  // step 1: the prompt is pending
  for (let i = 0; i < 9; i++) {
    await key(KEY.right);
    v = await shown();
    if (caches[caches.length - 1] !== v.cache) caches.push(v.cache);
    if (v.selected !== "–") selected.push(v.selected);
    v.states.forEach(([st, label]) => {
      everyState.add(st);
      if (!label) failures.push(`a token in state ${st} has no text label`);
    });
    check(v.cells === 0, `step ${i + 2}: every heatmap cell has a title`);
  }
  check(v.counter === "10 / 10", `right arrow reaches the last step (counter "${v.counter}")`);
  check(JSON.stringify(caches.filter((c) => c !== "0")) === JSON.stringify(["2", "3", "4"]),
        `cache lengths shown: ${caches.join(", ")} (want 2, 3, 4)`);
  check(JSON.stringify(selected) === JSON.stringify(["学习", "！", "<eos>"]),
        `selected tokens shown: ${selected.join(", ")} (want 学习, ！, <eos>)`);
  check(v.stop === "stop: eos", `last step shows the stop reason (${v.stop})`);
  check(v.bars.length > 0 && v.bars.every((b) => /^\d\.\d{3}$/.test(b)), "candidate bars carry numbers");
  for (const st of ["processed", "feeding", "pending", "selected"])
    check(everyState.has(st), `token state "${st}" appears with a text label`);

  if (screenshot) {
    mkdirSync(dirname(resolve(screenshot)), { recursive: true });
    // The player itself (the part of the page that matters), at the last step.
    const el = await wd("POST", `/session/${session}/element`, { using: "css selector", value: "#player" });
    const png = await wd("GET", `/session/${session}/element/${Object.values(el)[0]}/screenshot`);
    writeFileSync(screenshot, Buffer.from(png, "base64"));
    console.log(`screenshot: ${resolve(screenshot)}`);
  }

  await key(KEY.right);
  v = await shown();
  check(v.counter === "10 / 10", "right arrow at the last step stays there");
  await key(KEY.left);
  v = await shown();
  check(v.counter === "9 / 10", "left arrow steps back");

  // Space plays; playback stops by itself at the last step.
  await js(`document.getElementById("dwell").value = "800";`);
  await key(KEY.space);
  v = await shown();
  check(/Pause/.test(v.play), "space starts playback");
  for (let i = 0; i < 30 && v.counter !== "10 / 10"; i++) {
    await sleep(200);
    v = await shown();
  }
  await sleep(1000);
  v = await shown();
  check(v.counter === "10 / 10" && /Play/.test(v.play), `playback stopped at the last step (${v.counter}, ${v.play})`);

  // The decoder-only F15 trace shows no source line; one map per step, picker without choices.
  let src = await js(`return document.getElementById("source").hidden;`);
  check(src === true, "decoder-only trace: no source line");
  check((await js(`return document.querySelectorAll(".heatmap-box").length;`)) === 1,
        "one heatmap at a time");

  // An encoder-decoder variant with two heads and a cross-attention map per step: the picker
  // offers them, shows one map, and keeps the choice from step to step.
  await js(`
    const t = JSON.parse(JSON.stringify(window.seqtapePlayer.state.trace));
    t.decoder_prompt = [t.input.ids[0]];
    t.steps.forEach((s) => {
      const extra = [];
      (s.attention || []).forEach((a) => {
        extra.push(Object.assign({}, a, { head: 1 }));
        extra.push({ name: a.name.replace("self_attn", "cross_attn"), layer: a.layer, kind: "cross",
                     head: 0, rows: a.rows, cols: t.input.ids.map((_, i) => i),
                     weights: a.rows.map(() => t.input.ids.map(() => 1 / t.input.ids.length)) });
      });
      s.attention = (s.attention || []).concat(extra);
    });
    window.seqtapePlayer.load(t, "encdec.json");
    window.seqtapePlayer.go(1);`);
  const picker = () => js(`return {
      kinds: Array.from(document.querySelectorAll("#attn-kind option")).map(o => o.value),
      heads: Array.from(document.querySelectorAll("#attn-head option")).map(o => o.value),
      maps: document.querySelectorAll(".heatmap-box").length,
      title: (document.querySelector(".heatmap-title") || {}).textContent || "",
      source: document.getElementById("source").hidden ? null : document.getElementById("source").textContent };`);
  const choose = (id, value) => js(`const s = document.getElementById("${id}"); s.value = "${value}";
      s.dispatchEvent(new Event("change"));`);
  let p = await picker();
  check(JSON.stringify(p.kinds) === JSON.stringify(["self", "cross"]), `kinds offered: ${p.kinds}`);
  check(JSON.stringify(p.heads) === JSON.stringify(["0", "1"]), `heads offered: ${p.heads}`);
  check(p.maps === 1 && /self_attn · head 0/.test(p.title), `one map, the first: "${p.title}"`);
  check(p.source !== null && /Source:/.test(p.source) && p.source.includes("我爱"),
        `encoder-decoder trace: the source in the Sequence panel ("${p.source}")`);
  await choose("attn-head", "1");
  p = await picker();
  check(p.maps === 1 && /head 1/.test(p.title), `head picker shows head 1: "${p.title}"`);
  await choose("attn-kind", "cross");
  p = await picker();
  check(/cross_attn/.test(p.title), `kind picker shows cross-attention: "${p.title}"`);
  await js(`window.seqtapePlayer.go(4);`);
  p = await picker();
  check(/cross_attn/.test(p.title), `the choice is kept on a later step: "${p.title}"`);

  // A bad trace is refused with a message, not a blank page.
  await js(`window.seqtapePlayer.load({format: "other"}, "bad.json");`);
  const err = await js(`return document.getElementById("load-error").textContent;`);
  check(/format/.test(err), `a wrong file is refused with a message ("${err}")`);

  // Narrow screens scroll the figure sideways instead of squeezing it.
  await wd("POST", `/session/${session}/window/rect`, { width: 420, height: 900 });
  const scroll = await js(`const s = document.querySelector(".figure-scroll"); return [s.scrollWidth, s.clientWidth];`);
  check(scroll[0] > scroll[1], `narrow window: the figure scrolls sideways (${scroll[0]} > ${scroll[1]})`);
}

let code = 0;
try {
  await main();
  code = failures.length ? 1 : 0;
} catch (e) {
  console.log(`FAIL ${e.message}`);
  code = 1;
} finally {
  try {
    if (session) await wd("DELETE", `/session/${session}`);
  } catch {}
  if (driver) driver.kill();
  if (profile) rmSync(profile, { recursive: true, force: true });
}
console.log(code === 0 ? "browser test: passed" : `browser test: ${failures.length} check(s) failed`);
process.exit(code);
