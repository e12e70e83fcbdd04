"""seqtape from Python: tensors and autograd, training, and batched decoding.

    import seqtape
    run = seqtape.train(data="datasets/reference/copy.tsv", preset="seed", steps=300,
                        lr=0.02, out="runs/py")
    model = seqtape.Model.load(run)
    model.generate(["abc"], beam=4)   # the dicts `seqtape generate --json` prints

See docs/python.md. Use Debian's /usr/bin/python3, the Python the module is built for.
"""

import errno
import json
import os

from ._seqtape import (GradcheckResult, Tensor, concat, cross_entropy, exp, gelu, gradcheck,
                       log, log_softmax, matmul, mean, no_grad, relu, reshape, slice, softmax,
                       sqrt, sum, tanh, transpose)
from . import _seqtape

__all__ = ["Tensor", "Model", "train", "command", "gradcheck", "GradcheckResult", "no_grad", "matmul",
           "tanh", "relu", "gelu", "exp", "log", "sqrt", "softmax", "log_softmax", "sum",
           "mean", "reshape", "transpose", "slice", "concat", "cross_entropy"]

# generate()'s list-valued fields (the decoding options whose default is a list: stop, end,
# suppress): a single string is taken as a list of one.
_LIST_FIELDS = tuple(o["name"] for o in json.loads(_seqtape._request_options())
                     if isinstance(o["default"], list))


def _must_exist(path, what):
    """A path the user gave that is not there: FileNotFoundError naming it (as open() would)."""
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, f"{what} not found: {os.strerror(errno.ENOENT)}",
                                os.fspath(path))


class Model:
    """A trained model for decoding: Model.load(checkpoint.bin, a run directory or an export
    directory), as `seqtape generate --model` takes."""

    def __init__(self, compiled):
        self._m = compiled

    @classmethod
    def load(cls, path, compute_type=None):
        """compute_type: "f32", "bf16", "int8" or "auto", as generate's --compute-type (None:
        the files' own type, float32 for a checkpoint)."""
        path = os.fspath(path)
        _must_exist(path, "model")
        return cls(_seqtape._Model.load(path, compute_type or ""))

    @property
    def path(self):
        return self._m.path

    @property
    def config(self):
        return json.loads(self._m.config)

    @property
    def vocab_size(self):
        return self._m.vocab_size

    def generate(self, inputs, batch_size=32, **options):
        """Decodes `inputs` (a list of str, or one str) with the options of `seqtape generate`
        under their /v1/generate field names (n_best=2, no_cache=True; the server's request
        parser reads and checks them), batch_size inputs at a time, and returns one dict per
        input: the object `seqtape generate --json` prints. The GIL is released while decoding."""
        if isinstance(inputs, str):
            inputs = [inputs]
        inputs = list(inputs)
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if "input" in options or "inputs" in options or "stream" in options:
            raise ValueError("give the inputs as generate's first argument (a list of str); "
                             "streaming is not offered from Python")
        for f in _LIST_FIELDS:
            if isinstance(options.get(f), str):
                options[f] = [options[f]]
        if not inputs:
            return []
        results = []
        for at in range(0, len(inputs), batch_size):
            body = json.dumps({"inputs": inputs[at:at + batch_size], **options})
            results.extend(json.loads(self._m._generate_json(body)))
        return results

    def __repr__(self):
        return f"seqtape.Model({self.path!r})"


def _flags(options):
    """Keyword arguments → `seqtape train` flags: n_best=2 → --n-best 2, resume=True →
    --resume (False: left out), a list → the flag once per value."""
    flags = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            flags.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                flags += [flag, str(v)]
        else:
            flags += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return flags


def train(options=None, callback=None, **kwargs):
    """Trains as `seqtape train` does, with the same options (keyword arguments, or a dict,
    named as the flags with underscores: data, out, preset, steps, lr, batch, time_limit, ...).
    `callback(step, loss, lr, tokens_per_second)` runs after every step; returning True or
    raising StopIteration ends the run after that step (saved and evaluated). Returns the run
    directory. Bad options or data raise ValueError with the CLI's message, missing files
    FileNotFoundError (an OSError)."""
    opts = dict(options or {})
    opts.update(kwargs)
    for key, what in (("data", "training data"), ("valid", "validation data"),
                      ("vocab", "vocabulary"), ("config", "configuration file")):
        if opts.get(key) is not None:
            _must_exist(os.fspath(opts[key]), what)
    out = opts.get("out")
    if out is not None and os.path.exists(out) and not os.path.isdir(out):
        raise NotADirectoryError(errno.ENOTDIR, "the output directory (out) is a file",
                                 os.fspath(out))
    if callback is not None and not callable(callback):
        raise TypeError("callback must be callable as callback(step, loss, lr, tokens_per_second)")
    code = _seqtape._run_command(["train"] + _flags(opts), callback)
    if code in (130, 143):  # stopped by SIGINT / SIGTERM after saving
        raise KeyboardInterrupt(f"training stopped by signal {code - 128}; the run is saved in "
                                f"{opts.get('out')} (continue with resume=True)")
    if code != 0:
        raise RuntimeError(f"seqtape train ended with exit code {code}")
    return os.path.abspath(os.fspath(opts["out"]))


def command(*args):
    """Runs any `seqtape` command line in this process, e.g.
    seqtape.command("gen-copy", "--out", "data/copy") or seqtape.command("export", "--model",
    run, "--out", "exported"); returns its exit code (0; 1 when a check such as gradcheck
    fails). Usage and data errors raise ValueError with the CLI's message."""
    return _seqtape._run_command([os.fspath(a) if isinstance(a, os.PathLike) else str(a)
                                  for a in args])
