#!/usr/bin/python3
"""bench/torch_train_step.py for one quick round on the small config: its configs are
bench_train's (read from bench/bench_train.cpp), its JSON rows parse, and what it ran (batch
shapes, model dimensions, parameter count) is bench_train's small config. The parameter count is
computed here from the config, independently of both seqtape and the script.

usage: test_torch_train_step.py SEQTAPE_BIN
Exit 77 (ctest's skip) when PyTorch is not installed: it is optional."""
import json
import math
import os
import re
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401
except ImportError:
    print("skipped: python3-torch is not installed")
    sys.exit(77)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import torch_train_step  # noqa: E402


def bench_train_configs():
    """kCfgs of bench/bench_train.cpp, keyed by name, fields named as its struct Cfg."""
    with open(os.path.join(ROOT, "bench", "bench_train.cpp"), encoding="utf-8") as f:
        src = f.read()
    fields = re.search(r"struct Cfg \{\s*const char\* name;\s*int64_t ([\w, ]+);", src)
    table = re.search(r"kCfgs\[\] = \{(.*?)\};", src, re.S)
    assert fields and table, "bench_train.cpp: struct Cfg or kCfgs not found"
    names = [n.strip() for n in fields.group(1).split(",")]
    out = {}
    for name, values in re.findall(r'\{"(\w+)",\s*([\d,\s]+)\}', table.group(1)):
        out[name] = dict(zip(names, (int(v) for v in values.split(","))))
    return out


def post_norm_params(c):
    """seqtape's default encoder-decoder (post-norm, biased projections, untied output, no
    final norm): embedding, per encoder layer self-attention + FFN + 2 norms, per decoder layer
    self- and cross-attention + FFN + 3 norms, output projection."""
    C, F, V, n = c["C"], c["F"], c["V"], c["layers"]
    attn, ffn, norm = 4 * (C * C + C), C * F + F + F * C + C, 2 * C
    return V * C + n * (attn + ffn + 2 * norm) + n * (2 * attn + ffn + 3 * norm) + C * V + V


def main():
    seqtape = sys.argv[1]
    theirs = bench_train_configs()
    for name, c in torch_train_step.CONFIGS.items():
        assert name in theirs, f"{name}: not a bench_train config ({sorted(theirs)})"
        assert c == theirs[name], f"{name}: the script has {c}, bench_train {theirs[name]}"
    small = theirs["small"]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        run = subprocess.run(
            [sys.executable, os.path.join(ROOT, "bench", "torch_train_step.py"), "--quick",
             "--configs", "small", "--threads", "1", "--seqtape", seqtape, "--json", out],
            capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, f"exit {run.returncode}:\n{run.stderr}{run.stdout}"
        with open(out) as f:
            report = json.load(f)
    assert report["torch"] == torch.__version__ and report["cpu"]["model"]
    rows = report["rows"]
    combos = {(r["threads"], r["precision"], r["dropout"]) for r in rows}
    assert combos == {(1, p, d) for p in ("f32", "bf16") for d in (0.0, 0.1)}, combos
    want = {"B": small["B"], "S": small["S"], "T": small["T"], "C": small["C"],
            "H": small["H"], "enc_layers": small["layers"], "dec_layers": small["layers"],
            "F": small["F"], "V": small["V"], "norm": "post", "labels": small["B"] * small["T"]}
    for r in rows:
        assert r["config"] == "small" and r["rounds"] == 1, r
        assert r["shape"] == want, f"ran {r['shape']}, bench_train's small is {want}"
        assert r["params"] == post_norm_params(small), r["params"]
        assert math.isfinite(r["best_ms"]) and 0 < r["best_ms"] <= r["median_ms"], r
        assert math.isclose(r["tokens_per_s"], want["labels"] / r["best_ms"] * 1e3), r
        assert r["seqtape_ms"] is None  # no --bench-train
    table = [line for line in run.stdout.splitlines() if line.startswith("small ")]
    assert len(table) == 4, run.stdout
    assert f"{post_norm_params(small)} parameters (seqtape and PyTorch)" in run.stdout, run.stdout
    print(f"ok: {len(rows)} rows, {rows[0]['params']} parameters")


if __name__ == "__main__":
    main()
