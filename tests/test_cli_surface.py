"""The command surface as a whole (issue 38): at most ten verbs, one meaning per option name, every visible leaf's
help on one screen ending with an example; old commands are hidden aliases that warn and still work."""
from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import pytest

from privsynth.cli import build_parser, main
from privsynth.commands import _types
from privsynth.commands._surface import overrides

SCREEN_LINES, COLUMNS = 50, 100

# The kind of every visible string option argparse cannot tell from its type: one name, one kind everywhere.
DECLARED = {
    # filesystem paths (files or folders): --out is always a path
    "--out": "path", "--schema": "path", "--checkpoint": "path", "--model": "path", "--pretrained": "path", "--reference-model": "path",
    "--save-model": "path", "--workdir": "path", "--trajscore-encoder": "path", "--plot": "path",
    "--report": "path", "--results-dir": "path", "--store": "path",
    # one dataset id (Minari id; the audits also take a .npz cache)
    "--sensitive": "dataset id", "--out-dataset": "dataset id", "--release": "dataset id", "--members": "dataset id",
    "--non-members": "dataset id", "--reference": "dataset id", "--data": "dataset id", "--eval-from": "dataset id",
    "--real": "dataset id", "--synthetic": "dataset id", "--name": "dataset id",
    # lists: comma-separated everywhere
    "--public": "comma list", "--agents": "comma list", "--attacks": "comma list", "--data-attacks": "comma list",
    "--obs-cols": "comma list", "--act-cols": "comma list", "--next-obs-cols": "comma list",
    "--obs-keys": "comma list", "--postprocess": "comma list", "--seeds": "count or comma list",
    "--obs-bounds": "LOW,HIGH", "--reward-bounds": "LOW,HIGH",
    # names and other text
    "--env": "short environment name", "--env-id": "gymnasium id", "--env-kwargs": "JSON", "--kind": "name",
    "--maze": "name", "--address": "host:port",
    # repeatable
    "--set": "repeatable KEY=VALUE", "--map": "repeatable KEY=VALUE", "--only": "repeatable name",
}
# old spellings (issue 38) that may stay only as hidden aliases
RETIRED = ("--n", "--num-samples", "--budget", "--target-epsilon", "--claimed-epsilon", "--epsilon-budget",
           "--max-len", "--no-progress", "--by", "--b", "--c", "--k", "--m", "--p", "--save", "--from-checkpoint")


def _kind(action: argparse.Action, flag: str) -> str:
    if action.nargs == 0:
        return "flag"
    if action.nargs in ("+", "*"):
        return "space list"
    if action.choices:
        return "choice"
    if action.type in (int, _types.positive_int):
        return "count"
    if action.type is float:
        return "number"
    if action.type is Path:
        return "path"
    if action.type in (_types.float_list, _types.int_list) or getattr(action.type, "__name__", "") == "_csv":
        return "comma list"
    if action.type is None or action.type is str:
        return DECLARED.get(flag, "UNDECLARED")
    return f"type {getattr(action.type, '__name__', action.type)}"


def _visible(sub: argparse._SubParsersAction) -> dict[str, argparse.ArgumentParser]:
    listed = {c.dest for c in sub._choices_actions}
    return {name: p for name, p in sub.choices.items() if name in listed}


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for sub in subs:
        for name, child in _visible(sub).items():
            yield from _leaves(child, path + (name,))


@pytest.fixture(scope="module")
def parser():
    return build_parser()


@pytest.fixture(autouse=True)
def _columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", str(COLUMNS))


def test_at_most_ten_visible_commands(parser):
    top = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    names = list(_visible(top))
    assert len(names) <= 10, names
    assert {"datasets", "synthesize", "audit", "privacy", "bench", "method", "demo"} <= set(names)
    help_text = parser.format_help()
    assert "SUPPRESS" not in help_text and "baseline" not in help_text and "synthesize-traj" not in help_text


def test_one_meaning_per_option_name(parser):
    kinds: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path, leaf in list(_leaves(parser)) + [((), parser)]:
        for action in leaf._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            for flag in action.option_strings:
                if flag.startswith("--"):
                    kinds[flag][_kind(action, flag)].append(" ".join(path) or "privsynth")
    undeclared = {f: k["UNDECLARED"] for f, k in kinds.items() if "UNDECLARED" in k}
    assert not undeclared, f"declare the kind of these string options in DECLARED: {undeclared}"
    clashes = {f: dict(k) for f, k in kinds.items() if len(k) > 1}
    assert not clashes, f"one option name, two meanings: {clashes}"
    assert not [f for f in RETIRED if f in kinds], "old spellings must be hidden aliases only"


def test_every_visible_leaf_fits_a_screen_and_ends_with_an_example(parser):
    leaves = list(_leaves(parser))
    assert len(leaves) >= 20
    for path, leaf in leaves:
        text = leaf.format_help().rstrip("\n")
        lines = text.splitlines()
        name = " ".join(path)
        assert len(lines) <= SCREEN_LINES, f"privsynth {name} --help is {len(lines)} lines"
        assert max(len(line) for line in lines) <= COLUMNS, f"privsynth {name} --help is wider than {COLUMNS}"
        start = max(i for i, line in enumerate(lines) if line.startswith("example: privsynth "))
        assert all(line.startswith(" ") for line in lines[start + 1:]), f"privsynth {name}: the example is not last"
        assert lines[start].startswith(f"example: privsynth {name}"), f"privsynth {name}: example of another command"


def test_hidden_alias_warns_and_still_runs(capsys):
    assert main(["kickstart", "cost", "--m", "3", "--lipschitz", "1", "--b", "0.1", "--k", "1"]) == 0
    out, err = capsys.readouterr()
    assert "epsilon" in out
    assert err.count("deprecated") == 1 and "privsynth method run kickstart" in err


def test_flat_audit_of_the_previous_release_is_routed_and_warns(tmp_path, capsys):
    assert main(["audit", "--out", str(tmp_path / "a.json")]) == 2  # nothing to attack: the old refusal
    err = capsys.readouterr().err
    assert "privsynth audit membership" in err and "nothing to attack" in err


def test_old_option_spelling_is_a_hidden_alias(parser):
    new = parser.parse_args(["model", "sample", "--model", "m.pt", "--out-dataset", "a/b-v0", "-n", "7",
                             "--epsilon", "3"])
    old = parser.parse_args(["sample", "--model", "m.pt", "--out-dataset", "a/b-v0", "--samples", "7",
                             "--budget", "3"])
    assert (new.n, new.budget) == (old.n, old.budget) == (7, 3.0)
    split = parser.parse_args(["datasets", "split", "x/y-v0", "--by", "transition"])
    assert split.by == "transition"
    eng = parser.parse_args(["privacy", "audit", "--target-epsilon", "2", "--mode", "ghost"])
    assert (eng.target_epsilon, eng.mode) == (2.0, "ghost")
    assert parser.parse_args(["audit", "engine", "--epsilon", "2", "--clipping", "ghost"]).target_epsilon == 2.0


def test_set_overrides_are_typed_and_nested():
    assert overrides(["finetune.epochs=3", "sampler.method=heun", "pipeline.tdp.rounds=5", "x=[1, 2]"]) == {
        "finetune": {"epochs": 3}, "sampler": {"method": "heun"}, "pipeline": {"tdp": {"rounds": 5}}, "x": [1, 2]}


@pytest.mark.parametrize("item", ["novalue", "=3", "a..b=1"])
def test_set_refuses_malformed_items(item):
    from privsynth.errors import InvalidData

    with pytest.raises(InvalidData, match="KEY=VALUE"):
        overrides([item])


def test_synthesize_set_refuses_an_unknown_field_before_reading_data(capsys):
    rc = main(["synthesize", "--synth", "privsyn", "--sensitive", "nowhere/missing-v0", "--out-dataset",
               "test/never-v0", "--epsilon", "1", "--set", "no_such_field=3"])
    assert rc == 2 and "no_such_field" in capsys.readouterr().err
