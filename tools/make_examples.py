"""Write the built-in example problems to ``tidgap/data/examples/NAME.json``.

``python3 tools/make_examples.py`` rewrites the synthetic ones: ``hetero-8`` is
``tidgap synth`` output, ``tiny-2`` a hand-picked toy. ``python3 tools/make_examples.py
--measure`` also re-measures ``gpt1-14`` and ``vgg16`` with ``tidgap profile`` (needs
PyTorch, ``pip install '.[profile]'`` in the checkout; about ten minutes on 2 CPU cores). The
measured numbers depend on the machine: each file's ``source`` says where and how.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tidgap.cli.profile import profile_command
from tidgap.profiling.synth import synth_problem

OUT = Path(__file__).resolve().parent.parent / "tidgap" / "data" / "examples"
Json = dict[str, Any]

#: ``tidgap profile`` arguments of the measured examples (CPU hosts on 10 Gb Ethernet).
MEASURED = {
    "gpt1-14": "gpt --layers 14 --hidden 768 --heads 12 --seq-len 128 --stages 4 "
    "--batch-size 32 --unit 1 --repeats 5 --warmup 1",
    "vgg16": "vgg16 --image-size 64 --stages 5 --batch-size 64 --unit 4 --repeats 5 --warmup 2",
}
COMMON = "--threads 2 --bandwidth 1.25 --latency 0.1"


def affine(base: float, per_sample: float) -> Json:
    """An affine time function ``base + per_sample * b`` (ms)."""
    return {"affine": {"base": base, "per_sample": per_sample}}


def tiny_2() -> Json:
    """A two-stage toy for quick demos: stage 0 affine, stage 1 a table flat from 1 to 2."""
    forward = [1.5, 1.6, 2.4, 4.0]
    table = {"sizes": [1, 2, 4, 8], "times": forward}
    link = {"forward": affine(0.2, 0.05), "backward": affine(0.2, 0.05)}
    stages = [
        {"name": "s0", "forward": affine(1.0, 0.5), "backward": affine(2.0, 1.0), "tail": 0.5},
        {
            "name": "s1",
            "forward": {"table": table},
            "backward": {"table": {**table, "times": [2 * t for t in forward]}},
            "tail": 0.5,
        },
    ]
    derivation = (
        "HAND-PICKED toy numbers, not derived from a network and not measured: stage 0 "
        "affine, stage 1 a table that is flat from 1 to 2 samples, backward twice forward; "
        "link 0.2 ms + 0.05 ms per sample each way; tails 0.5 ms."
    )
    source = {
        "description": "Two-stage toy, batch 8, unit 1, for quick demos",
        "derivation": derivation,
        "generated_by": "tools/make_examples.py",
    }
    document = {"format": "tidgap.problem/1", "name": "tiny-2", "batch_size": 8, "unit": 1}
    return document | {"time_unit": "ms", "stages": stages, "links": [link], "source": source}


def write(name: str, document: Json) -> None:
    """Write one example file."""
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}")


def main() -> None:
    """(Re)write the synthetic examples, and with ``--measure`` the measured ones."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="store_true", help="also run tidgap profile")
    measure = parser.parse_args().measure
    write("hetero-8", synth_problem(2024, 8, 256, 8, 0.6, "affine", name="hetero-8"))
    write("tiny-2", tiny_2())
    for name, arguments in MEASURED.items() if measure else ():
        out = ["--out", str(OUT / f"{name}.json")]
        profile_command.main([*arguments.split(), *COMMON.split(), *out], standalone_mode=False)


if __name__ == "__main__":
    main()
