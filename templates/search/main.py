"""The {{name}} rollout: an OpenAI Agents SDK agent that answers questions from a knowledge base.

The knowledge base is a SQLite database with an FTS5 full-text index
(``data/{{name}}_kb.db``, built from ``data/{{name}}_kb.jsonl`` the first time it is needed;
``rollouts/{{name}}/make_data.py`` writes both). The agent has two tools: ``search(query)``
returns the top results (id, title, one-line summary) and ``read(doc_id)`` returns a document.
A question names one document and one of its fields ("What is the price of the Aurora X200
Pro?"); near-duplicate documents ("Aurora X200", "Aurora X200 Mini") often rank above it, so the
agent has to read the result whose title is the one asked about.

``osmosis eval run configs/eval/{{name}}.toml`` evaluates it; ``osmosis train submit
configs/training/{{name}}.toml`` trains on it. osmosis finds the one ``AgentWorkflow`` and the
one ``Grader`` defined in this file.

Coming from the plain Agents SDK? Two lines change: ``Agent`` becomes ``OsmosisAgent`` and the
model becomes ``OsmosisRolloutModel()`` (osmosis resolves it to the policy being evaluated or
trained; rollout code never names a model).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

from agents import MaxTurnsExceeded, ModelBehaviorError, Runner, SQLiteSession, function_tool

from osmosis_ai.grading import final_text
from osmosis_ai.rollout import AgentWorkflow, AgentWorkflowContext, Grader, GraderContext
from osmosis_integrations import OsmosisAgent, OsmosisRolloutModel

SYSTEM_PROMPT = (
    "Answer the question from the knowledge base. Call search with the name of the thing "
    "asked about, then call read with the id of the result whose title is exactly that name. "
    "Then reply with only the value of the field asked for, for example: 555-0134"
)
TOP_K = 3
"""Results per search: few and short, so the prompt stays small for a small model."""
MAX_TURNS = 5
"""Model calls per question (a question needs three: search, read, answer); a run that keeps
calling tools is stopped here and graded as it stands."""

WORKSPACE = Path(__file__).resolve().parents[2]
KB_JSONL = WORKSPACE / "data" / "{{name}}_kb.jsonl"
KB_PATH = Path(os.environ.get("KB_PATH", WORKSPACE / "data" / "{{name}}_kb.db"))
"""The database (``KB_PATH`` in the environment points elsewhere)."""


# --- the knowledge base ------------------------------------------------------------------------

SCHEMA = (
    "CREATE VIRTUAL TABLE docs USING fts5(id UNINDEXED, title, summary, body, "
    "popularity UNINDEXED, tokenize = 'unicode61')"
)
RANKING = "bm25(docs, 0.0, 4.0, 1.0, 0.5) - 8.0 * popularity"
"""Relevance (title matches count most) plus popularity, as a shop's search ranks: a popular
near-duplicate can come before the document the question is about."""


def build_kb(docs: list[dict[str, Any]], path: Path) -> None:
    """Write ``docs`` (id, title, summary, body, popularity) to a new database at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.unlink(missing_ok=True)
    with sqlite3.connect(tmp) as db:
        db.execute(SCHEMA)
        db.executemany(
            "INSERT INTO docs VALUES (?, ?, ?, ?, ?)",
            [(d["id"], d["title"], d["summary"], d["body"], d["popularity"]) for d in docs],
        )
    os.replace(tmp, path)  # atomic: concurrent rollouts never see half a database


_lock = threading.Lock()


def connect() -> sqlite3.Connection:
    """A read-only connection to the database, built from the JSONL file if it is missing."""
    with _lock:
        if not KB_PATH.is_file():
            if not KB_JSONL.is_file():
                raise FileNotFoundError(
                    f"no knowledge base at {KB_PATH} nor {KB_JSONL}: run "
                    "python rollouts/{{name}}/make_data.py"
                )
            lines = KB_JSONL.read_text(encoding="utf-8").splitlines()
            build_kb([json.loads(line) for line in lines if line.strip()], KB_PATH)
    return sqlite3.connect(f"file:{KB_PATH}?mode=ro", uri=True, check_same_thread=False)


def fts_query(text: str) -> str:
    """The words of ``text`` as an FTS5 query matching any of them (quoted: no syntax errors)."""
    return " OR ".join(f'"{w}"' for w in re.findall(r"\w+", text.lower()))


def search_kb(db: sqlite3.Connection, query: str, k: int = TOP_K) -> list[tuple[str, str, str]]:
    """(id, title, summary) of the best ``k`` documents for ``query``."""
    match = fts_query(query)
    if not match:
        return []
    rows = db.execute(
        f"SELECT id, title, summary FROM docs WHERE docs MATCH ? ORDER BY {RANKING} LIMIT ?",
        (match, k),
    ).fetchall()
    return [(str(i), str(t), str(s)) for i, t, s in rows]


def read_kb(db: sqlite3.Connection, doc_id: str) -> tuple[str, str] | None:
    """(title, body) of document ``doc_id``, or None."""
    row = db.execute(
        "SELECT title, body FROM docs WHERE id = ?", (doc_id.strip().upper(),)
    ).fetchone()
    return None if row is None else (str(row[0]), str(row[1]))


_db: sqlite3.Connection | None = None


def _kb() -> sqlite3.Connection:
    global _db
    if _db is None:
        _db = connect()
    return _db


def search_text(query: str) -> str:
    """What ``search`` answers: one line per result, "Lisbon office (id D104): Office in
    Lisbon." The id comes right after its title: a model picking the result by title finds
    the id next to it (with the id first, SmolLM2's warm start read the right document no more
    often than chance; BENCHMARKS.md, "learning")."""
    found = search_kb(_kb(), query)
    if not found:
        return "No results."
    return "\n".join(f"{title} (id {doc_id}): {summary}" for doc_id, title, summary in found)


def read_text(doc_id: str) -> str:
    """What ``read`` answers: the title, then one "Field: value" line per field."""
    doc = read_kb(_kb(), doc_id)
    if doc is None:
        return f"No document {doc_id}."
    title, body = doc
    return f"{title}\n{body}"


@function_tool
def search(query: str) -> str:
    """Search the knowledge base.

    Args:
        query: words to look for, e.g. the name of an office, product or policy.
    """
    return search_text(query)


@function_tool
def read(doc_id: str) -> str:
    """Read one document of the knowledge base.

    Args:
        doc_id: the document's id from a search result, e.g. D104.
    """
    return read_text(doc_id)


TOOLS = [search, read]


# --- the rollout ---------------------------------------------------------------------------------


class SearchWorkflow(AgentWorkflow):
    """One agent conversation per rollout, held in a session; OsmosisAgent records it as the
    sample. A row may go on over several turns: its ``follow_ups`` column lists the next
    questions, asked one after the other in the same session."""

    async def run(self, ctx: AgentWorkflowContext) -> None:
        system = next((m["content"] for m in ctx.prompt if m.get("role") == "system"), None)
        question = next(m["content"] for m in reversed(ctx.prompt) if m.get("role") == "user")
        agent = OsmosisAgent(
            name="search",
            instructions=system or SYSTEM_PROMPT,
            tools=TOOLS,
            model=OsmosisRolloutModel(),
        )
        session = SQLiteSession("conversation")  # in memory, one per rollout
        for turn in [question, *_follow_ups(ctx.metadata)]:
            try:
                await Runner.run(agent, turn, session=session, max_turns=MAX_TURNS)
            except (MaxTurnsExceeded, ModelBehaviorError):
                # The agent kept calling tools, or called one that does not exist ("readline"):
                # its conversation so far is still the sample, graded as it stands (no final
                # answer: no credit). Counting it as a failure would hide from RL exactly the
                # behaviour it should train away (2 of 24 rollouts of the first RL step).
                return


def _follow_ups(metadata: dict[str, Any]) -> list[str]:
    """The row's next questions (``follow_ups``: a list of strings, or absent)."""
    value = metadata.get("follow_ups") or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("the dataset's follow_ups column must be a list of strings")
    return list(value)


# --- grading ---------------------------------------------------------------------------------------


def normalise(text: str) -> str:
    """Lower case, letters and digits only: "$1,249." and "1249" are the same answer."""
    return re.sub(r"[^0-9a-z]", "", text.lower())


def read_ids(messages: list[dict[str, Any]]) -> list[str]:
    """The ids the agent passed to ``read``, in order."""
    ids = []
    for m in messages:
        for call in m.get("tool_calls") or []:
            function = call.get("function") or {}
            if function.get("name") != "read":
                continue
            try:
                args = json.loads(function.get("arguments") or "{}")
            except json.JSONDecodeError:
                continue
            if isinstance(args, dict):
                ids.append(str(args.get("doc_id", "")).strip().upper())
    return ids


class SearchGrader(Grader):
    """1.0 for the exact answer (compared after ``normalise``) when the agent read the right
    document (the row's ``doc_id``), else 0: an answer with no read of it scores 0 however
    right it is, and so does a read with no answer. (A version that paid 0.2 for the read
    alone taught agents to read the right document and then keep calling tools: BENCHMARKS.md,
    "learning".)"""

    async def grade(self, ctx: GraderContext[Any]) -> None:
        if ctx.label is None:
            raise ValueError("this grader needs a ground_truth column in the dataset")
        doc_id = str(ctx.metadata.get("doc_id") or "").upper()
        if not doc_id:
            raise ValueError("this grader needs a doc_id column in the dataset")
        for sample_id, sample in ctx.samples.items():
            read = doc_id in read_ids(sample.messages)
            right = normalise(final_text(sample.messages)) == normalise(str(ctx.label))
            ctx.set_sample_reward(sample_id, 1.0 if read and right else 0.0)
