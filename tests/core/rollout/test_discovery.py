from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from osmosis_ai.errors import DiscoveryError
from osmosis_ai.rollout import AgentWorkflowConfig, GraderConfig
from osmosis_ai.rollout.running import load_entrypoint

HEADER = "from osmosis_ai.rollout import AgentWorkflow, Grader, AgentWorkflowConfig, GraderConfig\n"

WORKFLOW = """
class Solve(AgentWorkflow):
    async def run(self, ctx):
        return []
"""

GRADER = """
class Check(Grader):
    async def grade(self, ctx):
        pass
"""


def entry(tmp_path: Path, body: str, name: str = "main.py") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def test_finds_workflow_grader_and_configs(tmp_path: Path) -> None:
    path = entry(tmp_path, WORKFLOW + GRADER + """
cfg = AgentWorkflowConfig(name="solve", max_turns=3)
gcfg = GraderConfig(name="check")
""")
    ep = load_entrypoint(path)
    assert ep.workflow_cls.__name__ == "Solve" and ep.grader_cls is not None
    assert ep.grader_cls.__name__ == "Check"
    assert isinstance(ep.workflow_config, AgentWorkflowConfig)
    assert isinstance(ep.grader_config, GraderConfig)
    assert ep.path == path.resolve()
    wf = ep.new_workflow()
    assert wf.config == ep.workflow_config and wf.config is not ep.workflow_config  # deep copy


def test_grader_is_optional_and_config_names_win(tmp_path: Path) -> None:
    ep = load_entrypoint(entry(tmp_path, WORKFLOW + """
workflow_config = {"plain": "dict"}
other = AgentWorkflowConfig(name="a")
another = AgentWorkflowConfig(name="b")
"""))
    assert ep.grader_cls is None and ep.new_grader() is None
    assert ep.workflow_config == {"plain": "dict"}
    assert ep.grader_config is None


def test_imported_and_abstract_classes_are_not_discovered(tmp_path: Path) -> None:
    (tmp_path / "base.py").write_text(HEADER + WORKFLOW + GRADER)
    ep = load_entrypoint(entry(tmp_path, """
import abc
from base import Solve as Imported, Check as ImportedCheck

class Base(AgentWorkflow):
    @abc.abstractmethod
    async def helper(self): ...

class Mine(Base):
    async def run(self, ctx):
        return []
    async def helper(self): ...
"""))
    assert ep.workflow_cls.__name__ == "Mine"
    assert ep.grader_cls is None  # the imported grader does not count


def test_a_workflow_imported_into_the_entrypoint_is_found(tmp_path: Path) -> None:
    """osmosis-ai 0.3 workspaces keep the workflow in a package beside main.py."""
    (tmp_path / "base.py").write_text(HEADER + WORKFLOW)
    ep = load_entrypoint(entry(tmp_path, "from base import Solve\n" + GRADER))
    assert ep.workflow_cls.__name__ == "Solve" and ep.workflow_cls.__module__ == "base"
    assert ep.grader_cls is not None and ep.grader_cls.__name__ == "Check"


def test_two_imported_workflows_name_what_was_found_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "two_flows.py").write_text(HEADER + WORKFLOW + WORKFLOW.replace("Solve", "Other"))
    path = entry(tmp_path, "from two_flows import Solve, Other\n" + GRADER)
    with pytest.raises(DiscoveryError) as info:
        load_entrypoint(path)
    text = str(info.value)
    assert text.startswith(f"{path.resolve()}: no AgentWorkflow subclass is defined in this file")
    assert "found only Solve (imported from two_flows), Other (imported from two_flows)" in text
    assert "Define one here ('class MyWorkflow(AgentWorkflow)" in text
    assert "LocalBackend(workflow=MyWorkflow" in text


def test_zero_workflows_reports_abstract_ones(tmp_path: Path) -> None:
    path = entry(tmp_path, "class Half(AgentWorkflow):\n    pass\n")
    with pytest.raises(DiscoveryError, match=r"found only Half \(abstract: implement "
                                             r"'async def run\(self, ctx\)'\)"):
        load_entrypoint(path)


def test_two_workflows_names_both_with_lines(tmp_path: Path) -> None:
    path = entry(tmp_path, WORKFLOW + WORKFLOW.replace("Solve", "Other"))
    with pytest.raises(DiscoveryError) as info:
        load_entrypoint(path)
    assert str(info.value).startswith(
        f"{path.resolve()}: found 2 AgentWorkflow subclasses (Solve (line 3), Other (line 7)); "
        "an entrypoint defines exactly one."
    )
    assert "move the others to another module" in str(info.value)


def test_two_graders(tmp_path: Path) -> None:
    path = entry(tmp_path, WORKFLOW + GRADER + GRADER.replace("Check", "Check2"))
    with pytest.raises(DiscoveryError) as info:
        load_entrypoint(path)
    assert "found 2 Grader subclasses (Check (line 7), Check2 (line 11)); an entrypoint " \
           "defines at most one" in str(info.value)


def test_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = entry(tmp_path, WORKFLOW + "\ndef broken(:\n    pass\n")
    with pytest.raises(DiscoveryError) as info:
        load_entrypoint(path)
    assert str(info.value).startswith(f"{path.resolve()}:7: syntax error: ")
    assert "Fix the code at that line" in str(info.value)


def test_import_error_names_the_module_and_the_fix(tmp_path: Path) -> None:
    path = entry(tmp_path, "import not_a_real_module_xyz\n" + WORKFLOW)
    with pytest.raises(DiscoveryError) as info:
        load_entrypoint(path)
    text = str(info.value)
    assert text.startswith(f"{path.resolve()}:2: importing the entrypoint failed: No module named")
    assert "(module 'not_a_real_module_xyz')" in text and "Install the missing package" in text


def test_exception_at_import_time(tmp_path: Path) -> None:
    path = entry(tmp_path, WORKFLOW + "\nraise RuntimeError('no key')\n")
    with pytest.raises(DiscoveryError) as info:
        load_entrypoint(path)
    assert str(info.value).startswith(
        f"{path.resolve()}:7: importing the entrypoint raised RuntimeError: no key."
    )


def test_sync_run_is_rejected(tmp_path: Path) -> None:
    path = entry(tmp_path, "class Solve(AgentWorkflow):\n    def run(self, ctx):\n        return []\n")
    with pytest.raises(DiscoveryError, match=r"Solve \(line 2\)\.run must be a coroutine: declare "
                                             r"it with 'async def run\(self, ctx\)'"):
        load_entrypoint(path)


def test_ambiguous_configs(tmp_path: Path) -> None:
    path = entry(tmp_path, WORKFLOW + "a = GraderConfig(name='a')\nb = GraderConfig(name='b')\n")
    with pytest.raises(DiscoveryError, match=r"found 2 GraderConfig instances \(a, b\); osmosis "
                                             r"cannot tell which one to use. Name the one to use "
                                             r"'grader_config'"):
        load_entrypoint(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match=r"nope\.py: entrypoint file not found"):
        load_entrypoint(tmp_path / "nope.py")


def test_sibling_modules_import_and_reload_picks_up_changes(tmp_path: Path) -> None:
    (tmp_path / "helpers_for_discovery.py").write_text("ANSWER = 42\n")
    path = entry(tmp_path, "from helpers_for_discovery import ANSWER\n" + WORKFLOW)
    assert load_entrypoint(path).workflow_cls.__name__ == "Solve"
    path.write_text(HEADER + WORKFLOW.replace("Solve", "Renamed"))
    assert load_entrypoint(path).workflow_cls.__name__ == "Renamed"


def test_two_rollouts_with_the_same_package_name_each_import_their_own(tmp_path: Path) -> None:
    """osmosis-ai 0.3 workspaces name every rollout's package alike (``multiply_rollout``)."""
    for name in ("first", "second"):
        package = tmp_path / name / "same_rollout_pkg"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(
            HEADER + WORKFLOW.replace("Solve", f"Solve_{name}")
        )
        (tmp_path / name / "main.py").write_text(
            f"from same_rollout_pkg import Solve_{name}\n"
        )
    first = load_entrypoint(tmp_path / "first" / "main.py")
    second = load_entrypoint(tmp_path / "second" / "main.py")
    assert first.workflow_cls.__name__ == "Solve_first"
    assert second.workflow_cls.__name__ == "Solve_second"
