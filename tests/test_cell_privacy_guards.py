"""Privacy guards of the benchmark's pretrain and synthesize cells (privsynth/evaluation/cell_guards.py).

* public data derived (``split_of``) from the same data as the sensitive set is refused, from the specs alone;
* the ε = 0 "public model alone" row (``finetune: none``) refuses a fine-tuned upstream model;
* a staged synthesize cell refuses to write anything whose ledger's total ε exceeds the cell's ε, and reports that
  total as ``dp_epsilon``.
"""
from __future__ import annotations

import json
import textwrap
from types import SimpleNamespace

import pytest

from conftest import make_toy_dataset
from privsynth.errors import InvalidData, PrivacyError
from privsynth.evaluation.cell_guards import check_public_only_model, check_public_specs, data_origin
from privsynth.evaluation.cells import _public

SPECS = {
    "base": {"source": "pointmaze", "maze": "umaze", "seed": 2},
    "sens": {"split_of": "base", "fraction": 0.5, "part": "first"},  # not marked sensitive: nothing forces it
    "sibling": {"split_of": "base", "fraction": 0.5, "part": "second"},
    "grandchild": {"split_of": "sibling", "fraction": 0.5},
    "twin": {"source": "pointmaze", "maze": "umaze", "seed": 2, "sensitive": False},  # base's records, another name
    "pub": {"source": "pointmaze", "maze": "open", "seed": 1},
    "pub_part": {"split_of": "pub", "fraction": 0.5},
}


def test_data_origin_follows_the_split_chain():
    assert data_origin("grandchild", SPECS) == ("base", {"source": "pointmaze", "maze": "umaze", "seed": 2})
    assert data_origin("pub", SPECS)[0] == "pub"
    with pytest.raises(InvalidData, match="cycle"):
        data_origin("a", {"a": {"split_of": "b"}, "b": {"split_of": "a"}})
    with pytest.raises(InvalidData, match="not declared"):
        data_origin("nope", SPECS)


@pytest.mark.parametrize("public", ["sibling", "grandchild", "base", "twin"])
def test_public_data_sharing_a_root_with_the_sensitive_set_is_refused_from_specs(public):
    """F4: a public set split from the sensitive set's parent (or that parent, or a dataset with its spec) would
    pre-train without DP on sensitive records; refused before any dataset, public or sensitive, is read."""
    read = []
    ctx = SimpleNamespace(datasets=SPECS, dataset=lambda name: read.append(name))
    with pytest.raises(PrivacyError, match="must not contain sensitive records"):
        _public({"data": {"public": ["pub", public], "sensitive": "sens"}}, ctx)
    assert read == []
    with pytest.raises(PrivacyError, match=f"'{public}'"):
        check_public_specs([public], "sens", SPECS)
    check_public_specs(["pub", "pub_part"], "sens", SPECS)  # unrelated roots pass


def test_public_data_with_another_root_passes_and_the_old_checks_still_hold():
    data = {"pub": make_toy_dataset(seed=1, name="pub"), "pub_part": make_toy_dataset(seed=3, name="pub_part"),
            "sens": make_toy_dataset(seed=2, name="sens").mark_sensitive(True)}
    ctx = SimpleNamespace(datasets=SPECS, dataset=data.__getitem__)
    assert len(_public({"data": {"public": ["pub", "pub_part"], "sensitive": "sens"}}, ctx)) == 2
    with pytest.raises(PrivacyError, match="both public and sensitive"):
        _public({"data": {"public": ["pub", "sens"], "sensitive": "sens"}}, ctx)
    with pytest.raises(PrivacyError, match="marked sensitive"):
        _public({"data": {"public": "sens"}}, ctx)


def test_public_only_row_refuses_anything_but_a_never_tuned_pretrain_model():
    """F1: finetune: none (the ε = 0 row) only samples a pretrain cell's model with no fine-tune and no ledger."""
    pre = SimpleNamespace(history=[{"phase": "pretrain"}], ledger=None, nonprivate_finetunes=0)
    check_public_only_model(pre, SimpleNamespace(cell_id="c", upstream=SimpleNamespace(kind="pretrain")))
    with pytest.raises(InvalidData, match="must be a pretrain cell"):
        check_public_only_model(pre, SimpleNamespace(cell_id="c", upstream=SimpleNamespace(kind="synthesize")))
    tuned = SimpleNamespace(history=[{"phase": "pretrain"}, {"phase": "finetune", "private": False}], ledger=None)
    with pytest.raises(InvalidData, match="a fine-tune"):
        check_public_only_model(tuned, SimpleNamespace(cell_id="c", upstream=SimpleNamespace(kind="pretrain")))
    ledgered = SimpleNamespace(history=[{"phase": "pretrain"}], ledger=object())
    with pytest.raises(InvalidData, match="privacy ledger"):
        check_public_only_model(ledgered, SimpleNamespace(cell_id="c", upstream=SimpleNamespace(kind="pretrain")))


# ------------------------------------------------------------------------------------------------ a tiny suite
SUITE = """
name: guards
workers: 1
datasets:
  public: {source: pointmaze, maze: open, steps: 600, seed: 1, dense: true, ref_episodes: 1}
  sens:   {source: pointmaze, maze: umaze, steps: 600, seed: 2, dense: true, ref_episodes: 1, sensitive: true}
  sens_sibling: {split_of: sens_parent, fraction: 0.5, part: second}
  sens_parent:  {source: pointmaze, maze: umaze, steps: 600, seed: 3, dense: true, ref_episodes: 1}
  sens_split:   {split_of: sens_parent, fraction: 0.5, part: first}
defaults:
  synthesizer: privorl-n
  data: {public: [public], sensitive: sens}
  delta: 1.0e-4
  config: {preset: cpu, denoiser: {width: 32, depth: 1}, pretrain: {epochs: 1, batch_size: 64},
           pretrain_curiosity: false, sampler: {steps: 4}, finetune: {epochs: 1, batch_size: 64}}
stages:
  - {name: pretrain, kind: pretrain, grid: {seed: [0]}}
  - {name: pretrain_leaky, kind: pretrain, grid: {seed: [0]}, params: {data: {public: [public, sens_sibling]}}}
  - {name: nodp, kind: synthesize, needs: {stage: pretrain}, grid: {epsilon: [null]}, params: {num_samples: 0}}
  - {name: public_only, kind: synthesize, needs: {stage: pretrain}, grid: {epsilon: [0.0]},
     params: {finetune: none, num_samples: 20}}
  - {name: public_only_after_nodp, kind: synthesize, needs: {stage: nodp}, grid: {epsilon: [0.0]},
     params: {finetune: none, num_samples: 20}}
  - {name: dp, kind: synthesize, needs: {stage: pretrain}, grid: {epsilon: [5.0]}, params: {num_samples: 20}}
  - {name: public_only_after_dp, kind: synthesize, needs: {stage: dp}, grid: {epsilon: [0.0]},
     params: {finetune: none, num_samples: 20}}
  - {name: over, kind: synthesize, needs: {stage: pretrain}, grid: {epsilon: [1.0]},
     params: {delta: 1.0e-3, num_samples: 20, config: {dp: {noise_multiplier: 0.3}}}}
  - {name: chain_over, kind: synthesize, needs: {stage: dp}, grid: {epsilon: [5.0]}, params: {num_samples: 20}}
  - {name: chain, kind: synthesize, needs: {stage: dp}, grid: {epsilon: [30.0]},
     params: {num_samples: 20, config: {dp: {noise_multiplier: 2.0}}}}
  - {name: leaky, kind: synthesize, needs: {stage: pretrain_leaky}, grid: {epsilon: [5.0]},
     params: {num_samples: 20, data: {sensitive: sens_split}}}
"""


@pytest.fixture(scope="module")
def guarded_run(tmp_path_factory):
    from privsynth.evaluation.runner import collect_records, load_suite, run_suite

    tmp = tmp_path_factory.mktemp("guards")
    path = tmp / "guards.yaml"
    path.write_text(textwrap.dedent(SUITE))
    suite = load_suite(path, results_dir=tmp / "results")
    res = run_suite(suite, progress=False, log=lambda _: None)
    records = {r["stage"]: r for r in collect_records(suite)}
    failed = {f.id: f.error for f in res.failures}
    return suite, records, failed


def _failure(guarded_run, stage):
    """The one-line error of the stage's (single) cell, which must have failed and left no sample or ledger."""
    suite, records, failed = guarded_run
    assert stage not in records, f"{stage} finished: {records.get(stage)}"
    errors = [e for cid, e in failed.items()
              if json.loads(next(suite.out.rglob(f"{cid}.failed.json")).read_text())["stage"] == stage]
    assert len(errors) == 1, failed
    cid = next(cid for cid, e in failed.items() if e == errors[0])
    art = suite.out / "artifacts" / cid
    assert not (art / "synthetic.npz").exists() and not (art / "ledger.json").exists()
    return errors[0]


def _rdp_epsilon(events, delta):
    """ε at δ of the ledger's events under dp_accounting's RDP accountant, straight from the recorded σ, q, T of each
    DP-SGD event and the scale of each Laplace unit count (issue 36: N is counted with DP)."""
    import dp_accounting as dpa
    from dp_accounting.rdp import rdp_privacy_accountant

    acc = rdp_privacy_accountant.RdpAccountant()
    for ev in events:
        p = ev["params"]
        if ev["mechanism"] == "laplace":
            acc.compose(dpa.LaplaceDpEvent(p["scale"] / p["sensitivity"]))
            continue
        acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(
            p["sample_rate"], dpa.GaussianDpEvent(p["noise_multiplier"])), p["steps"]))
    return acc.get_epsilon(delta)


def _ledger_events(suite, record):
    return json.loads((suite.out / "artifacts" / record["id"] / "ledger.json").read_text())["events"]


@pytest.mark.slow
def test_public_only_row_refuses_a_fine_tuned_upstream(guarded_run):
    """F1: finetune: none after a non-DP (or DP) fine-tuned synthesize cell fails; after the pretrain cell it runs."""
    _, records, _ = guarded_run
    assert "must be a pretrain cell" in _failure(guarded_run, "public_only_after_nodp")
    assert "must be a pretrain cell" in _failure(guarded_run, "public_only_after_dp")
    ok = records["public_only"]["result"]
    assert ok["public_only"] is True and "dp_epsilon" not in ok and ok["n_synthetic"] == 20


@pytest.mark.slow
def test_staged_cell_over_its_budget_fails_and_writes_nothing(guarded_run):
    """F2: σ = 0.3 at ε = 1 spends far more than 1: the staged cell fails (BudgetExceeded) without a sample."""
    assert "over the budget of 1" in _failure(guarded_run, "over")


@pytest.mark.slow
def test_staged_cell_reports_the_ledger_total_within_its_budget(guarded_run):
    """F2: dp_epsilon is the ledger's composed ε, ≤ the cell's ε, and no more than an independent RDP account of the
    recorded DP-SGD steps; after a DP upstream it counts both fine-tunes (one calibrated to the same ε overspends)."""
    suite, records, _ = guarded_run
    dp = records["dp"]
    events = _ledger_events(suite, dp)
    assert [e["mechanism"] for e in events] == ["laplace", "dpsgd"]  # the unit count, then DP-SGD
    eps = dp["result"]["dp_epsilon"]
    assert 0 < eps <= 5.0 and eps <= _rdp_epsilon(events, 1e-4) * (1 + 1e-6)
    assert "over the budget of 5" in _failure(guarded_run, "chain_over")
    chain = records["chain"]
    both = _ledger_events(suite, chain)
    total = chain["result"]["dp_epsilon"]
    assert [e["mechanism"] for e in both] == ["laplace", "dpsgd"] * 2 and total <= 30.0
    assert total > max(e["params"].get("epsilon_spent", 0.0) for e in both)  # not the last event's ε alone
    assert total <= _rdp_epsilon(both, 1e-4) * (1 + 1e-6)


@pytest.mark.slow
def test_staged_cell_refuses_a_model_pre_trained_on_a_split_of_its_sensitive_data(guarded_run):
    """F4: a pretrain cell that names no sensitive set pre-trains on a split of the data a later synthesize cell
    treats as sensitive; the synthesize cell checks the model's public_data against its sensitive set's specs."""
    assert "must not contain sensitive records" in _failure(guarded_run, "leaky")
