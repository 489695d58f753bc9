"""CUDA sources (``*.cu``, ``*.cuh``) and the CuPy launchers that compile and call them.

Installed as ``tidgap.kernels``; imported only when the GPU backend is chosen, so
``import tidgap`` never imports CuPy.
"""
