"""Write the built-in example problems to ``tidgap/data/examples/NAME.json``.

Every number is an ANALYTIC ESTIMATE from a simple cost model (FLOPs over an
assumed throughput, with a floor while the device is under-used; bytes over an
assumed bandwidth), not a measurement. Deterministic, standard library only:
``python3 tools/make_examples.py`` (re)writes the files.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "tidgap" / "data" / "examples"
Json = dict[str, Any]
#: ``time(b, k)`` in ms for ``b`` samples; ``k`` = 1 forward, 2 backward (twice the work).
Cost = Callable[[int, float], float]


def sig(x: float, digits: int = 4) -> float:
    """``x`` rounded to ``digits`` significant digits (keeps the files readable)."""
    return float(f"{x:.{digits}g}")


def affine(base: float, per_sample: float) -> Json:
    """An affine time function ``base + per_sample * b``."""
    return {"affine": {"base": sig(base), "per_sample": sig(per_sample)}}


def tables(sizes: list[int], time: Cost) -> tuple[Json, Json]:
    """Forward and backward table time functions sampled from ``time`` at ``sizes``."""
    fwd = [sig(time(b, 1.0)) for b in sizes]
    bwd = [sig(time(b, 2.0)) for b in sizes]
    return {"table": {"sizes": sizes, "times": fwd}}, {"table": {"sizes": sizes, "times": bwd}}


def link(latency_ms: float, ms_per_sample: float) -> Json:
    """A link with the same affine cost for activations and for their gradients."""
    cost = affine(latency_ms, ms_per_sample)
    return {"forward": cost, "backward": cost}


def stage(name: str, fwd_bwd: tuple[Json, Json], tail: float, **caps: int) -> Json:
    """One stage; ``caps`` may hold ``max_microbatch`` or ``max_microbatch_backward``."""
    return {"name": name, "forward": fwd_bwd[0], "backward": fwd_bwd[1], **caps, "tail": sig(tail)}


def problem(
    name: str,
    batch: int,
    unit: int,
    stages: list[Json],
    links: list[Json],
    description: str,
    derivation: str,
) -> Json:
    """A ``tidgap.problem/1`` document, with its provenance under ``source``."""
    document = {"format": "tidgap.problem/1", "name": name, "batch_size": batch, "unit": unit}
    document |= {"time_unit": "ms", "stages": stages, "links": links}
    document["source"] = {"description": description, "derivation": derivation}
    document["source"]["generated_by"] = "tools/make_examples.py"
    return document


def gpt1_14() -> Json:
    """GPT-1, 14 blocks, 4 A100-class GPUs: tables flat while kernel launches dominate."""
    hidden, seq, vocab = 768, 512, 40478
    tput, launch_ms, overhead, hbm = 50e12, 0.02, 0.2, 1.5e12  # FLOP/s, ms, ms, B/s
    block_flops = 24 * seq * hidden**2 + 4 * seq**2 * hidden  # per sample, forward
    head_flops, head_params = 2 * seq * hidden * vocab, vocab * hidden
    emb_params = (vocab + seq) * hidden
    block_params = 12 * hidden**2 + 13 * hidden

    def time(b: int, k: float, flops: float, kernels: int) -> float:
        return overhead + k * max(kernels * launch_ms, b * flops / tput * 1e3)

    # per stage: blocks, extra forward FLOPs, extra kernels, extra parameters
    split = [(3, 0, 4, emb_params), (4, 0, 0, 0), (4, 0, 0, 0), (3, head_flops, 4, head_params)]
    stages = []
    for s, (blocks, flops, kernels, params) in enumerate(split):
        cost = partial(time, flops=flops + blocks * block_flops, kernels=kernels + 28 * blocks)
        tail = (params + blocks * block_params) * 32 / hbm * 1e3 + 0.1
        stages.append(stage(f"s{s}", tables([1, 2, 4, 8, 16, 32, 64], cost), tail))
    act = seq * hidden * 2
    derivation = (
        f"ANALYTIC ESTIMATE, not measured. Forward FLOPs per sample: transformer block "
        f"24*L*h^2 + 4*L^2*h = {block_flops / 1e9:.2f} GFLOP (L={seq}, h={hidden}); LM head "
        f"2*L*h*V = {head_flops / 1e9:.2f} GFLOP (V={vocab}, weights not tied across stages); "
        f"embedding ~0. Backward: 2x the forward FLOPs and kernels. Assumed accelerator: "
        f"{tput / 1e12:g} TFLOP/s sustained fp16 (A100-class), {launch_ms * 1e3:g} us launch "
        f"and dispatch per kernel, 28 kernels per block forward (+4 embedding, +4 head and "
        f"loss). Compute ms = {overhead} + max(kernels * launch, b * FLOPs / throughput): flat "
        f"while launches dominate, then linear. Links: fp16 activations L*h*2 = {act} "
        f"bytes/sample each way at 25 GB/s (PCIe-class) + 0.05 ms latency. Tail: Adam step, "
        f"32 bytes per parameter at {hbm / 1e12:g} TB/s HBM + 0.1 ms."
    )
    description = "GPT-1, 14 blocks, 4 stages (emb+3, 4, 4, 3+head), batch 64; analytic estimate"
    links = [link(0.05, act / 25e9 * 1e3)] * 3
    return problem("gpt1-14", 64, 1, stages, links, description, derivation)


VGG16_CFG = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def vgg16_convs() -> list[tuple[str, int, int, int, bool]]:
    """VGG16's 3x3 convolutions on 224x224: (name, side, in channels, out channels, pooled)."""
    layers, side, cin, block, i = [], 224, 3, 1, 0
    for j, item in enumerate(VGG16_CFG):
        if item == "M":
            side, block, i = side // 2, block + 1, 0
            continue
        i += 1
        layers.append((f"conv{block}_{i}", side, cin, item, VGG16_CFG[j + 1] == "M"))
        cin = item
    return layers


def vgg16() -> Json:
    """VGG16, 5 V100-class GPUs: heavy early links, late convs under-used, FC weight-bound."""
    tput, overhead, hbm, bw, rows = 14e12, 0.3, 900e9, 10e9, 4096  # FLOP/s, ms, B/s, B/s
    fcs = [(25088, 4096), (4096, 4096), (4096, 1000)]
    fc_flops, fc_params = sum(2 * i * o for i, o in fcs), sum(i * o + o for i, o in fcs)
    read = fc_params * 4 / hbm * 1e3  # ms to stream the fp32 FC weights once
    convs = vgg16_convs()

    def conv_time(b: int, k: float, layers: list) -> float:
        flops = [2 * n * n * ci * co * 9 * max(b, rows / n**2) for _, n, ci, co, _ in layers]
        return overhead + k * sum(flops) / tput * 1e3

    def fc_time(b: int, k: float) -> float:
        return overhead + k * max(read, b * fc_flops / tput * 1e3)

    stages, links, megabytes = [], [], []
    for s, (lo, hi) in enumerate([(0, 3), (3, 6), (6, 9), (9, 13)]):
        layers = convs[lo:hi]
        _, side, _, cout, pooled = layers[-1]
        act = (side // 2 if pooled else side) ** 2 * cout * 4  # fp32 activations per sample
        cost = partial(conv_time, layers=layers)
        if s == 1:  # every layer here fills the device from 4 samples on: affine from there
            per = (cost(8, 1) - cost(4, 1)) / 4
            fwd_bwd = affine(overhead, per), affine(overhead, 2 * per)
        else:
            fwd_bwd = tables([4, 8, 16, 32] if s == 0 else [4, 8, 16, 32, 64, 128], cost)
        name, caps = f"{layers[0][0]}-{layers[-1][0]}", {"max_microbatch": 32} if s == 0 else {}
        tail = sum(9 * ci * co + co for _, _, ci, co, _ in layers) * 20 / hbm * 1e3 + 0.1
        stages.append(stage(name, fwd_bwd, tail, **caps))
        links.append(link(0.1, act / bw * 1e3))
        megabytes.append(f"{act / 1e6:.2f}")
    fc_tail = fc_params * 20 / hbm * 1e3 + 0.1
    stages.append(stage("fc6-fc8", tables([4, 8, 16, 32, 64, 128], fc_time), fc_tail))
    conv_flops = sum(2 * n * n * ci * co * 9 for _, n, ci, co, _ in convs)
    derivation = (
        f"ANALYTIC ESTIMATE, not measured. Forward FLOPs per sample: 3x3 conv 2*H*W*Cin*Cout*9 "
        f"({conv_flops / 1e9:.2f} GFLOP in all), FC 2*in*out ({fc_flops / 1e9:.3f} GFLOP, "
        f"{fc_params / 1e6:.1f} M parameters in fc6-fc8); backward = 2x. Assumed accelerator: "
        f"{tput / 1e12:g} TFLOP/s sustained fp32 (V100-class), {hbm / 1e9:g} GB/s HBM. A conv "
        f"layer is billed as if its GEMM had at least {rows} output rows (b*H*W), so the 28x28 "
        f"and 14x14 layers are under-used at small microbatches; the FC stage costs at least "
        f"one read of its fp32 weights ({read:.3f} ms). Compute ms = {overhead} + that. Links: "
        f"fp32 activations of {', '.join(megabytes)} MB/sample at {bw / 1e9:g} GB/s (PCIe "
        f"3.0-class) + 0.1 ms latency. Tail: SGD-momentum step, 20 bytes per parameter at HBM "
        f"speed + 0.1 ms. The cap of 32 on stage 0 is an assumed memory limit (224x224 "
        f"activations), there to exercise caps."
    )
    description = "VGG16 (224x224), 5 uneven stages, batch 128, unit 4, cap 32; analytic estimate"
    return problem("vgg16", 128, 4, stages, links, description, derivation)


def hetero_8() -> Json:
    """A simulated 8-stage network with random per-stage affine costs (seed 2024)."""
    rng = random.Random(2024)
    stages = []
    for s in range(8):
        base, per, ratio = rng.uniform(0.5, 4.0), rng.uniform(0.01, 0.08), rng.uniform(1.5, 2.5)
        fwd_bwd = affine(base, per), affine(base * ratio, per * ratio)
        stages.append(stage(f"s{s}", fwd_bwd, rng.uniform(0.2, 3.0)))
    links = [link(rng.uniform(0.05, 0.5), rng.uniform(0.001, 0.02)) for _ in range(7)]
    derivation = (
        "SYNTHETIC, not a real network and not measured (like the simulation networks of the "
        "UMPIPE paper). Drawn from random.Random(2024) in tools/make_examples.py: forward base "
        "U(0.5, 4) ms and per_sample U(0.01, 0.08) ms; backward = forward times U(1.5, 2.5); "
        "tail U(0.2, 3) ms; each link, the same both ways, latency U(0.05, 0.5) ms plus "
        "U(0.001, 0.02) ms per sample."
    )
    description = "Simulated heterogeneous network, 8 stages, batch 256, unit 8, affine costs"
    return problem("hetero-8", 256, 8, stages, links, description, derivation)


def tiny_2() -> Json:
    """A two-stage toy for quick demos."""
    s1 = tables([1, 2, 4, 8], lambda b, k: k * {1: 1.5, 2: 1.6, 4: 2.4, 8: 4.0}[b])
    stages = [stage("s0", (affine(1.0, 0.5), affine(2.0, 1.0)), 0.5), stage("s1", s1, 0.5)]
    derivation = (
        "HAND-PICKED toy numbers, not derived from a network and not measured: stage 0 "
        "affine, stage 1 a table that is flat from 1 to 2 samples, backward twice forward; "
        "link 0.2 ms + 0.05 ms per sample each way; tails 0.5 ms."
    )
    description = "Two-stage toy, batch 8, unit 1, for quick demos"
    return problem("tiny-2", 8, 1, stages, [link(0.2, 0.05)], description, derivation)


def main() -> None:
    """(Re)write every example file."""
    OUT.mkdir(parents=True, exist_ok=True)
    for make in (gpt1_14, vgg16, hetero_8, tiny_2):
        document = make()
        path = OUT / f"{document['name']}.json"
        path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
