"""Make the {{name}} rollout's knowledge base and data: documents, demonstrations, RL and held-out rows.

    python rollouts/{{name}}/make_data.py   # rewrites data/{{name}}_kb.jsonl, data/{{name}}_kb.db,
                                            # data/{{name}}_demos.jsonl, data/{{name}}.jsonl,
                                            # data/{{name}}_heldout.jsonl, data/{{name}}_test.jsonl

Deterministic (a fixed seed), no model involved: documents are generated, and every row's
answer is a field of its document, so the files are right by construction.

- ``{{name}}_kb.jsonl`` / ``{{name}}_kb.db``: a few hundred documents (offices, products,
  policies) in families of near-duplicates: "Lisbon office", "Lisbon warehouse", "Lisbon
  store"; "Aurora X200", "Aurora X200 Pro", "Aurora X200 Mini"; "Travel policy (EU)" and its
  other regions. Each has three fields a question can ask for, with different values in each
  near-duplicate. The ``.db`` is SQLite with an FTS5 index (``main.py`` builds it from the JSONL
  file when it is missing).
- ``{{name}}_demos.jsonl``: the warm start's demonstrations ([warm_start] in the training
  config): search for the name asked about, read the result with that title, answer the field's
  value; exactly the conversation the agent has (``main.py``'s tools run on the real database,
  messages and tool specs converted by the Agents SDK's own converter), so the warm start renders
  the same prompt as RL. In half of them the right document is the first result
  (``DEMO_FIRST``); in the others it is shown below a near-duplicate.
- ``{{name}}.jsonl`` (RL): questions about other families than the demonstrations' (the warm
  start cannot recall their ids), where the right document is the first, second and third
  result equally often (``TRAIN_FIRST``, searching the name asked about): no position pays more
  than another; reading the result whose title matches does.
- ``{{name}}_heldout.jsonl``: questions about families never used in training (no demonstration
  or RL row reads any of their documents), the right document first in half of them. It is a
  validation file: ``TRAIN_FIRST`` was chosen by looking at it.
- ``{{name}}_test.jsonl``: the same kind of questions about yet other families, which no
  setting was chosen on: the honest measure of what training transferred.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SEED = 40
DEMOS = 64
TRAIN_ROWS = 64
HELDOUT_ROWS = 32
HELDOUT_SHARE = 0.2
"""Share of each kind's families kept for the held-out (validation) questions only."""
TEST_SHARE = 0.15
"""Share of each kind's families kept for the test questions only."""
DEMO_FIRST = 0.5
"""Share of demonstrations whose right document is the first search result (the others show
reading the result whose title matches, below a near-duplicate)."""
TRAIN_FIRST = 1 / 3
"""Share of RL rows whose right document is the first search result; the others are split
evenly between the second and the third (``_questions``' ``even``). With every position equally
often right, no position pays more than another, and only reading the title asked about beats
a third. (With a half first, RL settled on reading the first result; with a quarter first and
half second, on reading the second: 18 of 30 first reads of a trained agent on the validation
file.)"""
HELDOUT_FIRST = 0.5
"""Share of held-out and test rows whose right document is the first search result."""

CITIES = [
    "Lisbon",
    "Porto",
    "Madrid",
    "Seville",
    "Lyon",
    "Nantes",
    "Turin",
    "Genoa",
    "Munich",
    "Bremen",
    "Ghent",
    "Utrecht",
    "Krakow",
    "Brno",
    "Graz",
    "Basel",
    "Bergen",
    "Aarhus",
    "Tampere",
    "Cork",
    "Leeds",
    "Bristol",
    "Oslo",
    "Riga",
    "Vilnius",
    "Tallinn",
    "Sofia",
    "Zagreb",
    "Bilbao",
    "Malmo",
]
SITES = ["office", "warehouse", "store"]
LINES = [
    "Aurora",
    "Borealis",
    "Cobalt",
    "Delta",
    "Ember",
    "Falcon",
    "Glacier",
    "Harbor",
    "Ion",
    "Juniper",
    "Kestrel",
    "Lumen",
    "Meridian",
    "Nimbus",
    "Orbit",
    "Pioneer",
    "Quartz",
    "Raven",
    "Summit",
    "Tundra",
    "Umbra",
    "Vertex",
    "Willow",
    "Xenon",
    "Yarrow",
    "Zephyr",
    "Atlas",
    "Beacon",
    "Cinder",
    "Drift",
]
VARIANTS = ["", " Pro", " Mini"]
TOPICS = [
    "Travel",
    "Remote work",
    "Parental leave",
    "Equipment loan",
    "Training budget",
    "Overtime",
    "Expense",
    "Relocation",
    "Sick leave",
    "Gifts",
    "Mobile phone",
    "Car",
    "Hardware refresh",
    "Conference",
    "Referral bonus",
    "Volunteering",
    "Sabbatical",
    "Home office",
    "Meal",
    "Software purchase",
]
REGIONS = ["EU", "US", "UK", "APAC"]
FIRST = [
    "Ana",
    "Ben",
    "Clara",
    "David",
    "Eva",
    "Farid",
    "Grace",
    "Hugo",
    "Ines",
    "Jonas",
    "Karin",
    "Luca",
    "Maya",
    "Nils",
    "Olga",
    "Pablo",
    "Rita",
    "Sam",
    "Tara",
    "Viktor",
]
LAST = [
    "Silva",
    "Berg",
    "Novak",
    "Costa",
    "Meyer",
    "Rossi",
    "Dubois",
    "Kowalski",
    "Jensen",
    "Horvat",
    "Petrov",
    "Lind",
    "Moreau",
    "Santos",
    "Keller",
    "Varga",
]
APPROVERS = [
    "line manager",
    "team lead",
    "finance director",
    "HR partner",
    "department head",
    "CFO",
    "office manager",
    "legal counsel",
]

Doc = dict[str, Any]


def _main_module() -> Any:
    """The rollout's ``main.py`` (its tools, database and system prompt), imported by path."""
    spec = importlib.util.spec_from_file_location("_rollout_main", HERE / "main.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot import {HERE / 'main.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_rollout_main", module)
    spec.loader.exec_module(module)
    return module


def _fields(rng: random.Random, kind: str) -> dict[str, str]:
    if kind == "site":
        start = rng.randint(7, 10)
        return {
            "phone number": f"555-{rng.randint(1000, 9999)}",
            "manager": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
            "opening hours": f"{start}:00-{start + rng.randint(7, 10)}:00",
        }
    if kind == "product":
        years = rng.randint(1, 5)
        return {
            "price": f"${rng.randint(19, 999)}",
            "warranty": f"{years} year{'s' if years > 1 else ''}",
            "weight": f"{rng.randint(1, 9)}.{rng.randint(0, 9)} kg",
        }
    return {
        "approver": rng.choice(APPROVERS),
        "spending limit": f"${rng.randint(1, 60) * 50}",
        "notice period": f"{rng.choice([3, 5, 7, 10, 14, 21, 30])} days",
    }


def _families(rng: random.Random) -> list[list[Doc]]:
    """Every family of near-duplicate documents (ids not yet assigned)."""
    families: list[list[Doc]] = []
    for city in CITIES:
        families.append(
            [
                {
                    "kind": "site",
                    "title": f"{city} {site}",
                    "summary": f"{site.capitalize()} in {city}.",
                }
                for site in SITES
            ]
        )
    for line in LINES:
        model = f"{line} {rng.choice('XZRT')}{rng.randint(1, 9)}00"
        families.append(
            [
                {
                    "kind": "product",
                    "title": f"{model}{variant}",
                    "summary": f"{variant.strip() or 'Standard'} model.",
                }
                for variant in VARIANTS
            ]
        )
    for topic in TOPICS:
        families.append(
            [
                {
                    "kind": "policy",
                    "title": f"{topic} policy ({region})",
                    "summary": f"For staff in {region}.",
                }
                for region in REGIONS
            ]
        )
    for family in families:
        for doc in family:
            doc["fields"] = _fields(rng, doc["kind"])
            doc["body"] = "\n".join(f"{k.capitalize()}: {v}" for k, v in doc["fields"].items())
            doc["popularity"] = round(rng.random(), 3)
    return families


def knowledge_base(rng: random.Random) -> tuple[list[Doc], dict[int, str]]:
    """The documents (with ids) and each family's use: ``"demos"``, ``"train"``, ``"heldout"``
    or ``"test"``. Each kind's families are split between the four, so no RL row asks about a
    family a demonstration read: the warm start cannot have memorised its ids, and RL gains only
    by reading the search results."""
    families = _families(rng)
    ids = rng.sample(range(100, 1000), sum(len(f) for f in families))
    docs = [doc for family in families for doc in family]
    for doc, number in zip(docs, ids, strict=True):
        doc["id"] = f"D{number}"
    for index, family in enumerate(families):
        for doc in family:
            doc["family"] = index
    roles: dict[int, str] = {}
    for kind in ("site", "product", "policy"):
        of_kind = [i for i, f in enumerate(families) if f[0]["kind"] == kind]
        rng.shuffle(of_kind)
        n_held = round(len(of_kind) * HELDOUT_SHARE)
        n_test = round(len(of_kind) * TEST_SHARE)
        rest = of_kind[n_held + n_test :]
        roles.update(dict.fromkeys(of_kind[:n_held], "heldout"))
        roles.update(dict.fromkeys(of_kind[n_held : n_held + n_test], "test"))
        roles.update(dict.fromkeys(rest[: len(rest) // 2], "demos"))
        roles.update(dict.fromkeys(rest[len(rest) // 2 :], "train"))
    return docs, roles


def question(doc: Doc, field: str) -> str:
    return f"What is the {field} of the {doc['title']}?"


def _call(call_id: str, name: str, args: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(args),
    }


def demonstration(main: Any, db: Any, doc: Doc, field: str, index: int) -> dict[str, Any]:
    """One conversation, as the Agents SDK sends it to the policy: search for the title, read
    the result with that title, answer the field's value. Tool outputs come from the tools
    functions (on the real database; a tool returning a string puts it in the conversation as is); the messages and tool specs from the SDK's converter."""
    from agents.models.chatcmpl_converter import Converter

    found = main.search_kb(db, doc["title"])
    if doc["id"] not in [i for i, _, _ in found]:
        raise ValueError(f"{doc['title']!r} is not among its own search results")
    search_id, read_id = f"call_{index:04d}_s", f"call_{index:04d}_r"
    items: list[Any] = [
        {"role": "user", "content": question(doc, field)},
        _call(search_id, "search", {"query": doc["title"]}),
        {
            "type": "function_call_output",
            "call_id": search_id,
            "output": main.search_text(doc["title"]),
        },
        _call(read_id, "read", {"doc_id": doc["id"]}),
        {"type": "function_call_output", "call_id": read_id, "output": main.read_text(doc["id"])},
        {"role": "assistant", "content": doc["fields"][field]},
    ]
    messages = [
        {"role": "system", "content": main.SYSTEM_PROMPT},
        *map(dict, Converter.items_to_messages(items)),
    ]
    tools = [Converter.tool_to_openai(t) for t in main.TOOLS]
    return {"messages": messages, "tools": tools, "source": f"make_data:{index}"}


def _rank(main: Any, db: Any, doc: Doc) -> int:
    """Where ``doc`` comes in a search for its own title (0 = first; TOP_K = not shown)."""
    ids = [i for i, _, _ in main.search_kb(db, doc["title"])]
    return ids.index(doc["id"]) if doc["id"] in ids else main.TOP_K


def _questions(
    rng: random.Random,
    main: Any,
    db: Any,
    docs: list[Doc],
    count: int,
    first_share: float,
    even: bool = False,
) -> list[tuple[Doc, str]]:
    """``count`` distinct (document, field) questions, ``first_share`` of them about a document
    that is the first result for its own title, the others about one shown below another (as
    they come, or with ``even`` in equal numbers per lower position)."""
    pool = [(d, f) for d in docs for f in d["fields"] if _rank(main, db, d) < main.TOP_K]
    rng.shuffle(pool)
    by_rank = [[q for q in pool if _rank(main, db, q[0]) == r] for r in range(main.TOP_K)]
    n_first = round(count * first_share)
    lower = [q for q in pool if _rank(main, db, q[0]) > 0]
    if even:
        ranks = len(by_rank) - 1
        shares = [(count - n_first + ranks - 1 - i) // ranks for i in range(ranks)]
        lower = [q for rank, n in zip(by_rank[1:], shares, strict=True) for q in rank[:n]]
    if len(by_rank[0]) < n_first or len(lower) < count - n_first:
        raise SystemExit(
            f"not enough questions: {len(by_rank[0])} first / {len(lower)} lower for {count}"
        )
    chosen = by_rank[0][:n_first] + lower[: count - n_first]
    rng.shuffle(chosen)
    return chosen


def generate(seed: int = SEED, db_path: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """The rows of every file: ``kb``, ``demos``, ``train``, ``heldout`` and ``test``."""
    import sqlite3
    import tempfile

    main = _main_module()
    rng = random.Random(seed)
    docs, roles = knowledge_base(rng)
    kb = [{k: d[k] for k in ("id", "title", "summary", "body", "popularity")} for d in docs]
    with tempfile.TemporaryDirectory() as tmp:
        path = db_path or Path(tmp) / "kb.db"
        main.build_kb(kb, path)
        db = sqlite3.connect(path)
        main._db = db  # the tools read this database while the demonstrations are made
        try:

            def of(role: str) -> list[Doc]:
                return [d for d in docs if roles[d["family"]] == role]

            demo_qs = _by_id(_questions(rng, main, db, of("demos"), DEMOS, DEMO_FIRST))
            train_qs = _by_id(
                _questions(rng, main, db, of("train"), TRAIN_ROWS, TRAIN_FIRST, even=True)
            )
            demos = [demonstration(main, db, d, f, i) for i, (d, f) in enumerate(demo_qs)]
            held_qs = _questions(rng, main, db, of("heldout"), HELDOUT_ROWS, HELDOUT_FIRST)
            test_qs = _questions(rng, main, db, of("test"), HELDOUT_ROWS, HELDOUT_FIRST)
        finally:
            main._db = None
            db.close()
    return {
        "kb": kb,
        "demos": demos,
        "train": [_row(d, f) for d, f in train_qs],
        "heldout": [_row(d, f) for d, f in held_qs],
        "test": [_row(d, f) for d, f in test_qs],
    }


def _by_id(questions: list[tuple[Doc, str]]) -> list[tuple[Doc, str]]:
    """In a fixed order that mixes first-result and lower questions."""
    return sorted(questions, key=lambda q: q[0]["id"] + q[1])


def _row(doc: Doc, field: str) -> dict[str, Any]:
    return {
        "user_prompt": question(doc, field),
        "ground_truth": doc["fields"][field],
        "doc_id": doc["id"],
    }


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE.parent.parent / "data",
        help="folder for the files (default: the workspace's data/)",
    )
    parser.add_argument("--name", default="{{name}}", help="file name prefix")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    db_path = args.out / f"{args.name}_kb.db"
    rows = generate(args.seed, db_path)
    print(f"{db_path}: {len(rows['kb'])} documents (SQLite, FTS5)")
    files = (
        ("kb", "_kb"),
        ("demos", "_demos"),
        ("train", ""),
        ("heldout", "_heldout"),
        ("test", "_test"),
    )
    for key, suffix in files:
        path = args.out / f"{args.name}{suffix}.jsonl"
        write_jsonl(path, rows[key])
        print(f"{path}: {len(rows[key])} rows")


if __name__ == "__main__":
    main()
