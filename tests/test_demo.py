"""End-to-end: the demo pipeline at a tiny scale writes a report whose card matches its ledger."""
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
    # the release is in the demo's own store and carries the same card
    import os
    os.environ["MINARI_DATASETS_PATH"] = str(out / "minari")
    from privsynth.data import minari_io

    released = minari_io.load_dataset(report["datasets"]["synthetic"])
    assert released.info.privacy_card["epsilon"] == card["epsilon"]
    assert released.info.sensitive is False
