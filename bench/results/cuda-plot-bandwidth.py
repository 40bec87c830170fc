#!/usr/bin/env python3
"""Plots achieved bandwidth against batch from ssu-bench --json output.

Usage: cuda-plot-bandwidth.py RESULTS.json OUT.svg
RESULTS.json holds one or more ssu-bench JSON documents back to back (as
tools/gpu-check.sh writes them). Writes a dependency-free SVG: one line per
configuration (update GB/s) and, dashed, the size-matched copy of the first.
"""
import json
import math
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
    if c.get("mamba1"):
        return f"Mamba-1 P={c['dim']} N={c['dstate']}, {c['state_dtype']} state"
    t = f", T={c['tokens']}" if c.get("tokens", 1) > 1 else ""
    return f"{c['state_dtype']} state{t}"


def main():
    docs = documents(open(sys.argv[1]).read())
    W, H, L, R, T, B = 760, 440, 70, 250, 40, 50
    xs = [r["batch"] for d in docs for r in d["rows"]]
    ymax = max(max(r["gbps"], r["copy_gbps"]) for d in docs for r in d["rows"])
    ymax = math.ceil(ymax / 500.0) * 500
    lx0, lx1 = math.log2(min(xs)), math.log2(max(xs))

    def px(b):
        return L + (math.log2(b) - lx0) / max(lx1 - lx0, 1e-9) * (W - L - R)

    def py(v):
        return H - B - v / ymax * (H - T - B)

    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="22" font-size="14">{docs[0]["device"]}: libssu CUDA update, '
           f'achieved GB/s vs batch</text>']
    for v in range(0, int(ymax) + 1, 500):
        out.append(f'<line x1="{L}" y1="{py(v):.1f}" x2="{W - R}" y2="{py(v):.1f}" '
                   f'stroke="#ddd"/><text x="{L - 8}" y="{py(v) + 4:.1f}" '
                   f'text-anchor="end">{v}</text>')
    for b in sorted(set(xs)):
        out.append(f'<text x="{px(b):.1f}" y="{H - B + 16}" text-anchor="middle">{b}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">batch '
               f'(sequences per call, log scale)</text>')
    out.append(f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 '
               f'{(T + H - B) / 2})" text-anchor="middle">GB/s (bytes that must move / time)</text>')

    def poly(rows, key, color, dash=""):
        pts = " ".join(f"{px(r['batch']):.1f},{py(r[key]):.1f}" for r in rows)
        d = f' stroke-dasharray="{dash}"' if dash else ""
        return f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"{d}/>'

    for k, d in enumerate(docs):
        c = colors[k % len(colors)]
        out.append(poly(d["rows"], "gbps", c))
        y = T + 18 * k
        out.append(f'<line x1="{W - R + 15}" y1="{y}" x2="{W - R + 40}" y2="{y}" stroke="{c}" '
                   f'stroke-width="2"/><text x="{W - R + 45}" y="{y + 4}">{label(d)}</text>')
    out.append(poly(docs[0]["rows"], "copy_gbps", "#555", "5,4"))
    y = T + 18 * len(docs)
    out.append(f'<line x1="{W - R + 15}" y1="{y}" x2="{W - R + 40}" y2="{y}" stroke="#555" '
               f'stroke-dasharray="5,4" stroke-width="2"/><text x="{W - R + 45}" y="{y + 4}">'
               f'size-matched D2D copy ({label(docs[0])})</text>')
    out.append("</svg>")
    open(sys.argv[2], "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
