"""The CPU evaluation backends (NumPy matrix form, Numba), installed as ``tidgap.fallback_cpu``.

Imported only when a CPU backend is chosen, so ``import tidgap`` never imports Numba.

Threading default: importing this package sets ``GOMP_SPINCOUNT=1000`` in ``os.environ``
unless ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` is already set (an explicit setting wins).
Without TBB installed, Numba's parallel loops run on its OpenMP layer, GNU libgomp, whose
waiting threads (the workers between parallel calls, the caller at a call's final barrier)
otherwise spin 300000 ``pause`` rounds, about 7.5 ms on this project's 2-core machine, before
they sleep. When other processes keep the cores busy, the spinning threads take the time
slices that the thread holding the work needs: there, with one or two busy processes,
``tidgap search example:vgg16 --generations 200`` searched for 1.2-2.3 s instead of 0.6 s
(10-25 s on a busier machine) and an evaluation of 4096 individuals took 8 ms, at times
60-130 ms, instead of 7. 1000 rounds (about 25 us) still bridge a call's final barrier:
unloaded that costs under 10% (3.7 ms vs 3.4 per 4096 individuals, search 0.61 s vs 0.59),
loaded about what sleeping at once costs. ``OMP_WAIT_POLICY=PASSIVE`` (no spin) is as good
loaded but makes every parallel call wait ~0.2 ms for the threads to wake (search 0.70 s
unloaded).

libgomp reads the variable once, when Numba loads it on starting its threads (the first
parallel call, or ``numba.get_num_threads()``); Python runs this file before any module of the
package, so every Numba kernel here gets it, also when ``numba`` itself was imported earlier.
Limits: if the process had already started Numba's OpenMP threads, libgomp keeps what it read
then; the variable also reaches child processes and other copies of libgomp loaded later (a
short spin suits them too); OpenMP runtimes other than libgomp ignore it. TBB and Numba's
workqueue layer do not spin this way and are left alone. The thread count stays Numba's (one
per CPU in the affinity mask): with one busy process 2 threads are as fast as 1, unloaded 1
thread is 1.7x slower, and a load average lags by a minute.
"""

from __future__ import annotations

import os

#: libgomp's spin count (``pause`` rounds before a waiting thread sleeps) set on import when
#: neither variable of :data:`USER_SETTINGS` is set; libgomp's own default is 300000.
SPIN_COUNT = 1000

#: Variables that, when set by the user, leave the waiting to them.
USER_SETTINGS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")

if not any(name in os.environ for name in USER_SETTINGS):
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
