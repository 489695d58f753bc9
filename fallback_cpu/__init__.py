"""The CPU evaluation backends (NumPy matrix form, Numba), installed as ``tidgap.fallback_cpu``.

Imported only when a CPU backend is chosen, so ``import tidgap`` never imports Numba.
"""
