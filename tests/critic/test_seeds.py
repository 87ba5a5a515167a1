"""``critic.seeds``: the agreement of fits by hand, and ``critic fit NAME --check-seeds N`` on real man pages with
the LDA critic, whose deterministic start reproduces bit for bit and whose random start does not."""

from __future__ import annotations

import json

import numpy as np
import pytest

from critic.seeds import matched_cosines, seed_agreement


def test_agreement_by_hand():
    """Scores 0..29 against 29..0 correlate -1 and share the top 10 of 20 ({10..29} and {0..19}); against 2x + 1
    they correlate 1 and share all 20; topics in another order match after the assignment (cosine 1)."""
    topics = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    a, b, c = np.arange(30.0), np.arange(30.0)[::-1].copy(), 2 * np.arange(30.0) + 1
    got = seed_agreement([a, b, c], [topics, topics[::-1].copy(), topics])
    assert got["corr"]["pairs"] == pytest.approx([-1.0, 1.0, -1.0])
    assert got["top_overlap"]["pairs"] == [10.0, 20.0, 10.0]
    assert got["top_overlap"]["mean"] == pytest.approx(40 / 3) and got["top_overlap"]["min"] == 10.0
    assert got["component_cosine"]["min"] == pytest.approx(1.0)
    assert "component_cosine" not in seed_agreement([a, c])               # no components: no matching
    assert "component_cosine" not in seed_agreement([a, c], [topics, None])
    assert seed_agreement([a, c], top=5)["top_overlap"]["pairs"] == [5.0]
    # a cosine below 1: [1, 0, 0] against [1, 1, 0] / sqrt 2 is 1 / sqrt 2
    assert matched_cosines(np.array([[1.0, 0, 0]]), np.array([[1.0, 1.0, 0]]))[0] == pytest.approx(2 ** -0.5)


def test_agreement_refuses_what_it_cannot_compare():
    with pytest.raises(ValueError, match="at least two fits"):
        seed_agreement([np.arange(5.0)])
    with pytest.raises(ValueError, match="same documents"):
        seed_agreement([np.arange(5.0), np.arange(6.0)])
    with pytest.raises(ValueError, match="cannot be matched"):
        matched_cosines(np.ones((2, 3)), np.ones((3, 3)))


@pytest.fixture(scope="module")
def manpages(tmp_path_factory, fixture_manpage_root):
    from critic.corpora.manpages import build_manpages

    out = tmp_path_factory.mktemp("seeds") / "data"
    build_manpages(out, root=fixture_manpage_root, install=False)
    return out


def test_check_seeds_on_the_command_line(manpages, tmp_path, capsys):
    """The NMF start makes the LDA's fits the same for every seed: correlation 1 and every top document shared;
    gensim's random start does not (correlation below 0.999).  The first seed's fit is the one saved, and
    ``OUT.seed_check.json`` beside it holds the figures printed."""
    from critic.cli import main
    from critic.critic import Critic

    train, valid = manpages / "train.jsonl", manpages / "valid.jsonl"
    out = tmp_path / "nmf"
    assert main(["fit", "lda", "--train", str(train), "--valid", str(valid), "--out", str(out), "--seed", "3",
                 "--check-seeds", "3", "--params", '{"num_topics": 3}']) == 0
    printed = capsys.readouterr().out
    check = json.loads((tmp_path / "nmf.seed_check.json").read_text())
    assert check["seeds"] == [3, 4, 5] and len(check["fits"]) == 3 and check["documents"] >= 2
    agree = check["agreement"]
    assert agree["corr"]["min"] == pytest.approx(1.0, abs=1e-9) and len(agree["corr"]["pairs"]) == 3
    assert agree["top_overlap"]["min"] == min(20, check["documents"])
    assert agree["component_cosine"]["min"] == pytest.approx(1.0)
    assert "seed check (--valid)" in printed and "Latent NLL correlation" in printed
    assert Critic.load(out).seed == 3
    rnd = tmp_path / "random"
    assert main(["fit", "lda", "--train", str(train), "--valid", str(valid), "--out", str(rnd), "--check-seeds", "2",
                 "--params", '{"num_topics": 3, "init": "random"}']) == 0
    assert json.loads((tmp_path / "random.seed_check.json").read_text())["agreement"]["corr"]["min"] < 0.999


def test_check_seeds_compares_the_documents_every_fit_scored(manpages):
    """A document no fit can project (no known word) is reported with its reason and left out of the comparison;
    the Latent NLLs compared are each fit's own scores of the rest, in the documents' order."""
    from critic.document import Document, Section, read_jsonl
    from critic.seeds import check_seeds
    from critics.topics.lda import LdaCodeMixCritic

    train, valid = read_jsonl(manpages / "train.jsonl"), read_jsonl(manpages / "valid.jsonl")
    unknown = Document("unknown", (Section(None, "zzqx yyqv xxqw"),))
    check = check_seeds(lambda seed: LdaCodeMixCritic(num_topics=3, init="random", seed=seed), train,
                        [*valid, unknown], [7, 8])
    assert check.seeds == [7, 8] and [c.seed for c in check.critics] == [7, 8]
    assert check.doc_ids == [d.id for d in valid] and set(check.skipped) == {"unknown"}
    for critic, nll in zip(check.critics, check.latent_nll):
        assert np.array_equal(nll, critic.score(valid, seed=critic.seed).latent_nll)
    assert check.agreement["corr"]["pairs"] == [pytest.approx(float(np.corrcoef(*check.latent_nll)[0, 1]))]
    with pytest.raises(ValueError, match="at least two distinct seeds"):
        check_seeds(lambda seed: LdaCodeMixCritic(num_topics=3, seed=seed), train, valid, [1, 1])


def test_check_seeds_needs_two_seeds_and_a_seeded_critic(manpages, tmp_path, capsys):
    from critic.cli import main

    train = str(manpages / "train.jsonl")
    assert main(["fit", "lda", "--train", train, "--out", str(tmp_path / "a"), "--check-seeds", "1"]) == 2
    assert "--check-seeds: compare at least 2 seeds, got 1" in capsys.readouterr().err
    assert main(["fit", "sections", "--train", train, "--out", str(tmp_path / "b"), "--check-seeds", "2"]) == 2
    assert "critic 'sections' has no seed setting" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
