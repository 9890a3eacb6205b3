"""The README stays a page a newcomer scans in two minutes (issue 38): short, compact tables, the two commands, links
that resolve, and a quickstart that still matches the code it calls. Full figures live in docs/results.md."""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# links to files another branch of this session adds (issue 37's docs/transfer.md); skipped only while missing
PENDING = {"docs/transfer.md"}


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _table_cells(text: str) -> list[str]:
    cells = []
    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            # a `|` inside backticks (an option list such as a|b) is not a column separator
            masked = re.sub(r"`[^`]*`", lambda m: m.group(0).replace("|", "\0"), line.strip().strip("|"))
            cells += [c.replace("\0", "|").strip() for c in masked.split("|")]
    return cells


def _links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def test_readme_is_short():
    n = len(_text().splitlines())
    assert n <= 150, f"README.md has {n} lines (at most 150): move detail to docs/"


def test_no_table_cell_over_200_characters():
    long = [c[:60] + "..." for c in _table_cells(_text()) if len(c) > 200]
    assert not long, f"README table cells over 200 characters: {long}"


def test_mentions_the_two_commands():
    text = _text()
    assert "make demo" in text and "make test" in text


def test_relative_links_resolve():
    missing = []
    for link in _links(_text()):
        if re.match(r"^[a-z]+:", link) or link.startswith("#"):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.exists():
            if path not in PENDING:
                missing.append(link)
            continue
        if anchor and target.suffix == ".md":
            slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), re.M)}
            if anchor not in slugs:
                missing.append(link)
    assert not missing, f"README links that resolve to no file (or no heading): {missing}"


def test_results_table_figures_have_a_command():
    """Every row of the README's results table names its command or links its row in docs/results.md."""
    text = _text()
    assert "\n## Results\n" in text, "README lost its headline results table"
    section = text.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")][1:]
    assert 6 <= len(rows) <= 12
    for row in rows:
        command = row.strip().strip("|").rsplit("|", 1)[-1]
        assert "`" in command or "](docs/" in command, f"no command or link in: {row}"


def _registered(module: str) -> list[str]:
    """The names a registry module registers (its literal ``Entry("name", ...)`` table), read without importing it
    (importing the method adapters costs seconds)."""
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    return [n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Entry"
            and n.args and isinstance(n.args[0], ast.Constant)]


def test_synthesizer_and_method_tables_match_the_registries():
    synths, methods = _registered("privsynth/synth/registry.py"), _registered("privsynth/methods/registry.py")
    assert "privorl-n" in synths and "primorl" in methods
    named = set(re.findall(r"^\| `([a-z0-9-]+)` \|", _text(), re.M))
    missing = (set(synths) | set(methods)) - named
    assert not missing, f"README's tables lack the registered {sorted(missing)}"


def test_quickstart_calls_match_the_code():
    """The ten-line quickstart parses, its imports exist, and its keyword arguments are synthesize()'s."""
    block = re.search(r"```python\n(.*?)```", _text(), re.S)
    assert block, "README lost its Python quickstart"
    tree = ast.parse(block.group(1))
    assert len(block.group(1).strip().splitlines()) <= 12
    scope = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            module = __import__(node.module, fromlist=[a.name for a in node.names])
            for a in node.names:
                scope[a.asname or a.name] = getattr(module, a.name)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id == "synthesize"]
    assert calls
    params = inspect.signature(scope["synthesize"]).parameters
    for call in calls:
        unknown = [k.arg for k in call.keywords if k.arg not in params]
        assert not unknown, f"the quickstart passes {unknown} which privsynth.release.synthesize does not take"


@pytest.mark.parametrize("doc", ["docs/results.md", "docs/synthesizers.md", "docs/research/README.md"])
def test_moved_docs_link_within_the_repo(doc):
    """docs/results.md and docs/research/ hold what left the README; their relative links resolve too."""
    path = ROOT / doc
    missing = [link for link in _links(path.read_text(encoding="utf-8"))
               if not re.match(r"^[a-z]+:", link) and not link.startswith("#")
               and not (path.parent / link.partition("#")[0]).exists()
               and (path.parent / link.partition("#")[0]).resolve().relative_to(ROOT).as_posix() not in PENDING]
    assert not missing, f"{doc}: links that resolve to no file: {missing}"
