"""Rollout templates: the scaffolds ``osmosis template create`` writes into a workspace.

A template is a folder ``templates/<template-name>/`` holding a ``template.toml`` manifest and the
files it lists. The manifest::

    description = "One policy call with ctx.chat, no agent framework."
    requires = ["strands"]          # extras the rollout needs (optional)
    setup = ["pip install ..."]     # commands the next steps need first (optional)
    next_steps = ["osmosis eval run configs/eval/{{name}}.toml --limit 5"]   # optional

    [files]                         # source (in the template folder) -> destination (workspace)
    "main.py" = "rollouts/{{name}}/main.py"
    "eval.toml" = "configs/eval/{{name}}.toml"

``{{name}}`` (the rollout name) and ``{{osmosis_version}}`` are substituted in destinations and in
the text of every UTF-8 file; nothing else in the files is touched.

Templates are found in the wheel (``osmosis_ai/_templates``, force-included by pyproject) or, in
an editable checkout, in the repository's ``templates/`` folder.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from osmosis_ai.errors import TemplateError

__all__ = [
    "NAME_RULE",
    "CreatedScaffold",
    "PlannedFile",
    "TemplateInfo",
    "create_from_template",
    "get_template",
    "list_templates",
    "plan_template",
    "templates_root",
    "validate_rollout_name",
]

MANIFEST = "template.toml"
NAME_RULE = (
    "a lowercase letter followed by up to 63 lowercase letters, digits, '_' or '-' "
    "(for example 'calc' or 'my_agent-2')"
)
_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_RESERVED = frozenset({"default", "con", "nul", "prn", "aux"})
_PLACEHOLDER_RE = re.compile(r"\{\{\s*(name|osmosis_version)\s*\}\}")


@dataclass(frozen=True)
class TemplateInfo:
    """One template, as described by its manifest."""

    name: str
    description: str
    path: Path
    files: dict[str, str]
    """Source path inside the template folder -> destination pattern inside the workspace."""
    requires: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    """Commands that add what the next steps need beyond the rollout's own ``pyproject.toml``
    (the embedded model runs on the trainer extra, which a rollout does not need)."""
    next_steps: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlannedFile:
    """A file the scaffold will write."""

    destination: Path
    """Absolute path inside the workspace."""
    relative: str
    """The destination relative to the workspace (POSIX form)."""
    content: bytes


@dataclass
class CreatedScaffold:
    """What :func:`create_from_template` wrote."""

    template: TemplateInfo
    name: str
    workspace: Path
    written: list[str] = field(default_factory=list)
    overwritten: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)


def templates_root() -> Path:
    """The folder holding the templates (wheel data first, then the source checkout)."""
    package_dir = Path(__file__).resolve().parent
    candidates = [package_dir / "_templates", package_dir.parents[1] / "templates"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise TemplateError(
        "cannot find the osmosis templates (looked in "
        + ", ".join(str(c) for c in candidates)
        + "). Reinstall osmosis-ai: pip install --force-reinstall osmosis-ai"
    )


def list_templates() -> list[TemplateInfo]:
    """Every template, sorted by name."""
    root = templates_root()
    return [_load(d) for d in sorted(root.iterdir()) if (d / MANIFEST).is_file()]


def get_template(name: str) -> TemplateInfo:
    """The template called ``name``; the error lists the ones that exist."""
    available = list_templates()
    for info in available:
        if info.name == name:
            return info
    names = ", ".join(t.name for t in available) or "none"
    hint = _closest(name, [t.name for t in available])
    raise TemplateError(
        f"unknown template {name!r}{hint}. Available templates: {names} "
        "(see 'osmosis template list')"
    )


def validate_rollout_name(name: str) -> str:
    """Return ``name`` if it is a valid rollout name; raise :class:`TemplateError` otherwise."""
    if not _NAME_RE.fullmatch(name):  # fullmatch: '$' alone would accept "calc\n"
        raise TemplateError(f"invalid rollout name {name!r}: a name must be {NAME_RULE}")
    if name in _RESERVED:
        raise TemplateError(f"invalid rollout name {name!r}: it is reserved; pick another name")
    return name


def plan_template(template: TemplateInfo, name: str, workspace: Path) -> list[PlannedFile]:
    """The files the scaffold would write, with placeholders substituted.

    Raises:
        TemplateError: the name is invalid, a source file is missing, or a destination would
            land outside the workspace (including through a symlinked folder).
    """
    validate_rollout_name(name)
    root = workspace.resolve()
    values = {"name": name, "osmosis_version": _version()}
    planned: list[PlannedFile] = []
    for source, dest_pattern in template.files.items():
        src = template.path / source
        if not src.is_file():
            raise TemplateError(
                f"template {template.name!r} lists {source!r} in {MANIFEST}, but "
                f"{src} does not exist"
            )
        relative = _substitute(dest_pattern, values)
        dest = (root / relative).resolve()
        if not dest.is_relative_to(root) or dest == root:
            raise TemplateError(
                f"template {template.name!r} would write {relative!r}, which is outside the "
                f"workspace {root}"
            )
        raw = src.read_bytes()
        try:
            content = _substitute(raw.decode("utf-8"), values).encode("utf-8")
        except UnicodeDecodeError:
            content = raw
        planned.append(PlannedFile(dest, dest.relative_to(root).as_posix(), content))
    return planned


def create_from_template(
    template_name: str, name: str, workspace: str | Path = ".", *, force: bool = False
) -> CreatedScaffold:
    """Write the scaffold of ``template_name`` for rollout ``name`` into ``workspace``.

    Nothing is written unless every file can be: existing files are an error that lists them,
    unless ``force`` is set.
    """
    validate_rollout_name(name)
    template = get_template(template_name)
    ws = Path(workspace).expanduser()
    if ws.exists() and not ws.is_dir():
        raise TemplateError(f"workspace {ws} is a file, not a folder")
    planned = plan_template(template, name, ws)
    existing = [p.relative for p in planned if p.destination.exists()]
    if existing and not force:
        raise TemplateError(
            f"refusing to overwrite {len(existing)} existing file(s) in {ws.resolve()}: "
            + ", ".join(existing)
            + ". Pick another name, or pass --force to overwrite them"
        )
    result = CreatedScaffold(template=template, name=name, workspace=ws.resolve())
    for item in planned:
        if item.destination.is_dir():
            raise TemplateError(f"cannot write {item.relative}: a folder of that name exists")
        (result.overwritten if item.destination.exists() else result.written).append(item.relative)
        try:
            item.destination.parent.mkdir(parents=True, exist_ok=True)
            item.destination.write_bytes(item.content)
        except OSError as exc:
            raise TemplateError(f"cannot write {item.destination}: {exc}") from exc
    values = {"name": name, "osmosis_version": _version()}
    result.next_steps = [_substitute(step, values) for step in template.next_steps]
    return result


def _load(folder: Path) -> TemplateInfo:
    manifest = folder / MANIFEST
    try:
        data = tomllib.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TemplateError(f"{manifest}: cannot read the template manifest: {exc}") from exc
    files = data.get("files")
    if (
        not isinstance(files, dict)
        or not files
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
    ):
        raise TemplateError(f"{manifest}: [files] must map source names to destination paths")
    unknown = set(data) - {"description", "requires", "setup", "next_steps", "files"}
    if unknown:
        raise TemplateError(f"{manifest}: unknown key(s) {sorted(unknown)}")
    return TemplateInfo(
        name=folder.name,
        description=str(data.get("description", "")),
        path=folder,
        files=dict(files),
        requires=tuple(str(x) for x in data.get("requires", [])),
        setup=tuple(str(x) for x in data.get("setup", [])),
        next_steps=tuple(str(x) for x in data.get("next_steps", [])),
    )


def _substitute(text: str, values: dict[str, str]) -> str:
    return _PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], text)


def _version() -> str:
    from osmosis_ai import __version__

    return __version__


def _closest(name: str, options: list[str]) -> str:
    import difflib

    match = difflib.get_close_matches(name, options, n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""
