"""The flags benchmark: a repetition is Benjamini-Hochberg at the FDR over ``criticize``'s p-values, by hand; the
benchmark runs at toy size on the fixture pages."""

from __future__ import annotations

import json
import random

import pytest

from experiments.benchmarks.flags import main, repetition


@pytest.fixture(scope="module")
def pages(fixture_manpage_root):
    from experiments.benchmarks.corpus import filtered_manpages

    splits = filtered_manpages(fixture_manpage_root)
    return splits["train"], splits["valid"] + splits["test"] + splits["train"]


def bh(p: list[float], fdr: float) -> set[int]:
    order = sorted(range(len(p)), key=lambda i: p[i])
    k_star = max((k for k in range(1, len(p) + 1) if p[order[k - 1]] <= k * fdr / len(p)), default=0)
    return set(order[:k_star])


def test_a_repetition_flags_what_bh_rejects_by_hand(pages):
    """The same draw by hand: reference, clean and corrupted pages from the same random stream; the flags BH's
    rejections at 0.5 over the mixed and the clean set; recall, false discovery proportions and AUC from them."""
    from critic.corrupt import permute_sections
    from critic.criticism import criticize
    from critics.sections import SectionTransitionCritic

    train, held = pages
    critic = SectionTransitionCritic(delta=0.1).fit(train).calibrate(train, folds=2)

    def corrupt(docs, rng):
        return [permute_sections(d, seed=rng.randrange(2**31)) for d in docs]

    got = repetition(critic, held, corrupt, n_reference=8, n_clean=6, n_bad=3, fdr=0.5, rng=random.Random(4), seed=0)
    rng = random.Random(4)
    docs = rng.sample(held, len(held))
    reference, rest = docs[:8], docs[8:]
    clean = rest[:6]
    sources = rest[6:9] if len(rest) >= 9 else rng.sample(clean, 3)
    bad = corrupt(sources, rng)
    result = criticize(critic, reference, {"mixed": clean + bad, "clean": clean}, n_bootstrap=10, n_permutations=10)
    mixed = result.candidates["mixed"].documents
    flagged = bh([d.outlier_p_value for d in mixed], 0.5)
    is_bad = [d.id in {b.id for b in bad} for d in mixed]
    assert got["recall"] == pytest.approx(sum(is_bad[i] for i in flagged) / sum(is_bad))
    assert got["fdp_mixed"] == pytest.approx(sum(not is_bad[i] for i in flagged) / max(len(flagged), 1))
    assert got["fdp_clean"] == float(bool(bh([d.outlier_p_value for d in result.candidates["clean"].documents], 0.5)))
    overlap = len({d.id for d in reference} & set(critic.calibration.ids))  # training pages: counted once
    assert got["pool_size"] == result.config["calibration"]["n"] == len(critic.calibration) + 8 - overlap
    assert 0.0 <= got["auc"] <= 1.0


def test_the_benchmark_runs_on_the_fixture_pages(fixture_manpage_root, tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert main(["--cases", "sections", "--root", str(fixture_manpage_root), "--reference-sizes", "6,8",
                 "--clean", "5", "--bad", "3", "--valid", "3", "--repetitions", "3", "--calibration-folds", "2",
                 "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["corruption"], r["pool"], r["reference"]) for r in rows] == [
        (c, pool, n) for c in ("permuted", "repeated", "dropped") for pool in ("calibrated", "reference only")
        for n in (6, 8)]
    for r in rows:
        assert all(0.0 <= r[k] <= 1.0 for k in ("fdp_mixed", "fdp_clean", "smallest_p"))
        alone = r["pool"] == "reference only"
        assert r["pool_size"] == (r["reference"] if alone else r["reference"] + r["calibration"])
    assert "| critic | corruption | pool | reference |" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--cases", "sectons"], ["--reference-sizes", "x"]])
def test_bad_options_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "Traceback" not in capsys.readouterr().err
