"""The CPU evaluation backends (NumPy matrix form, Numba), installed as ``tidgap.fallback_cpu``.

Imported only when a CPU backend is chosen, so ``import tidgap`` never imports Numba. The
Numba loops run in plain threads of the process (:mod:`tidgap.fallback_cpu.threads`), not
on Numba's own threading layer.
"""
