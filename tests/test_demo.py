"""End-to-end: the demo pipeline at a tiny scale writes a report whose card matches its ledger, and its audit tests
the card's claim on members and non-members that partition the sensitive transitions."""
import json

from privsynth.cli import main


def test_demo_end_to_end_tiny(tmp_path):
    out = tmp_path / "demo"
    rc = main(["demo", "--out", str(out), "--sensitive-steps", "2500", "--public-steps", "2000", "-n", "2000",
               "--epsilon", "10", "--quiet"])
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    card = report["privacy_card"]
    assert card["unit"] == "transition"
    assert 0 < card["epsilon"] <= 10.0
    md = (out / "report.md").read_text()
    assert "Privacy card" in md and "marginal" in md and "loss_ref" in md
    assert "internal, not DP" in md and "What the card covers" in md
    assert (out / "audit_roc.png").stat().st_size > 0
    # the audit gives a verdict on the transition-level claim (the split by episode gave "no verdict"): at ε = 10 its
    # design (500 pairs, every guess right) cannot refute the claim, so "uninformative", never "consistent" (issue 36)
    assert report["epsilon_audit"]["status"] == "uninformative", report["epsilon_audit"]["line"]
    assert report["epsilon_audit"]["best_possible_bound"] < 10 and report["epsilon_audit"]["members_needed"]
    assert report["datasets"]["split"]["by"] == "transition"
    assert "Claimed ε tested" in md and "no verdict" not in md
    assert report["audit_command"] in md and (out / "audit.md").exists()
    # the release is in the demo's own store and carries the same card
    import os
    os.environ["MINARI_DATASETS_PATH"] = str(out / "minari")
    from privsynth.data import minari_io

    released = minari_io.load_dataset(report["datasets"]["synthetic"])
    assert released.info.privacy_card["epsilon"] == card["epsilon"]
    assert released.info.sensitive is False
    # members and non-members are disjoint transition sets whose union is the sensitive set
    def keys(ds):
        return [row.tobytes() for row in ds.transition_matrix()]

    members = keys(minari_io.load_dataset(report["datasets"]["members"]["id"]))
    non_members = keys(minari_io.load_dataset(report["datasets"]["non_members"]["id"]))
    sensitive = keys(minari_io.load_dataset("privsynth/demo-sensitive-umaze-dense-v0"))
    assert not set(members) & set(non_members) and sorted(members + non_members) == sorted(sensitive)
    # DP-SGD counted the member transitions with DP (issue 36: a Laplace count, the exact N is on no card)
    count = card["events"][0]
    assert count["mechanism"] == "laplace" and "n_units" not in count
    assert abs(count["n_units_noisy"] - len(members)) < 60 * count["scale"]  # P(miss) = e^-60
