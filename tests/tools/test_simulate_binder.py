"""tools/simulate_binder.py without building anything: an environment built ahead (CI builds
it in the background) is used only while binder/ is what it was built from."""

from __future__ import annotations

import shutil

import pytest
import simulate_binder as sb


@pytest.fixture
def binder(tmp_path, monkeypatch):
    """A copy of binder/ that the tool reads instead of the real one."""
    folder = tmp_path / "binder"
    shutil.copytree(sb.BINDER, folder)
    monkeypatch.setattr(sb, "BINDER", folder)
    return folder


def test_an_environment_is_ready_only_with_the_mark_of_binder_as_it_is(binder, tmp_path):
    env = tmp_path / "env"
    assert sb.ready_python(env) is None  # never built
    env.mkdir()
    (env / ".ready").write_text(sb.ready_mark(), encoding="utf-8")
    assert sb.ready_python(env) == str(env / "bin" / "python")
    (binder / "requirements.txt").write_text("torch>=2.9\n", encoding="utf-8")  # binder/ changed
    assert sb.ready_python(env) is None
    (env / ".ready").write_text(sb.ready_mark(), encoding="utf-8")
    assert sb.ready_python(env) is not None


def test_build_only_builds_and_runs_no_suite_and_a_later_run_uses_what_it_built(
    binder, tmp_path, monkeypatch, capsys
):
    built, ran = [], []

    def fake_build(env):
        built.append(env)
        env.mkdir(parents=True, exist_ok=True)
        (env / ".ready").write_text(sb.ready_mark(), encoding="utf-8")
        return str(env / "bin" / "python")

    class Passed:
        returncode = 0

    monkeypatch.setattr(sb, "build", fake_build)
    monkeypatch.setattr(sb.subprocess, "run", lambda command, **kw: ran.append(command) or Passed())
    env = tmp_path / "env"
    assert sb.main(["--env", str(env), "--build-only"]) == 0
    assert built == [env] and ran == []
    assert sb.main(["--env", str(env)]) == 0
    assert built == [env] and ran[0][:3] == [str(env / "bin" / "python"), "-m", "pytest"]
    assert "is ready" in capsys.readouterr().out
    (binder / "postBuild").write_text("echo changed\n", encoding="utf-8")
    assert sb.main(["--env", str(env)]) == 0
    assert built == [env, env]  # binder/ changed: built again
