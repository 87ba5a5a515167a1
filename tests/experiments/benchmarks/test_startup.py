"""The start-up benchmark: every command exits as expected (critic score with the section critic it fits), each
ratio is its best time over ``import torch``'s, against its issue's target."""

from __future__ import annotations

from experiments.benchmarks.startup import COMMANDS, SCORE_COMMANDS, SCORE_TARGET, TARGET, main


def test_each_command_is_timed_against_import_torch(tmp_path):
    out = main(["--repeat", "1", "--json", str(tmp_path / "startup.json")])
    rows = out["rows"]
    assert set(rows) == {"import torch", *COMMANDS, *SCORE_COMMANDS}
    floor = rows["import torch"]["best"]
    for row in rows.values():
        assert row["ratio"] == row["best"] / floor and row["best"] <= row["median"]
        assert row["round_ratio"] == row["ratio"]  # one round: its own ratio
    assert {name: row["target"] for name, row in rows.items()} == {
        "import torch": None, **{name: TARGET for name in COMMANDS}, **{name: SCORE_TARGET for name in SCORE_COMMANDS}}
    assert (tmp_path / "startup.json").is_file() and out["cold_list_seconds"] > 0
