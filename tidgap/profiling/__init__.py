"""Profiling PyTorch models into ``tidgap.problem/1`` files (``tidgap profile``).

:mod:`~tidgap.profiling.models` (what to measure), :mod:`~tidgap.profiling.measure` (how
to time it) and :mod:`~tidgap.profiling.run` (the whole profile) import PyTorch;
:mod:`~tidgap.profiling.split` (where stages begin) and :mod:`~tidgap.profiling.build`
(the document) do not, and ``import tidgap`` imports none of them.
"""
