"""A critic's calibration documents: cross-fitted by hand, saved with the critic, pooled with the reference."""

import json
import random

import numpy as np
import pytest
from scipy.stats import poisson

from critic import Critic, criticize
from critic.calibration import Calibration, document_digest, fold_of
from critic.critic import CriticLoadError
from critic.outliers import OutlierPool
from critic.document import Document, Section
from critic.stats import id_uniforms


def documents(prefix: str, n: int, seed: int) -> list[Document]:
    rng = np.random.default_rng(seed)
    return [Document(f"{prefix}{i}", tuple(Section(f"s{k}", "w " * int(rng.integers(1, 30)))
                                           for k in range(int(rng.integers(1, 9))))) for i in range(n)]


def test_cross_fitting_scores_each_fold_with_a_critic_fitted_without_it(tutorial):
    """By hand: fold k = floor(u K) of the id's uniform; its documents' T(x) = -log Poisson(count; mean count of
    the other folds); the validation documents under the critic fitted on everything."""
    train, valid = documents("t", 40, 0), documents("v", 7, 1)
    critic = tutorial.SectionCountCritic().fit(train).calibrate(train, valid, folds=4, seed=3)
    cal = critic.calibration
    assert cal.sources == {"cross-fitted": 40, "validation": 7} and cal.folds == 4 and len(cal) == 47
    fold = np.floor(id_uniforms([d.id for d in train], "3:fold") * 4).astype(int)
    assert np.array_equal(fold, fold_of([d.id for d in train], 4, 3))
    got = dict(zip(cal.ids, cal.columns[:, 0]))
    counts = np.array([len(d.sections) for d in train])
    for i, d in enumerate(train):
        rate = counts[fold != fold[i]].mean()
        assert got[d.id] == pytest.approx(-poisson.logpmf(len(d.sections), rate), rel=1e-12)
    for d in valid:
        assert got[d.id] == pytest.approx(-poisson.logpmf(len(d.sections), counts.mean()), rel=1e-12)
    words = dict(zip(cal.ids, cal.words))
    assert all(words[d.id] == len(d.text.split()) for d in train + valid)
    assert dict(zip(cal.ids, cal.digests))["v0"] == document_digest(valid[0])
    # the same documents in another order: the same calibration, document by document
    shuffled = random.Random(0).sample(train, len(train))
    again = tutorial.SectionCountCritic().fit(shuffled).calibrate(shuffled, valid, folds=4, seed=3).calibration
    assert dict(zip(again.ids, again.columns[:, 0])) == pytest.approx(got, rel=1e-12)


def test_folds_are_checked_and_zero_keeps_the_validation_only(tutorial):
    train = documents("t", 10, 2)
    critic = tutorial.SectionCountCritic().fit(train)
    assert critic.calibrate(train, None, folds=0).calibration.sources == {}
    assert critic.calibration.summary().startswith("none (no cross-fitting and no validation documents: outlier "
                                                   "p-values will compare with the reference alone")
    assert len(critic.calibrate(train, train[:3], folds=0).calibration) == 3
    for bad in (1, -2, True, 2.5):
        with pytest.raises(ValueError, match="calibration folds must be 0 .no cross-fitting. or an integer >= 2"):
            critic.calibrate(train, None, folds=bad)
    with pytest.raises(Exception, match="not fitted"):
        tutorial.SectionCountCritic().calibrate(train)


def test_the_calibration_is_saved_hashed_and_forgotten_on_refit(tutorial, tmp_path):
    train = documents("t", 30, 3)
    bare = tutorial.SectionCountCritic().fit(train)
    bare_hash = bare.state_sha256()
    critic = tutorial.SectionCountCritic().fit(train).calibrate(train, folds=3)
    assert critic.state_sha256() != bare_hash  # the calibration is part of what defines the fitted critic
    critic.save(tmp_path / "c")
    loaded = Critic.load(tmp_path / "c")
    assert loaded.calibration.ids == critic.calibration.ids
    np.testing.assert_array_equal(loaded.calibration.columns, critic.calibration.columns)
    assert loaded.state_sha256() == critic.state_sha256()
    meta = json.loads((tmp_path / "c" / "critic.json").read_text())
    meta["calibration"]["columns"][0][0] += 1.0  # an edited calibration
    (tmp_path / "c" / "critic.json").write_text(json.dumps(meta))
    with pytest.raises(CriticLoadError, match="critic.json or tensors.pt was changed after saving"):
        Critic.load(tmp_path / "c")
    assert critic.fit(train).calibration is None  # a refit scores with another critic: its calibration goes
    assert tutorial.SectionCountCritic().fit(train).state_sha256() == bare_hash  # no calibration: as before


@pytest.mark.parametrize("state, message", [
    ([], "calibration must be an object"),
    ({"ids": []}, "calibration lacks columns, digests, folds, sources, statistics, words"),
    ({"ids": ["a"], "digests": ["x"], "columns": [[1.0, 2.0]], "words": [3], "statistics": [], "sources": {},
      "folds": 0}, r"calibration of 1 documents with 1 statistics has columns \(1, 2\), words \(1,\) and 1 digests"),
    ({"ids": ["a"], "digests": ["x"], "columns": [[float("nan")]], "words": [3], "statistics": [], "sources": {},
      "folds": 0}, "must be finite"),
])
def test_a_malformed_calibration_is_refused(state, message):
    with pytest.raises(ValueError, match=message):
        Calibration.from_state(state)


def test_criticize_pools_the_calibration_with_the_reference_each_document_once(tutorial):
    """The p-values against calibration + reference equal an OutlierPool built by hand from both (a reference
    document that is also a calibration document counted once, as the reference's), and the result says what the
    pool was: its size, sources, groups and smallest p-value."""
    train, valid = documents("t", 90, 4), documents("v", 20, 5)
    critic = tutorial.SectionCountCritic().fit(train).calibrate(train, valid, folds=3)
    reference = valid[:5] + documents("r", 25, 6)  # 5 reference documents are calibration documents too
    candidate = documents("c", 15, 7)
    result = criticize(critic, reference, {"lm": candidate}, n_bootstrap=10, n_permutations=10, seed=2)
    cal = critic.calibration.without({document_digest(d) for d in valid[:5]})
    assert len(cal) == 105
    ref_scores = critic.score(reference)
    pool = OutlierPool(np.concatenate([cal.columns[:, 0], ref_scores.latent_nll]),
                       np.concatenate([cal.words, [len(d.text.split()) for d in reference]]),
                       cal.ids + [d.id for d in reference], seed=2)
    scores = critic.score(candidate)
    want = pool.p_values(scores.latent_nll[:, None], np.array([len(d.text.split()) for d in candidate]),
                         [d.id for d in candidate])
    assert [d.outlier_p_value for d in result.candidates["lm"].documents] == pytest.approx(list(want.p))
    own = pool.own_p_values()
    assert [d.outlier_p_value for d in result.reference.documents] == pytest.approx(list(own.p[-30:]))
    about = result.config["calibration"]
    assert about["n"] == 135 and about["sources"] == {"cross-fitted": 90, "validation": 15, "reference": 30}
    assert about["groups"] == 4 and about["smallest_p"] == pytest.approx(1 / (about["smallest_group"] + 1))
    assert about["notes"] == ["5 calibration documents are also reference documents: counted once"]
    # without a calibration the reference alone, as before calibration existed
    bare = criticize(tutorial.SectionCountCritic().fit(train), reference, {"lm": candidate}, n_bootstrap=10,
                     n_permutations=10, seed=2)
    assert bare.config["calibration"]["n"] == 30 and bare.config["calibration"]["sources"] == {"reference": 30}
    # q-values: Benjamini-Hochberg within the set
    p = np.array([d.outlier_p_value for d in result.candidates["lm"].documents])
    q = np.array([d.q_value for d in result.candidates["lm"].documents])
    order = np.argsort(p)
    assert q[order] == pytest.approx(np.minimum.accumulate((p[order] * 15 / np.arange(1, 16))[::-1])[::-1])


def test_a_calibration_of_other_statistics_is_left_out_with_a_note(tutorial):
    train = documents("t", 30, 8)
    critic = tutorial.SectionCountCritic().fit(train).calibrate(train, folds=3)
    critic.calibration_.statistics = ("spread",)
    result = criticize(critic, documents("r", 12, 9), {"lm": documents("c", 5, 10)}, n_bootstrap=10,
                       n_permutations=10)
    assert result.config["calibration"]["n"] == 12
    assert result.config["calibration"]["notes"] == [
        "the critic's calibration has the statistics ['spread'], the critic []: left out (refit the critic)"]
