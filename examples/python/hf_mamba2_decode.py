#!/usr/bin/env python3
"""Greedy decoding of a transformers Mamba-2 model with libssu as its SSM step.

Builds a small Mamba-2 language model with random weights from a config in
this file (nothing is downloaded), then decodes TOKENS tokens greedily for a
batch of random prompts three ways:
  1. transformers' own decode path (the reference);
  2. the same model with its single-token SSM step replaced by
     ssu.torch.selective_state_update on a slot pool: every layer's state
     lives in a pool of POOL slots, and the batch's sequences occupy
     scattered slots of it, as in a serving engine;
  3. (CUDA only) path 2 with one whole decode step -- every layer, the
     sampling of the next token included -- captured into a CUDA graph and
     replayed once per token.
Paths 2 and 3 must produce exactly the reference's tokens, and logits within
a tolerance of the reference's. Exits 0 when they do, 1 otherwise.

    python3 hf_mamba2_decode.py [--device cuda|cpu] [--tokens 64] [--json FILE]

Needs torch, transformers and the ssu package (pip install ./bindings/python).
"""

import argparse
import inspect
import json
import sys
import time

import torch

import ssu.torch as ssut

# A small Mamba-2: 4 layers, 8 heads of 64 channels, state size 64, 2 groups.
CONFIG = dict(vocab_size=1024, hidden_size=256, num_hidden_layers=4, num_heads=8, head_dim=64,
              state_size=64, n_groups=2, expand=2, conv_kernel=4, chunk_size=64,
              initializer_range=0.1, use_cache=True, tie_word_embeddings=False)
BATCH, PROMPT, POOL = 3, 12, 8
SLOTS = [5, 0, 3]  # where the batch's sequences live in the pool
LOGIT_RTOL = 1e-3  # of the largest reference logit


class SlotPoolStep:
    """Replaces transformers' single-token SSM step (mamba2_selective_state_update).

    transformers hands each layer's (batch, heads, head_dim, state) cache
    tensor to the step; the first time a layer's tensor is seen (the first
    decode step, right after prefill) its rows are copied into that layer's
    pool at SLOTS. From then on the layer's state is the pool, updated in
    place by libssu at state_batch_indices = SLOTS; transformers' own cache
    tensor is no longer read."""

    def __init__(self, device):
        self.slots = torch.tensor(SLOTS, dtype=torch.int32, device=device)
        self.pools = {}  # data_ptr of a layer's cache tensor -> that layer's pool
        self.calls = 0

    def __call__(self, state, hidden_states, dt, A, B, C, D=None, z=None, dt_bias=None,
                 dt_softplus=False, **unused):
        self.calls += 1
        pool = self.pools.get(state.data_ptr())
        if pool is None:
            pool = state.new_zeros((POOL,) + tuple(state.shape[1:]))
            pool[self.slots.long()] = state
            self.pools[state.data_ptr()] = pool
        return ssut.selective_state_update(pool, hidden_states, dt, A, B, C, D=D, z=z,
                                           dt_bias=dt_bias, dt_softplus=dt_softplus,
                                           state_batch_indices=self.slots)


def build_model(device):
    from transformers import Mamba2Config, Mamba2ForCausalLM
    torch.manual_seed(0)
    model = Mamba2ForCausalLM(Mamba2Config(**CONFIG)).to(device=device, dtype=torch.float32)
    return model.eval()


def cache_keyword(model):
    """transformers renamed the cache argument (cache_params -> cache)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "cache_params"


def output_cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.cache_params


@torch.no_grad()
def decode_eager(model, prompt, tokens):
    """Greedy decoding, one forward per token; returns (tokens, logits)."""
    kw = cache_keyword(model)
    out = model(prompt, use_cache=True)
    cache = output_cache(out)
    tok = out.logits[:, -1].argmax(-1, keepdim=True)
    toks, logits = [tok], [out.logits[:, -1]]
    for _ in range(tokens - 1):
        out = model(tok, use_cache=True, **{kw: cache})
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        toks.append(tok)
        logits.append(out.logits[:, -1])
    return torch.cat(toks, 1), torch.stack(logits, 1)


@torch.no_grad()
def decode_graph(model, prompt, tokens):
    """Greedy decoding with the decode step captured into a CUDA graph: the
    prefill and the first decode step run eagerly (they also build the
    pools and libssu's cached plans), the rest are graph replays."""
    kw = cache_keyword(model)
    out = model(prompt, use_cache=True)
    cache = output_cache(out)
    tok = out.logits[:, -1].argmax(-1, keepdim=True)
    toks, logits = [tok], [out.logits[:, -1]]
    out = model(tok, use_cache=True, **{kw: cache})
    static_tok = out.logits[:, -1].argmax(-1, keepdim=True)
    toks.append(static_tok.clone())
    logits.append(out.logits[:, -1])

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # captures on its own stream, the current one inside
        static_logits = model(static_tok, use_cache=True, **{kw: cache}).logits[:, -1]
        static_tok.copy_(static_logits.argmax(-1, keepdim=True))
    for _ in range(tokens - 2):
        graph.replay()
        toks.append(static_tok.clone())
        logits.append(static_logits.clone())
    torch.cuda.synchronize()
    return torch.cat(toks, 1), torch.stack(logits, 1)


def compare(name, ref, got, step, expected_calls):
    """Tokens and logits of a libssu run against the reference; `step` must
    have served every layer's SSM step of every decode step."""
    ref_toks, ref_logits = ref
    toks, logits = got
    same = bool(torch.equal(ref_toks, toks))
    first_diff = None
    if not same:
        first_diff = int((ref_toks != toks).any(0).nonzero()[0])
    steps = min(ref_logits.shape[1], logits.shape[1])
    err = (logits[:, :steps] - ref_logits[:, :steps]).abs().max().item()
    scale = ref_logits.abs().max().item()
    used = step.calls == expected_calls and len(step.pools) == CONFIG["num_hidden_layers"]
    ok = same and err <= LOGIT_RTOL * scale and used
    print(f"{'PASS' if ok else 'FAIL'} {name}: tokens {'identical' if same else 'differ'}"
          + (f" (first at step {first_diff})" if first_diff is not None else "")
          + f", max |logit diff| {err:.3g} (largest logit {scale:.3g}, "
          f"tolerance {LOGIT_RTOL * scale:.3g}); libssu ran {step.calls} SSM steps "
          f"(expected {expected_calls}) on {len(step.pools)} layer pools")
    return dict(name=name, ok=ok, tokens_identical=same, max_logit_diff=err, logit_scale=scale,
                ssm_steps=step.calls)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--json", help="write the results to this file")
    opt = ap.parse_args()

    import transformers
    from transformers.models.mamba2 import modeling_mamba2

    device = torch.device(opt.device)
    model = build_model(device)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, CONFIG["vocab_size"], (BATCH, PROMPT), generator=g).to(device)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"device {device}, batch {BATCH}, prompt {PROMPT}, tokens {opt.tokens}")

    results = []
    t0 = time.perf_counter()
    ref = decode_eager(model, prompt, opt.tokens)
    t_ref = time.perf_counter() - t0
    # The reference's smallest gap between the top two logits: a logit
    # difference below half of it cannot change a greedy token.
    top2 = ref[1].topk(2, dim=-1).values
    margin = (top2[..., 0] - top2[..., 1]).min().item()
    print(f"reference: {t_ref:.2f} s; smallest top-2 logit gap {margin:.3g}")

    layers = CONFIG["num_hidden_layers"]
    original = modeling_mamba2.mamba2_selective_state_update
    try:
        step = modeling_mamba2.mamba2_selective_state_update = SlotPoolStep(device)
        t0 = time.perf_counter()
        got = decode_eager(model, prompt, opt.tokens)
        print(f"libssu eager: {time.perf_counter() - t0:.2f} s")
        results.append(compare("libssu slot pool, eager", ref, got, step,
                               layers * (opt.tokens - 1)))
        if device.type == "cuda":
            step = modeling_mamba2.mamba2_selective_state_update = SlotPoolStep(device)
            try:
                t0 = time.perf_counter()
                got = decode_graph(model, prompt, opt.tokens)
                print(f"libssu CUDA graph: {time.perf_counter() - t0:.2f} s")
                # The eager first decode step and the capture call the step;
                # replays run the captured kernels without calling it.
                results.append(compare("libssu slot pool, CUDA graph", ref, got, step,
                                       2 * layers))
            except Exception as e:  # report a capture failure as a failed check
                print(f"FAIL libssu slot pool, CUDA graph: {type(e).__name__}: {e}")
                results.append(dict(name="libssu slot pool, CUDA graph", ok=False,
                                    error=f"{type(e).__name__}: {e}"))
    finally:
        modeling_mamba2.mamba2_selective_state_update = original

    ok = all(r["ok"] for r in results)
    if opt.json:
        with open(opt.json, "w") as f:
            json.dump(dict(transformers=transformers.__version__, torch=torch.__version__,
                           device=str(device), tokens=opt.tokens, batch=BATCH,
                           reference_top2_margin=margin, results=results, ok=ok), f, indent=1)
    print(f"hf_mamba2_decode: {'PASS' if ok else 'FAIL'} "
          f"({sum(r['ok'] for r in results)}/{len(results)} checks)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
