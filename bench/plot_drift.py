#!/usr/bin/env python3
"""Plots ssu-drift results: each state format's error against float64 per step.

Usage: plot_drift.py RESULTS.json [OUT.svg|OUT.png|OUT.pdf]

RESULTS.json is what `ssu-drift --json FILE` wrote. Left panel: the state's
relative RMS error ||s - s_ref|| / ||s_ref|| over the whole pool against the
decode step, both axes logarithmic, one line per format (stochastic rounding
dashed, in the colour of its format). Right panel: the state's bias,
mean((s - s_ref) * sign(s_ref)) / rms(s_ref), on a symmetric-log axis, which
tells rounding that loses or gains magnitude (round to nearest stalling)
from noise that averages out. Needs matplotlib; without it the script prints
the numbers it would plot and exits 0. OUT defaults to RESULTS with .svg.
"""
import json
import os
import sys

# One colour per storage format; its stochastic-rounding variant shares it.
COLOURS = {"f32": "black", "bf16": "tab:blue", "f16": "tab:green", "i16": "tab:purple",
           "i8": "tab:orange", "e4m3": "tab:red"}


def base(name):
    return name[:-3] if name.endswith("-sr") else name


def print_table(doc):
    print(f"# {doc.get('device', '?')} | libssu {doc.get('libssu_version', '')} | "
          f"{doc.get('date', '')}")
    print("format   step  state_rel_rms  state_bias")
    for f in doc["formats"]:
        for step, rms, bias in zip(f["steps"], f["state_rel_rms"], f["state_bias"]):
            print(f"{f['name']:8s} {step:5d}  {rms if rms is not None else float('nan'):.3e}"
                  f"  {bias if bias is not None else float('nan'):+.2e}")


def main():
    if len(sys.argv) not in (2, 3) or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) == 2 else 2
    path = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.splitext(path)[0] + ".svg"
    with open(path) as fh:
        doc = json.load(fh)
    if doc.get("tool") != "ssu-drift" or not doc.get("formats"):
        print(f"plot_drift.py: {path} is not an ssu-drift result", file=sys.stderr)
        return 1
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_drift.py: matplotlib is not installed; no plot written. The numbers:",
              file=sys.stderr)
        print_table(doc)
        return 0

    fig, (ax_rms, ax_bias) = plt.subplots(1, 2, figsize=(13, 5.2))
    for f in doc["formats"]:
        colour = COLOURS.get(base(f["name"]), "gray")
        style = "--" if f.get("rounding") == "stochastic" else "-"
        # JSON null (a NaN or Inf in the run) leaves a gap rather than a lie.
        rms = [(s, v) for s, v in zip(f["steps"], f["state_rel_rms"]) if v is not None and v > 0]
        ax_rms.plot([p[0] for p in rms], [p[1] for p in rms], style, color=colour,
                    label=f["name"], linewidth=1.5)
        bias = [(s, v) for s, v in zip(f["steps"], f["state_bias"]) if v is not None]
        ax_bias.plot([p[0] for p in bias], [p[1] for p in bias], style, color=colour,
                     label=f["name"], linewidth=1.5)

    ax_rms.set_xscale("log")
    ax_rms.set_yscale("log")
    ax_rms.set_xlabel("decode step")
    ax_rms.set_ylabel("state relative RMS error vs float64")
    ax_rms.set_title("||s - s_ref|| / ||s_ref|| over the pool", fontsize=10)
    ax_rms.grid(True, which="both", alpha=0.3)
    ax_rms.legend(fontsize=8, ncol=2)

    ax_bias.set_xscale("log")
    # Linear within +-1e-6 (f32's bias is ~1e-8), logarithmic outside.
    ax_bias.set_yscale("symlog", linthresh=1e-6)
    ax_bias.axhline(0.0, color="gray", linewidth=0.8)
    ax_bias.set_xlabel("decode step")
    ax_bias.set_ylabel("mean((s - s_ref) sign(s_ref)) / rms(s_ref)")
    ax_bias.set_title("bias: > 0 stored magnitudes too large, < 0 too small", fontsize=10)
    ax_bias.grid(True, which="both", alpha=0.3)
    ax_bias.legend(fontsize=8, ncol=2)

    c = doc["config"]
    fig.suptitle(f"ssu-drift | batch {c['batch']}, H={c['heads']} P={c['dim']} N={c['dstate']} "
                 f"G={c['groups']}, {c['input_dtype']} inputs, seed {c['seed']} | "
                 f"{doc.get('device', '?')} | libssu {doc.get('libssu_version', '')} | "
                 f"{doc.get('date', '')}", fontsize=10)
    fig.tight_layout()
    # A fixed hash salt keeps the SVG's element ids the same from run to run.
    matplotlib.rcParams["svg.hashsalt"] = "ssu-drift"
    fig.savefig(out, dpi=120, metadata={"Date": None} if out.endswith(".svg") else None)
    print(f"plot_drift.py: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
