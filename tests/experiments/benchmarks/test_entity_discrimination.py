"""The sentence-order discrimination benchmark: its permutations are the document's own sentences reordered, its
accuracy is a count of the pairs it scores (checked against scoring each pair alone), and it runs at toy size."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments.benchmarks.entity_discrimination import discrimination, main, sentence_permutations


@pytest.fixture(scope="module")
def pages(fixture_manpages):
    return fixture_manpages


@pytest.fixture(scope="module")
def critic(pages):
    from critics.entitygrid import EntityGridCritic

    return EntityGridCritic().fit(pages["train"])


def test_permutations_reorder_the_critic_s_own_sentences(critic, pages):
    from critic.document import Document, Section
    from critics.entitygrid import document_sentences

    doc = pages["test"][0]
    sentences = document_sentences(doc)
    permuted = sentence_permutations(doc, 6)
    assert len(permuted) == 6 and len({p.id for p in permuted}) == 6
    orders = [tuple(sentences.index(s) for s in document_sentences(p)) for p in permuted]
    assert len(set(orders)) == 6 and tuple(range(len(sentences))) not in orders
    (grid, *moved) = critic.grids([doc, *permuted])
    for order, other in zip(orders, moved):  # the same grid, its columns permuted
        assert [other.chain(other.entities.index(name)) for name in grid.entities] == \
            ["".join(grid.chain(e)[i] for i in order) for e in range(len(grid.entities))]
    three = Document("three", (Section(None, "The kernel loads the module. The judge gave the lawyer a book."),
                               Section(None, "The driver reads the file.")))
    assert len(sentence_permutations(three, 20)) == math.factorial(3) - 1  # all of the others when fewer
    assert sentence_permutations(Document("one", (Section(None, "The kernel starts."),)), 20) == []
    assert [p.sections for p in sentence_permutations(doc, 6)] == [p.sections for p in permuted]  # seeded


def test_accuracy_is_the_count_of_pairs_each_scored_alone(critic, pages):
    docs = pages["valid"] + pages["test"]
    found = discrimination(critic, docs, permutations=5, n_bootstrap=50)
    wins = ties = pairs = 0
    for doc in docs:
        (t,) = critic.score([doc]).latent_nll
        for other in sentence_permutations(doc, 5):
            (u,) = critic.score([other]).latent_nll
            wins, ties, pairs = wins + (t < u), ties + (t == u), pairs + 1
    assert found["pairs"] == pairs == len(found["outcomes"]) == sum(min(5, math.factorial(n) - 1) for n in
                                                                   (critic.grids([d])[0].sentences for d in docs))
    assert found["accuracy"] == pytest.approx((wins + 0.5 * ties) / pairs, abs=1e-12)
    assert found["documents"] == len(docs) and found["skipped"] == 0
    assert 0.5 < found["accuracy"] and found["ci"][0] <= found["accuracy"] <= found["ci"][1]
    outcomes = np.array([o[-1] for o in found["outcomes"]])
    assert set(outcomes) <= {0.0, 0.5, 1.0} and outcomes.mean() == found["accuracy"]


def test_the_benchmark_runs_at_toy_size(fixture_manpage_root, capsys, tmp_path):
    res = main(["--corpora", "manpages", "--root", str(fixture_manpage_root), "--documents", "4", "--permutations",
                "3", "--bootstrap", "20", "--calibration-null", "5", "--json", str(tmp_path / "out.json")])
    pages = res["corpora"]["manpages"]
    assert pages["discrimination"]["pairs"] == 12 and 0 <= pages["discrimination"]["accuracy"] <= 1
    for corruption in ("shuffled-sentences", "shuffled-document"):
        r = pages["detection"][corruption]["length"]
        assert 0.0 <= r["auc_ci"][0] <= r["auc"] <= r["auc_ci"][1] <= 1.0 and r["k"] >= 1
    printed = capsys.readouterr().out
    assert "87.2% Earthquakes" in printed and "shuffled-document" in printed and (tmp_path / "out.json").is_file()


@pytest.mark.parametrize("argv", [["--corpora", "news"], ["--documents", "0"], ["--params", '{"order": 3}'],
                                  ["--params", "[1]"], ["--params", "{"], ["--rate", "1"]])
def test_bad_options_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "Traceback" not in capsys.readouterr().err
