#!/usr/bin/python3
"""PyTorch's training step beside bench_train's: the reference trainer's model (torch_reference.py)
on bench_train's configs, batch shapes and step (forward, mean cross-entropy, backward,
global-norm clipping at 1, Adam), per config x threads x precision x dropout.

The models are seqtape's own: for each config, `seqtape train --steps 1 --lr 1e-30` on a
two-line TSV over a 64-token vocabulary, then `seqtape export`, so the architecture, the parameter
names and shapes and the initial weights are seqtape's by construction; the script refuses to run
when PyTorch's parameter count differs from the one seqtape prints. The batches are random tokens
of exactly bench_train's shapes (every row full length, every label counted).

Timing: a few warm-up steps per row, then --rounds rounds that visit every row in turn
(interleaved, so that load from other processes spreads over all rows) and time --steps steps
each; a row's figures are the best and the median of its rounds. float32 is plain PyTorch,
bf16 is torch.autocast("cpu", bfloat16) over the forward and the loss (float32 weights,
gradients and Adam), as PyTorch users train in mixed precision.

With --bench-train, seqtape's rows come from bench_train runs in the same invocation (one per
thread count, OPENBLAS_NUM_THREADS and OMP_NUM_THREADS set, only the BM_train_step rows of the
configs asked for; the best of its repetitions, float32 the faster of OpenBLAS and oneDNN), and a
table puts the two side by side with the ratio PyTorch ms / seqtape ms (> 1: seqtape is faster).
bench_train has no bf16 step with dropout: those rows show "-" on seqtape's side.

Needs Debian's python3-torch (optional for seqtape; nothing else uses it).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as ref  # noqa: E402  (exits with a message when torch is missing)

torch = ref.torch

# bench_train's kCfgs (bench/bench_train.cpp): name, d_model C, heads H, layers (encoder and
# decoder each), FFN width F, batch B, source length S, target length T, vocabulary V.
CONFIGS = {
    "small": dict(C=64, H=4, layers=2, F=256, B=64, S=16, T=16, V=64),
    "medium": dict(C=256, H=4, layers=3, F=1024, B=32, S=32, T=32, V=64),
    "short": dict(C=128, H=4, layers=3, F=512, B=64, S=10, T=9, V=64),
}
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>", "<sep>"]  # seqtape's vocabulary starts so


def fail(msg, code=3):
    print(f"torch_train_step.py: {msg}", file=sys.stderr)
    sys.exit(code)


def csv_list(kind, allowed=None):
    def parse(text):
        items = [kind(t) for t in text.split(",") if t]
        bad = [t for t in items if allowed is not None and t not in allowed]
        if not items or bad:
            raise argparse.ArgumentTypeError(f"'{text}': expected a comma-separated list of "
                                             f"{', '.join(map(str, allowed or ['values']))}")
        return items
    return parse


def seqtape_export(seqtape, name, c, work):
    """seqtape's model of config `c` at its initial weights, exported: (config dict, weights,
    the parameter count seqtape prints)."""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    chars = [chr(ord("!") + i) for i in range(c["V"] - len(SPECIALS))]  # printable, no tab
    with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in SPECIALS + chars))
    with open(os.path.join(d, "data.tsv"), "w", encoding="utf-8") as f:
        f.write(f"{chars[0]}{chars[1]}\t{chars[2]}\n{chars[3]}\t{chars[4]}{chars[5]}\n")
    flags = ["--preset", "default", "--d-model", str(c["C"]), "--heads", str(c["H"]),
             "--enc-layers", str(c["layers"]), "--dec-layers", str(c["layers"]),
             "--ffn", str(c["F"])]
    run = [seqtape, "train", "--data", os.path.join(d, "data.tsv"), "--vocab",
           os.path.join(d, "vocab.txt"), *flags, "--steps", "1", "--lr", "1e-30", "--schedule",
           "constant", "--valid-fraction", "0.5", "--eval-max", "1", "--out",
           os.path.join(d, "run"), "--overwrite", "--no-progress"]
    train = subprocess.run(run, capture_output=True, text=True)
    if train.returncode != 0:
        fail(f"`{' '.join(run)}` failed:\n{train.stderr}{train.stdout}")
    m = re.search(r"(\d+) parameters", train.stdout)
    if not m:
        fail(f"`seqtape train` did not print its parameter count:\n{train.stdout}")
    export = [seqtape, "export", "--model", os.path.join(d, "run"), "--out",
              os.path.join(d, "export")]
    done = subprocess.run(export, capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"`{' '.join(export)}` failed:\n{done.stderr}")
    with open(os.path.join(d, "export", "config.json")) as f:
        cfg = json.load(f)
    weights, _, _ = ref.read_safetensors(os.path.join(d, "export", "model.safetensors"))
    return cfg, weights, int(m.group(1))


def random_batch(c, gen):
    """bench_train's batch: token ids in [3, V), every row full length, B·T labels."""
    def ids(rows, cols):
        return torch.randint(3, c["V"], (rows, cols), generator=gen)
    return (ids(c["B"], c["S"]), torch.full((c["B"],), c["S"]), ids(c["B"], c["T"]),
            torch.full((c["B"],), c["T"]), ids(c["B"], c["T"]))


class Row:
    """One timed combination: a model with its own optimizer and batch."""

    def __init__(self, name, c, threads, precision, dropout, cfg, weights):
        self.name, self.c, self.threads = name, c, threads
        self.precision, self.dropout = precision, dropout
        self.model = ref.Reference(dict(cfg, dropout=dropout, attention_dropout=dropout), weights)
        self.model.train()
        self.opt = ref.make_adam(self.model, 1e-4)  # bench_train's rate
        self.batch = random_batch(c, torch.Generator().manual_seed(7))
        self.params = sum(p.numel() for p in self.model.parameters())
        self.times = []  # seconds per step, one per round

    def step(self):
        torch.set_num_threads(self.threads)
        loss = ref.train_step(self.model, self.opt, *self.batch, label_smoothing=0.0, clip=1.0,
                              bf16=self.precision == "bf16")
        return loss.item()

    def time_round(self, steps):
        torch.set_num_threads(self.threads)
        t0 = time.perf_counter()
        for _ in range(steps):
            self.step()
        self.times.append((time.perf_counter() - t0) / steps)

    def result(self):
        best, median = min(self.times), statistics.median(self.times)
        return {"config": self.name, "threads": self.threads, "precision": self.precision,
                "dropout": self.dropout, "best_ms": 1e3 * best, "median_ms": 1e3 * median,
                "tokens_per_s": self.c["B"] * self.c["T"] / best, "params": self.params,
                "rounds": len(self.times), "shape": self.shape()}

    def shape(self):
        """What was run, read back from the batch and the model's config (seqtape's export)."""
        (B, S), T, cfg = self.batch[0].shape, self.batch[2].shape[1], self.model.cfg
        return {"B": B, "S": S, "T": T, "C": cfg["d_model"], "H": cfg["n_heads"],
                "enc_layers": cfg["n_encoder_layers"], "dec_layers": cfg["n_decoder_layers"],
                "F": cfg["d_ff"], "V": cfg["vocab_size"], "norm": cfg["norm"],
                "labels": self.batch[4].numel()}


def cpu_info():
    """The CPU model and flags (lscpu), and whether it has bf16 units."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        text = ""
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = fields.get("Flags", "").split()
    model = fields.get("Model name", "unknown")
    family = f"family {fields.get('CPU family', '?')} model {fields.get('Model', '?')}"
    wanted = ["avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_bf16",
              "amx_tile"]
    return {"model": f"{model} ({family}), {os.cpu_count()} CPUs",
            "flags": [f for f in wanted if f in flags],
            "bf16_units": "avx512_bf16" in flags or "amx_bf16" in flags}


def seqtape_rows(bench_train, names, threads, log_prefix):
    """seqtape's best step (ms) per (config, threads, precision, dropout) from bench_train's
    BM_train_step rows, and the backend of each; with log_prefix, each run's own printout (its
    ceilings, profiles and table of targets) goes to log_prefix.bench_train.<threads>.txt."""
    out = {}
    for t in threads:
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            env = dict(os.environ, OPENBLAS_NUM_THREADS=str(t), OMP_NUM_THREADS=str(t))
            cmd = [bench_train, f"--benchmark_filter=BM_train_step/({'|'.join(names)})",
                   f"--benchmark_out={f.name}", "--benchmark_out_format=json"]
            print(f"running OPENBLAS_NUM_THREADS={t} OMP_NUM_THREADS={t} {' '.join(cmd[:2])}",
                  file=sys.stderr)
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                fail(f"{bench_train} failed:\n{done.stderr}")
            if log_prefix:
                with open(f"{log_prefix}.bench_train.{t}.txt", "w") as log:
                    log.write(done.stdout + done.stderr)
            runs = json.load(f)["benchmarks"]
        for r in runs:
            if r.get("run_type") != "iteration":
                continue
            parts = r["name"].split("/")
            cfg, mods = parts[1], [p for p in parts[2:] if ":" not in p and p != "real_time"]
            precision = "bf16" if "bf16" in mods else "f32"
            dropout = 0.1 if "dropout" in mods else 0.0
            backend = "onednn" if "onednn" in mods or precision == "bf16" else "openblas"
            ms = r["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[r["time_unit"]]
            key = (cfg, t, precision, dropout)
            if key not in out or ms < out[key][0]:
                out[key] = (ms, backend)
    return out


def print_rows(results, seqtape):
    print(f"\n{'config':<8} {'thr':>3} {'prec':<5} {'drop':>4} {'torch best ms':>13} "
          f"{'median ms':>10} {'tokens/s':>9} {'seqtape ms':>11} {'backend':<9} "
          f"{'torch/seqtape':>13}")
    for r in results:
        key = (r["config"], r["threads"], r["precision"], r["dropout"])
        s = seqtape.get(key)
        theirs = f"{s[0]:11.2f} {s[1]:<9} {r['best_ms'] / s[0]:12.2f}x" if s else \
            f"{'-':>11} {'':<9} {'-':>13}"
        print(f"{r['config']:<8} {r['threads']:>3} {r['precision']:<5} {r['dropout']:>4} "
              f"{r['best_ms']:13.2f} {r['median_ms']:10.2f} {r['tokens_per_s']:9.0f} {theirs}")


def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqtape", default=os.path.join(here, "..", "build", "cli", "seqtape"),
                    help="the seqtape binary that makes the models (default: build/cli/seqtape)")
    ap.add_argument("--bench-train", help="bench_train binary: also run it, table side by side")
    ap.add_argument("--configs", type=csv_list(str, list(CONFIGS)), default=list(CONFIGS))
    ap.add_argument("--threads", type=csv_list(int), default=[1, 2])
    ap.add_argument("--precisions", type=csv_list(str, ["f32", "bf16"]), default=["f32", "bf16"])
    ap.add_argument("--dropouts", type=csv_list(float), default=[0.0, 0.1])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds")
    ap.add_argument("--steps", type=int, default=3, help="steps per row per round")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per row first")
    ap.add_argument("--quick", action="store_true", help="1 round of 1 step, 1 warm-up step")
    ap.add_argument("--json", help="write the rows, the CPU and the versions here as JSON (and, "
                    "with --bench-train, its printouts beside it as JSON.bench_train.THREADS.txt)")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.steps, a.warmup = 1, 1, 1
    for name in ("rounds", "steps"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(a, name)}")
    if a.warmup < 0 or any(t < 1 for t in a.threads) or any(not 0 <= d < 1 for d in a.dropouts):
        ap.error("--warmup must be >= 0, --threads >= 1 and --dropouts in [0, 1)")
    for path, what in ((a.seqtape, "--seqtape"), (a.bench_train, "--bench-train")):
        if path is not None and not os.access(path, os.X_OK):
            ap.error(f"{what} {path}: not an executable file (build it first)")
    # Checked now, not after minutes of timing.
    if a.json is not None and not os.path.isdir(os.path.dirname(os.path.abspath(a.json))):
        ap.error(f"--json {a.json}: its directory does not exist")
    return a


def main():
    a = parse_args()
    cpu = cpu_info()
    # PyTorch's OpenMP workers spin between parallel regions unless this says passive: on a
    # loaded machine a spinning worker that lost its core stalls every product of the step.
    wait_policy = os.environ.get("OMP_WAIT_POLICY", "unset")
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}; CPU {cpu['model']}; "
          f"flags {' '.join(cpu['flags'])}; bf16 units: {'yes' if cpu['bf16_units'] else 'no'}; "
          f"OMP_WAIT_POLICY {wait_policy}")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in a.configs:
            c = CONFIGS[name]
            cfg, weights, seqtape_params = seqtape_export(a.seqtape, name, c, work)
            made = [Row(name, c, t, p, d, cfg, weights) for t in a.threads
                    for p in a.precisions for d in a.dropouts]
            if made[0].params != seqtape_params:
                fail(f"{name}: PyTorch's model has {made[0].params} parameters, seqtape's "
                     f"{seqtape_params}: the reference does not mirror the export")
            print(f"{name}: B x S/T {c['B']}x{c['S']}/{c['T']}, d/heads/layers/F "
                  f"{c['C']}/{c['H']}/{c['layers']}+{c['layers']}/{c['F']}, V {c['V']}, "
                  f"{seqtape_params} parameters (seqtape and PyTorch)")
            rows += made
    for r in rows:
        for _ in range(a.warmup):
            r.step()
    for _ in range(a.rounds):
        for r in rows:
            r.time_round(a.steps)
    results = [r.result() for r in rows]
    seqtape = seqtape_rows(a.bench_train, a.configs, a.threads, a.json) if a.bench_train else {}
    print(f"\nbest and median of {a.rounds} interleaved rounds of {a.steps} steps "
          f"(forward + loss + backward + clip + Adam)")
    print_rows(results, seqtape)
    if a.json:
        for r in results:
            s = seqtape.get((r["config"], r["threads"], r["precision"], r["dropout"]))
            r["seqtape_ms"], r["seqtape_backend"] = (s[0], s[1]) if s else (None, None)
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "cpu": cpu, "omp_wait_policy": wait_policy,
                       "rounds": a.rounds,
                       "steps": a.steps, "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
