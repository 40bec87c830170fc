#!/usr/bin/env python3
"""Plots ssu-bench --replay results: microseconds per decode step against batch.

Usage: plot_replay.py RESULTS.json [OUT.png|OUT.svg|OUT.pdf]

RESULTS.json holds one or more ssu-bench JSON documents back to back (as
tools/gpu-check.sh writes them); the documents of other modes are ignored.
Each replay document becomes one panel with three lines: the replay step
(whole ring cycles, per step), the plain update of the same shape and batch,
and the floor (the replay step's mean bytes over the copy ceiling). Both
axes are logarithmic. Needs matplotlib; without it the script prints the
numbers it would plot and exits 0. OUT defaults to RESULTS with .png.
"""
import json
import math
import os
import sys


def documents(text):
    dec, i, out = json.JSONDecoder(), 0, []
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        doc, i = dec.raw_decode(text, i)
        out.append(doc)
    return out


def label(doc):
    c = doc["config"]
    shape = (f"Mamba-1 P={c['dim']} N={c['dstate']}" if c.get("mamba1") else
             f"H={c['heads']} P={c['dim']} N={c['dstate']} G={c['groups']}")
    acc = c.get("num_accepted")
    tokens = f", T={c['tokens']}" + (f" accept {acc}" if acc is not None else "")
    return (f"{shape}, {c['state_dtype']} state, {c['input_dtype']} inputs, "
            f"L={c['ring_len']}{tokens if c.get('tokens', 1) > 1 or acc is not None else ''}")


def series(doc):
    """(batch, replay us or None, plain us, floor us or None) per row."""
    out = []
    for r in doc.get("rows", []):
        out.append((r["batch"], r.get("time_us"), r.get("plain_time_us"), r.get("floor_us")))
    return out


def print_table(docs):
    for doc in docs:
        print(f"# {label(doc)} | {doc.get('device', '?')} | {doc.get('date', '')}")
        if doc.get("replay_skipped"):
            print(f"# replay not timed: {doc['replay_skipped']}")
        print("batch  replay_us  plain_us  floor_us")
        fmt = lambda v: "-" if v is None else f"{v:.1f}"
        for b, rep, plain, floor in series(doc):
            print(f"{b:5d}  {fmt(rep):>9}  {fmt(plain):>8}  {fmt(floor):>8}")
        print()


def main():
    if len(sys.argv) not in (2, 3) or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) == 2 else 2
    path = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.splitext(path)[0] + ".png"
    with open(path) as f:
        docs = [d for d in documents(f.read()) if d.get("mode") == "replay"]
    if not docs:
        print(f"plot_replay.py: no replay results (ssu-bench --replay) in {path}", file=sys.stderr)
        return 1
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_replay.py: matplotlib is not installed; no plot written. The numbers:",
              file=sys.stderr)
        print_table(docs)
        return 0

    cols = min(2, len(docs))
    rows = math.ceil(len(docs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.4 * rows), squeeze=False)
    for ax, doc in zip(axes.flat, docs):
        data = series(doc)
        batches = [d[0] for d in data]
        for idx, name, style in ((2, "plain update", "o-"), (1, "replay", "s-"),
                                 (3, "floor (bytes / copy ceiling)", "k--")):
            pts = [(d[0], d[idx]) for d in data if d[idx] is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=name,
                        markersize=4)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(batches)
        ax.set_xticklabels([str(b) for b in batches])
        ax.set_xlabel("batch (sequences per step)")
        ax.set_ylabel("us per decode step")
        title = label(doc)
        if doc.get("replay_skipped"):
            title += "\n(replay not timed)"
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(docs):]:
        ax.axis("off")
    first = docs[0]
    fig.suptitle(f"ssu-bench --replay | {first.get('device', '?')} | "
                 f"{first.get('libssu_version', '')} | {first.get('date', '')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot_replay.py: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
