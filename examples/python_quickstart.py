#!/usr/bin/python3
"""seqtape from Python in one minute: make the copy task, train on it for about a minute with a
progress callback, then decode held-out strings greedily and with beam search.

    cmake --build build            # makes build/python/seqtape
    PYTHONPATH=build/python /usr/bin/python3 examples/python_quickstart.py [WORK_DIR]
"""

import os
import sys
import tempfile

import seqtape


def main():
    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="seqtape-quickstart-")
    data = os.path.join(work, "copy")
    # The copy task (random strings of Chinese characters, held-out strings never in training),
    # by the CLI's own gen-copy run in this process.
    seqtape.command("gen-copy", "--out", data, "--train", "10000", "--valid", "200")

    def progress(step, loss, lr, tokens_per_second):
        if step % 100 == 0:
            print(f"step {step:5d}  loss {loss:.4f}  lr {lr:.2e}  {tokens_per_second:,.0f} tokens/s")

    # The keyword arguments are `seqtape train`'s flags (time_limit = --time-limit, ...).
    run = seqtape.train(data=os.path.join(data, "train.tsv"), valid=os.path.join(data, "valid.tsv"),
                        vocab=os.path.join(data, "vocab.txt"), preset="default", batch=64,
                        lr=2e-3, warmup=200, time_limit="60s", schedule="wsd", eval_max=100,
                        log_every=500, no_progress=True, out=os.path.join(work, "run"),
                        overwrite=True, callback=progress)
    print("run directory:", run)

    model = seqtape.Model.load(run)
    held_out = [line.split("\t")[0] for line in open(os.path.join(data, "valid.tsv"),
                                                     encoding="utf-8")][:8]
    for greedy, beam in zip(model.generate(held_out), model.generate(held_out, beam=4)):
        mark = "ok " if greedy["text"] == greedy["input"] else "   "
        print(f"{mark}{greedy['input']:<14} greedy {greedy['text']:<14} beam 4 {beam['text']}")


if __name__ == "__main__":
    main()
