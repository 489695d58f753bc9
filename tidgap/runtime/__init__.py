"""``tidgap run``: execute any plan on torch.distributed, one process per stage.

The plan's order is lowered to per-rank instructions (:mod:`tidgap.runtime.lowering`), which
an executor (:mod:`tidgap.runtime.executor`) dispatches to handlers: in-process fakes for
tests (``tests/support/runtime_fakes.py``), torch.distributed point-to-point for real runs.
Nothing here imports PyTorch until a run starts.
"""
