"""Children started with :func:`tidgap.module_command.module_command` import the
parent's tidgap, not a ``tidgap`` folder in the current one (a checkout beside an
installed tidgap), and get their arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tidgap.module_command import module_command


def test_a_tidgap_folder_here_does_not_shadow_the_parents(tmp_path: Path) -> None:
    shadow = tmp_path / "tidgap"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the shadow')\n", encoding="utf-8")
    (tmp_path / "in.json").write_text('{"a": [1, 2]}', encoding="utf-8")

    def run(command: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
        )

    shadowed = run([sys.executable, "-m", "tidgap.module_command"])
    assert shadowed.returncode != 0 and "the shadow" in shadowed.stderr  # what -m does
    assert run(module_command("tidgap.module_command")).returncode == 0
    tool = run(module_command("json.tool", "in.json"))
    assert tool.returncode == 0 and json.loads(tool.stdout) == {"a": [1, 2]}
