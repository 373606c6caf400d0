"""``ctx.artifacts_dir`` in an eval run: a real folder per rollout under the run."""

from __future__ import annotations

from pathlib import Path

from osmosis_ai.eval import EvalOptions, run_eval
from osmosis_ai.templates import create_from_template
from tests.core.eval._helpers import fake_server_factory


async def test_each_eval_rollout_gets_its_own_artifacts_folder(tmp_path: Path) -> None:
    create_from_template("single-call", "calc", tmp_path)
    main_py = tmp_path / "rollouts" / "calc" / "main.py"
    source = main_py.read_text()
    anchor = "        messages = list(ctx.prompt)\n"
    assert anchor in source
    main_py.write_text(source.replace(
        anchor, anchor + "        (ctx.artifacts_dir / 'seen.txt').write_text(str(ctx.artifacts_dir))\n"
    ))
    out = tmp_path / "out"
    await run_eval(
        tmp_path / "configs/eval/calc.toml", EvalOptions(limit=3, output=out),
        endpoint_factory=fake_server_factory(lambda req: "42"),
    )
    written = sorted(out.glob("artifacts/*/artifacts/seen.txt"))
    assert len(written) == 3
    assert len({p.read_text() for p in written}) == 3  # one folder per rollout
    assert all(Path(p.read_text()) == p.parent for p in written)
