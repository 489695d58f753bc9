"""Write the built-in example problems to ``tidgap/data/examples/NAME.json``.

Every number is an ANALYTIC ESTIMATE from a simple cost model (FLOPs over an
assumed throughput, a kernel-launch floor, bytes over an assumed bandwidth),
not a measurement. Deterministic, standard library only:
``python3 tools/make_examples.py`` (re)writes the files.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "tidgap" / "data" / "examples"
Json = dict[str, Any]


def sig(x: float, digits: int = 4) -> float:
    """``x`` rounded to ``digits`` significant digits (keeps the files readable)."""
    return float(f"{x:.{digits}g}")


def affine(base: float, per_sample: float) -> Json:
    """An affine time function ``base + per_sample * b``."""
    return {"affine": {"base": sig(base), "per_sample": sig(per_sample)}}


def table(sizes: list[int], time: Callable[[int], float]) -> Json:
    """A table time function sampled from ``time`` at ``sizes``."""
    return {"table": {"sizes": sizes, "times": [sig(time(b)) for b in sizes]}}


def saturating(flops: float, floor_ms: float, tput: float, overhead_ms: float
               ) -> Callable[[int], float]:
    """``b -> overhead + max(floor, b * flops / tput)`` in ms: flat while the device is idle."""
    return lambda b: overhead_ms + max(floor_ms, 1e3 * b * flops / tput)


def transfer(bytes_per_sample: float, bandwidth: float, latency_ms: float) -> Json:
    """A link moving ``bytes_per_sample`` per sample each way: latency + bytes / bandwidth."""
    fn = affine(latency_ms, 1e3 * bytes_per_sample / bandwidth)
    return {"forward": fn, "backward": fn}


def problem(name: str, batch: int, unit: int, stages: list[Json], links: list[Json],
            description: str, derivation: str) -> Json:
    """A ``tidgap.problem/1`` document."""
    return {"format": "tidgap.problem/1", "name": name, "batch_size": batch, "unit": unit,
            "time_unit": "ms", "stages": stages, "links": links,
            "source": {"description": description, "derivation": derivation,
                       "generated_by": "tools/make_examples.py"}}


def gpt1_14() -> Json:
    """GPT-1 with 14 blocks on 4 A100-class GPUs; saturating tables, affine links."""
    hidden, seq, vocab, batch = 768, 512, 40478, 64
    tput, launch, overhead, hbm = 50e12, 20e-6, 0.2, 1.5e12  # FLOP/s, s, ms, B/s
    block_flops = 24 * seq * hidden**2 + 4 * seq**2 * hidden  # per sample, forward
    head_flops = 2 * seq * hidden * vocab
    block_params, emb_params = 12 * hidden**2 + 13 * hidden, (vocab + seq) * hidden
    # (blocks, extra forward FLOPs, extra kernels, extra params) per stage
    split = [(3, 0, 4, emb_params), (4, 0, 0, 0), (4, 0, 0, 0), (3, head_flops, 4, vocab * hidden)]
    sizes = [1, 2, 4, 8, 16, 32, 64]
    stages = []
    for s, (blocks, extra, kernels, params) in enumerate(split):
        flops, launches = blocks * block_flops + extra, blocks * 28 + kernels
        fwd = saturating(flops, 1e3 * launches * launch, tput, overhead)
        bwd = saturating(2 * flops, 2e3 * launches * launch, tput, overhead)
        tail = 1e3 * (blocks * block_params + params) * 32 / hbm + 0.1
        stages.append({"name": f"s{s}", "forward": table(sizes, fwd),
                       "backward": table(sizes, bwd), "tail": sig(tail)})
    act = seq * hidden * 2
    links = [transfer(act, 25e9, 0.05) for _ in range(3)]
    return problem(
        "gpt1-14", batch, 1, stages, links,
        "GPT-1, 14 blocks on 4 stages (emb+3, 4, 4, 3+LM head), batch 64; analytic estimate",
        f"ANALYTIC ESTIMATE, not measured. Forward FLOPs per sample: transformer block "
        f"24*L*h^2 + 4*L^2*h = {block_flops / 1e9:.2f} GFLOP (L={seq}, h={hidden}), LM head "
        f"2*L*h*V = {head_flops / 1e9:.2f} GFLOP (V={vocab}, untied), embedding ~0; backward = "
        f"2x forward FLOPs and kernels. Assumed accelerator: {tput / 1e12:g} TFLOP/s sustained "
        f"fp16 (A100-class), {launch * 1e6:g} us launch/dispatch per kernel, 28 kernels per "
        f"block forward (+4 for embedding, +4 for head and loss). Compute time (ms) = "
        f"{overhead} + max(kernels*launch, b*FLOPs/throughput): flat at small microbatches, "
        f"then linear. Links: fp16 activations L*h*2 = {act} bytes/sample each way at 25 GB/s "
        f"(PCIe-class) + 0.05 ms latency. Tail: Adam step, 32 bytes/parameter at "
        f"{hbm / 1e12:g} TB/s HBM + 0.1 ms.")


VGG_CONVS = [  # (name, input side, in channels, out channels, max-pool after)
    ("conv1_1", 224, 3, 64, False), ("conv1_2", 224, 64, 64, True),
    ("conv2_1", 112, 64, 128, False), ("conv2_2", 112, 128, 128, True),
    ("conv3_1", 56, 128, 256, False), ("conv3_2", 56, 256, 256, False),
    ("conv3_3", 56, 256, 256, True), ("conv4_1", 28, 256, 512, False),
    ("conv4_2", 28, 512, 512, False), ("conv4_3", 28, 512, 512, True),
    ("conv5_1", 14, 512, 512, False), ("conv5_2", 14, 512, 512, False),
    ("conv5_3", 14, 512, 512, True)]


def vgg16() -> Json:
    """VGG16 (224x224) on 5 V100-class GPUs: heavy early links, a weight-bound FC stage."""
    tput, launch, overhead, hbm, bandwidth = 14e12, 20e-6, 0.3, 900e9, 10e9
    cuts = [(0, 3), (3, 6), (6, 9), (9, 13)]  # conv layers per stage; the FC layers follow
    fcs = [(25088, 4096), (4096, 4096), (4096, 1000)]
    stages, act_bytes = [], []
    for s, (lo, hi) in enumerate(cuts):
        layers = VGG_CONVS[lo:hi]
        flops = sum(2 * side**2 * cin * cout * 9 for _, side, cin, cout, _ in layers)
        params = sum(9 * cin * cout + cout for _, _, cin, cout, _ in layers)
        _, side, _, cout, pool = layers[-1]
        act_bytes.append((side // 2 if pool else side) ** 2 * cout * 4)  # fp32
        floor = 1e3 * 3 * len(layers) * launch  # conv, bias, ReLU kernels
        if s == 3:
            fwd, bwd = affine(overhead, 1e3 * flops / tput), affine(overhead, 2e3 * flops / tput)
        else:
            sizes = [4, 8, 16, 32] if s == 0 else [4, 8, 16, 32, 64, 128]
            fwd = table(sizes, saturating(flops, floor, tput, overhead))
            bwd = table(sizes, saturating(2 * flops, 2 * floor, tput, overhead))
        stages.append({"name": f"{layers[0][0]}-{layers[-1][0]}", "forward": fwd,
                       "backward": bwd, "tail": sig(1e3 * params * 20 / hbm + 0.1)})
    stages[0]["max_microbatch"] = 32
    fc_flops = sum(2 * i * o for i, o in fcs)
    fc_params = sum(i * o + o for i, o in fcs)
    weight_read = 1e3 * fc_params * 4 / hbm  # ms to stream the fp32 weights once
    sizes = [4, 8, 16, 32, 64, 128]
    stages.append({"name": "fc6-fc8",
                   "forward": table(sizes, saturating(fc_flops, weight_read, tput, overhead)),
                   "backward": table(sizes, saturating(2 * fc_flops, 2 * weight_read, tput,
                                                       overhead)),
                   "tail": sig(1e3 * fc_params * 20 / hbm + 0.1)})
    links = [transfer(a, bandwidth, 0.1) for a in act_bytes]
    mb = ", ".join(f"{a / 1e6:.2f}" for a in act_bytes)
    return problem(
        "vgg16", 128, 4, stages, links,
        "VGG16 (224x224), 5 uneven stages, batch 128, unit 4, cap 32 on stage 0; "
        "analytic estimate",
        f"ANALYTIC ESTIMATE, not measured. Forward FLOPs per sample: conv 2*H*W*Cin*Cout*9, "
        f"FC 2*in*out ({fc_flops / 1e9:.3f} GFLOP for fc6-fc8, {fc_params / 1e6:.1f} M "
        f"parameters); backward = 2x. Assumed accelerator: {tput / 1e12:g} TFLOP/s sustained "
        f"fp32 (V100-class), {hbm / 1e9:g} GB/s HBM, {launch * 1e6:g} us per kernel launch, 3 "
        f"kernels per conv layer. Compute time (ms) = {overhead} + max(floor, b*FLOPs/"
        f"throughput), floor = launches (conv stages) or one read of the FC weights "
        f"({weight_read:.3f} ms). Links: fp32 activations of {mb} MB/sample at "
        f"{bandwidth / 1e9:g} GB/s (PCIe 3.0-class) + 0.1 ms latency. Tail: SGD-momentum "
        f"step, 20 bytes/parameter at HBM speed + 0.1 ms. The cap of 32 on stage 0 is an "
        f"assumed memory limit (large 224x224 activations), there to exercise caps.")


def hetero_8() -> Json:
    """A simulated 8-stage network with random per-stage affine costs (seed 2024)."""
    rng = random.Random(2024)
    stages, links = [], []
    for s in range(8):
        base, per = rng.uniform(0.5, 4.0), rng.uniform(0.01, 0.08)
        ratio = rng.uniform(1.5, 2.5)
        stages.append({"name": f"s{s}", "forward": affine(base, per),
                       "backward": affine(base * ratio, per * ratio),
                       "tail": sig(rng.uniform(0.2, 3.0))})
    for _ in range(7):
        fn = affine(rng.uniform(0.05, 0.5), rng.uniform(0.001, 0.02))
        links.append({"forward": fn, "backward": fn})
    return problem(
        "hetero-8", 256, 8, stages, links,
        "Simulated heterogeneous network, 8 stages, batch 256, unit 8, affine costs",
        "SYNTHETIC, not a real network or a measurement (like the simulation networks of "
        "the UMPIPE paper). Drawn from random.Random(2024) in tools/make_examples.py: "
        "forward base U(0.5, 4) ms and per_sample U(0.01, 0.08) ms; backward = forward "
        "times U(1.5, 2.5); tail U(0.2, 3) ms; each link, same both ways, latency U(0.05, "
        "0.5) ms and U(0.001, 0.02) ms per sample.")


def tiny_2() -> Json:
    """A two-stage toy for quick demos."""
    stages = [{"name": "s0", "forward": affine(1.0, 0.5), "backward": affine(2.0, 1.0),
               "tail": 0.5},
              {"name": "s1",
               "forward": {"table": {"sizes": [1, 2, 4, 8], "times": [1.5, 1.6, 2.4, 4.0]}},
               "backward": {"table": {"sizes": [1, 2, 4, 8], "times": [3.0, 3.2, 4.8, 8.0]}},
               "tail": 0.5}]
    return problem(
        "tiny-2", 8, 1, stages, [transfer(0.05e6, 1e9, 0.2)],
        "Two-stage toy, batch 8, for quick demos",
        "HAND-PICKED toy numbers, not derived from a network or measured: stage 0 affine, "
        "stage 1 a table that is flat from 1 to 2 samples; link 0.2 ms + 0.05 ms/sample.")


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
