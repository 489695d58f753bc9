"""The launcher of ``tidgap run``'s and ``calibrate``'s workers
(:func:`tidgap.runtime.launch.launch`) when it is told to stop."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_to_the_launcher_kills_its_workers_and_runs_its_cleanup(
    tmp_path: Path, signum: int, status: int
) -> None:
    """SIGTERM (or SIGHUP: a closed terminal) to the launcher's pid ended it at once (no
    line, its folder left; the workers' watchdogs ended them); now its cleanup runs: the
    workers are killed, a line says so, the status is 143 (129)."""
    (tmp_path / "sleeper.py").write_text(
        "import os, sys, time\n"
        "open(sys.argv[1] + f'.{os.getpid()}', 'w').close()\n"
        "time.sleep(120)\n"
    )
    script = (
        "import signal, sys\n"
        "signal.signal(signal.SIGHUP, signal.SIG_DFL)  # not nohup's\n"
        "from tidgap.runtime.launch import launch\n"
        "try:\n"
        f"    launch({str(tmp_path / 'pid')!r}, 2, 1, 120, {str(tmp_path)!r}, module='sleeper')\n"
        "finally:\n"
        f"    open({str(tmp_path / 'cleaned')!r}, 'w').close()\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    launcher = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("pid.*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = [int(path.suffix[1:]) for path in tmp_path.glob("pid.*")]
    assert len(workers) == 2
    launcher.send_signal(signum)
    _, stderr = launcher.communicate(timeout=60)
    alive = []
    for worker in workers:
        try:
            os.kill(worker, signal.SIGKILL)  # none is left behind, even when the test fails
            alive.append(worker)
        except ProcessLookupError:
            pass
    assert launcher.returncode == status
    assert b"tidgap: terminated" in stderr
    assert (tmp_path / "cleaned").exists()
    assert alive == [], f"workers {alive} outlived their launcher"


def test_the_rank_that_failed_first_is_named_though_it_exits_later(tmp_path: Path) -> None:
    """Rank 1 fails first (its log written at once) but exits after rank 0, whose
    connection to it broke: the launcher named rank 0 with its peer's error; it now lets
    the others exit (a grace of seconds) and names the first log written."""
    from tidgap.runtime.launch import WorkerError, _wait

    logs = [tmp_path / "rank0.log", tmp_path / "rank1.log"]
    script = (
        "import sys, time\n"
        "delay, line, linger = float(sys.argv[2]), sys.argv[3], float(sys.argv[4])\n"
        "time.sleep(delay)\n"
        "open(sys.argv[1], 'w').write(line + '\\n')\n"
        "time.sleep(linger)\n"
        "sys.exit(1)\n"
    )
    ranks = [
        subprocess.Popen([sys.executable, "-c", script, str(logs[0]), "0.6", "peer closed", "0"]),
        subprocess.Popen([sys.executable, "-c", script, str(logs[1]), "0.1", "the cause", "1.2"]),
    ]
    try:
        _wait(ranks, logs, timeout=30)
    except WorkerError as error:
        assert str(error) == "rank 1 exited with status 1 (then rank 0 too): the cause"
    else:
        raise AssertionError("no WorkerError")
    finally:
        for process in ranks:
            process.kill()
            process.wait()


def test_a_watchdogs_timeout_removes_the_temporary_folders_in_use(tmp_path: Path) -> None:
    """``profile --measure-links --timeout`` left its links' folder behind: the watchdog
    ends the process with ``os._exit``, which runs no ``finally``."""
    folder = tmp_path / "links"
    folder.mkdir()
    (folder / "job.json").write_text("{}")
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from tidgap.outputs.atomic import abandoned_at_once\n"
        "from tidgap.runtime.worker import start_watchdog\n"
        "with abandoned_at_once(Path(sys.argv[1])):\n"
        "    start_watchdog(0.2, 'tidgap profile', launched=False)\n"
        "    time.sleep(60)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(folder)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 124, done.stderr
    assert "tidgap profile timed out; exiting" in done.stderr
    assert not folder.exists()


def ended_by(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` (no child of this one) ends within ``seconds``: it is gone or
    a zombie (its new parent may not reap it)."""
    status = Path(f"/proc/{pid}/status")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = next(x for x in status.read_text().splitlines() if x.startswith("State:"))
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            return True
        if "Z" in state.split()[1]:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_launcher_gone_before_the_watchdog_starts_is_seen(tmp_path: Path) -> None:
    """Under torchrun a stage's watchdog took its parent at the call, after the model was
    built: an agent killed before then left the stage running to its timeout (init was
    its parent by then). Now the parent is the one the process had when it imported
    tidgap: the stage ends once the watchdog starts."""
    imported, watching = tmp_path / "imported", tmp_path / "watching"
    stage = (
        "import os, sys, time\n"
        "import tidgap\n"
        f"open({str(imported)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(1.0)  # its parent ends meanwhile\n"
        "from tidgap.runtime.worker import start_watchdog\n"
        f"open({str(watching)!r}, 'w').close()\n"
        "start_watchdog(60)\n"
        "time.sleep(60)\n"
    )
    agent = (
        "import os, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {stage!r}], start_new_session=True)\n"
        f"while not os.path.exists({str(imported)!r}):\n"
        "    time.sleep(0.05)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "TIDGAP_LAUNCHER_PID"}
    subprocess.run([sys.executable, "-c", agent], env=env, timeout=60, check=True)
    pid = int(imported.read_text())
    try:
        assert ended_by(pid, 20), "the stage outlived its launcher"
        assert watching.exists(), "the stage ended before it started its watchdog"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_worker_killed_by_a_signal_is_said_so() -> None:
    from tidgap.runtime.launch import ended

    assert ended(1) == "exited with status 1"
    assert ended(-signal.SIGKILL) == "was killed by SIGKILL"
    assert ended(-200) == "was killed by signal 200"
