#!/usr/bin/python3
"""The PyTorch reference trainer: seqtape's encoder-decoder Transformer and training recipe,
written again in PyTorch, for a side-by-side run at equal wall time (docs/recipes.md).

It starts from a seqtape export (`seqtape train ... --steps 0`, then `seqtape export`), so the
architecture, the initial weights and the vocabulary are the same by construction, and it writes
the trained weights back in the same safetensors layout, so that `seqtape eval` decodes and
scores both models with the same beam search and the same metrics. `--check N` greedy-decodes N
sources in PyTorch and prints them, for bench/vs_torch.sh to compare with seqtape's own
decoding of the written weights (the proof that the two forward passes agree).

What it mirrors (see nn/transformer.cpp, train/dataset.cpp, train/optim.cpp):
  post-norm or pre-norm sublayers, sinusoidal or learned positions, no embedding scaling,
  dropout on the embeddings and every sublayer output, and on the attention weights at the
  config's attention_dropout (its dropout when the key is absent); linear weights
  laid out [in, out] (y = x @ W + b); source ids + <eos>, decoder input <bos> + target, labels
  target + <eos>; pools of --pool examples sorted by (longer side, source, target) length, cut
  into --batch-tokens batches (examples x longest row), the batches shuffled; mean cross-entropy
  with label smoothing; global-norm clipping; Adam (0.9, 0.98, 1e-9); the budget schedules keyed
  to the wall clock.

Needs Debian's python3-torch (optional for seqtape; nothing else uses it).
"""
import argparse
import json
import math
import os
import random
import struct
import sys
import time

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # an optional dependency: say so and stop with the usage code
    sys.exit("torch_reference.py: needs python3-torch (apt-get install python3-torch)")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, h in header.items():
        if h["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {h['dtype']}, this reference reads F32 exports only")
        a, b = h["data_offsets"]
        tensors[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(h["shape"]).copy()
    order = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    return tensors, meta, order


def write_safetensors(path, tensors, meta, order):
    header, offset = {"__metadata__": meta}, 0
    for name in order:
        nbytes = tensors[name].nbytes
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name in order:
            f.write(np.ascontiguousarray(tensors[name], dtype=np.float32).tobytes())
    os.replace(tmp, path)


class Codec:
    """seqtape's chars / words tokenizers per side over one vocabulary (text/text_codec.h)."""

    def __init__(self, vocab_path, kind):
        with open(vocab_path, encoding="utf-8") as f:
            self.tokens = f.read().split("\n")[:-1]
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.pad, self.bos, self.eos, self.unk = (self.ids[t] for t in
                                                  ("<pad>", "<bos>", "<eos>", "<unk>"))
        sides = kind.split("/") if "/" in kind else [kind, kind]
        if any(s not in ("chars", "words") for s in sides):
            sys.exit(f"torch_reference.py: tokenizer '{kind}': only chars and words are mirrored")
        self.src_kind, self.tgt_kind = sides

    def encode(self, text, kind):
        pieces = list(text) if kind == "chars" else text.split()
        return [self.ids.get(p, self.unk) for p in pieces]

    def decode(self, ids):
        sep = "" if self.tgt_kind == "chars" else " "
        return sep.join(self.tokens[i] for i in ids)


class Reference(torch.nn.Module):
    def __init__(self, cfg, weights):
        super().__init__()
        self.cfg = cfg
        self.attention_dropout = cfg.get("attention_dropout", cfg["dropout"])
        self.p = torch.nn.ParameterDict(
            {k.replace(".", "__"): torch.nn.Parameter(torch.from_numpy(v)) for k, v in
             weights.items()})
        C, P = cfg["d_model"], cfg["max_positions"]
        if cfg["pos_encoding"] == "sinusoidal":
            pos = np.arange(P, dtype=np.float64)[:, None]
            two_i = (np.arange(C) - np.arange(C) % 2).astype(np.float64)
            ang = pos / np.power(cfg["pe_base"], two_i / C)
            pe = np.where(np.arange(C) % 2 == 0, np.sin(ang), np.cos(ang))
            self.register_buffer("pe", torch.from_numpy(pe.astype(np.float32)))
        else:
            self.pe = None

    def w(self, name):
        key = name.replace(".", "__")
        return self.p[key] if key in self.p else None

    def drop(self, x):
        return F.dropout(x, self.cfg["dropout"], self.training)

    def linear(self, x, prefix, w, b):
        y = x @ self.w(f"{prefix}.{w}")
        bias = self.w(f"{prefix}.{b}")
        return y + bias if bias is not None else y

    def norm(self, x, prefix):
        if self.cfg["norm"] == "none":
            return x
        C = self.cfg["d_model"]
        return F.layer_norm(x, (C,), self.w(f"{prefix}.gamma"), self.w(f"{prefix}.beta"),
                            self.cfg["layer_norm_eps"])

    def attention(self, x, kv, mask, prefix):
        B, T, C = x.shape
        H = self.cfg["n_heads"]
        q = self.linear(x, prefix, "wq", "bq").view(B, T, H, C // H).transpose(1, 2)
        k = self.linear(kv, prefix, "wk", "bk").view(B, -1, H, C // H).transpose(1, 2)
        v = self.linear(kv, prefix, "wv", "bv").view(B, -1, H, C // H).transpose(1, 2)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
        s = s.masked_fill(mask, float("-inf"))
        a = F.dropout(torch.softmax(s, dim=-1), self.attention_dropout, self.training)
        o = (a @ v).transpose(1, 2).reshape(B, T, C)
        return self.linear(o, prefix, "wo", "bo")

    def ffn(self, x, prefix):
        act = {"relu": F.relu, "gelu": F.gelu, "tanh": torch.tanh}[self.cfg["activation"]]
        return self.linear(act(self.linear(x, prefix, "w1", "b1")), prefix, "w2", "b2")

    def sublayer(self, x, norm_prefix, f):
        placement = self.cfg["norm"]
        if placement == "pre":
            return x + self.drop(f(self.norm(x, norm_prefix)))
        if placement == "post":
            return self.norm(x + self.drop(f(x)), norm_prefix)
        return x + self.drop(f(x))

    def embed(self, ids):
        x = self.w("embed.weight")[ids]
        T = ids.shape[1]
        if self.pe is not None:
            x = x + self.pe[:T]
        elif self.w("pos.weight") is not None:
            x = x + self.w("pos.weight")[:T]
        return self.drop(x)

    def stack(self, name, x, layers, self_mask, memory=None, cross_mask=None):
        for i in range(layers):
            p = f"{name}.layers.{i}"
            x = self.sublayer(x, f"{p}.norm1",
                              lambda h: self.attention(h, h, self_mask, f"{p}.self_attn"))
            n = 2
            if memory is not None:
                x = self.sublayer(x, f"{p}.norm2",
                                  lambda h: self.attention(h, memory, cross_mask,
                                                           f"{p}.cross_attn"))
                n = 3
            x = self.sublayer(x, f"{p}.norm{n}", lambda h: self.ffn(h, f"{p}.ffn"))
        if self.cfg["norm"] == "pre":
            x = self.norm(x, f"{name}.final_norm")
        return x

    def forward(self, src, src_len, tgt_in, tgt_len):
        S, T = src.shape[1], tgt_in.shape[1]
        src_pad = (torch.arange(S)[None, :] >= src_len[:, None])[:, None, None, :]
        memory = self.stack("encoder", self.embed(src), self.cfg["n_encoder_layers"], src_pad)
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)[None, None]
        tgt_pad = (torch.arange(T)[None, :] >= tgt_len[:, None])[:, None, None, :]
        h = self.stack("decoder", self.embed(tgt_in), self.cfg["n_decoder_layers"],
                       causal | tgt_pad, memory, src_pad)
        out_w = self.w("out_proj.weight")
        out_w = out_w if out_w is not None else self.w("embed.weight").t()
        return h @ out_w + self.w("out_proj.bias")


def load_examples(path, codec):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            src, _, tgt = line.rstrip("\n").partition("\t")
            s = codec.encode(src, codec.src_kind) + [codec.eos]
            t = codec.encode(tgt, codec.tgt_kind)
            out.append((s, [codec.bos] + t, t + [codec.eos]))
    return out


def batches(examples, batch_tokens, pool, rng):
    order = list(range(len(examples)))
    rng.shuffle(order)
    cost = [max(len(e[0]), len(e[1])) for e in examples]
    key = [(c, len(e[0]), len(e[1])) for c, e in zip(cost, examples)]  # Python's sort is stable
    out = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start:start + pool], key=lambda i: key[i])
        cur, longest = [], 0
        for i in chunk:
            m = max(longest, cost[i])
            if cur and (len(cur) + 1) * m > batch_tokens:
                out.append(cur)
                cur, longest = [], 0
            cur.append(i)
            longest = max(longest, cost[i])
        if cur:
            out.append(cur)
    rng.shuffle(out)
    return out


def pad(rows, value):
    T = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (T - len(r)) for r in rows], dtype=torch.long)


def lr_at(a, step, fraction):
    base, f = a.lr, min(max(fraction, 0.0), 1.0)
    if a.schedule == "inv-sqrt":
        return a.lr * min(step / a.warmup, math.sqrt(a.warmup / step)) if a.warmup else a.lr
    if a.schedule == "linear":
        base = a.min_lr + (a.lr - a.min_lr) * (1 - f)
    elif a.schedule == "cosine":
        base = a.min_lr + (a.lr - a.min_lr) * 0.5 * (1 + math.cos(math.pi * f))
    elif a.schedule == "wsd" and f > 1 - a.decay_fraction:
        base = a.min_lr + (a.lr - a.min_lr) * (1 - f) / a.decay_fraction
    if a.schedule != "constant" and a.warmup > 0 and step < a.warmup:
        return a.min_lr + (base - a.min_lr) * step / a.warmup
    return base


def make_adam(model, lr):
    """seqtape's Adam (train/optim.h): betas (0.9, 0.98), eps 1e-9."""
    return torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)


def train_step(model, opt, src, src_len, dec, dec_len, labels, label_smoothing, clip,
               bf16=False):
    """One optimizer step: forward, mean cross-entropy over the labels that are not -100,
    backward, global-norm clipping (clip > 0), Adam. bf16: the forward and the loss under CPU
    autocast to bfloat16 (PyTorch's mixed precision: float32 weights, gradients and optimizer)."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(src, src_len, dec, dec_len)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                               ignore_index=-100, label_smoothing=label_smoothing)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    return loss


def train(model, examples, codec, a):
    opt = make_adam(model, a.lr)
    rng = random.Random(a.seed)
    torch.manual_seed(a.seed)
    model.train()
    start, step, tokens, last = time.monotonic(), 0, 0, 0.0
    while True:
        for ids in batches(examples, a.batch_tokens, a.pool, rng):
            elapsed = time.monotonic() - start
            if elapsed >= a.time_limit or (a.steps and step >= a.steps):
                return step, tokens, elapsed
            step += 1
            frac = (elapsed + last) / a.time_limit if not a.steps else step / a.steps
            for g in opt.param_groups:
                g["lr"] = lr_at(a, step, frac)
            t0 = time.monotonic()
            rows = [examples[i] for i in ids]
            src, dec = pad([r[0] for r in rows], codec.pad), pad([r[1] for r in rows], codec.pad)
            labels = pad([r[2] for r in rows], -100)
            loss = train_step(model, opt, src, torch.tensor([len(r[0]) for r in rows]), dec,
                              torch.tensor([len(r[1]) for r in rows]), labels,
                              a.label_smoothing, a.clip, bf16=a.precision == "bf16")
            tokens += int((labels != -100).sum())
            last = time.monotonic() - t0
            if step % 100 == 0:
                print(f"step {step} loss {loss.item():.4f} lr {opt.param_groups[0]['lr']:.2e} "
                      f"{tokens / (time.monotonic() - start):.0f} tok/s", file=sys.stderr)


@torch.no_grad()
def greedy(model, codec, sources, max_new):
    model.eval()
    out = []
    for text in sources:
        src = torch.tensor([codec.encode(text, codec.src_kind) + [codec.eos]])
        dec = [codec.bos]
        for _ in range(max_new):
            logits = model(src, torch.tensor([src.shape[1]]), torch.tensor([dec]),
                           torch.tensor([len(dec)]))
            nxt = int(logits[0, -1].argmax())
            if nxt == codec.eos:
                break
            dec.append(nxt)
        out.append(codec.decode(dec[1:]))
    return out


def duration(text):
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True, help="seqtape export of the initial model")
    ap.add_argument("--data", required=True, help="training TSV (source<TAB>target)")
    ap.add_argument("--out", required=True, help="directory for the trained export")
    ap.add_argument("--time-limit", type=duration, default=600.0, help="wall time: 90s, 30m, 1h")
    ap.add_argument("--steps", type=int, default=0, help="stop after N steps (0: time only)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=400)
    ap.add_argument("--schedule", default="wsd",
                    choices=["constant", "inv-sqrt", "wsd", "cosine", "linear"])
    ap.add_argument("--decay-fraction", type=float, default=0.2)
    ap.add_argument("--min-lr", type=float, default=0.0)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--pool", type=int, default=20000)
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="f32", choices=["f32", "bf16"],
                    help="bf16: the forward and the loss under torch.autocast (cpu, bfloat16)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", type=int, default=0,
                    help="greedy-decode the first N sources of --check-data and print them")
    ap.add_argument("--check-data", help="TSV whose sources --check decodes")
    ap.add_argument("--check-max-new", type=int, default=64,
                    help="--check: tokens generated at most (generate's --max-new)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(os.path.join(a.init, "config.json")) as f:
        cfg = json.load(f)
    weights, meta, order = read_safetensors(os.path.join(a.init, "model.safetensors"))
    codec = Codec(os.path.join(a.init, "vocab.txt"), meta.get("tokenizer", "chars"))
    model = Reference(cfg, weights)
    examples = load_examples(a.data, codec)
    steps, tokens, secs = train(model, examples, codec, a)
    print(json.dumps({"steps": steps, "target_tokens": tokens, "seconds": round(secs, 1),
                      "tokens_per_second": round(tokens / max(secs, 1e-9)),
                      "torch": torch.__version__, "threads": a.threads,
                      "precision": a.precision}))
    os.makedirs(a.out, exist_ok=True)
    trained = {k: model.w(k).detach().numpy() for k in weights}
    meta = dict(meta, step=str(steps))
    write_safetensors(os.path.join(a.out, "model.safetensors"), trained, meta, order)
    for name in ("config.json", "vocab.txt"):
        with open(os.path.join(a.init, name), "rb") as src, open(os.path.join(a.out, name),
                                                                 "wb") as dst:
            dst.write(src.read())
    if a.check:
        with open(a.check_data, encoding="utf-8") as f:
            sources = [line.split("\t")[0] for _, line in zip(range(a.check), f)]
        for s, h in zip(sources, greedy(model, codec, sources, a.check_max_new)):
            print(f"{s}\t{h}", file=sys.stdout)


if __name__ == "__main__":
    main()
