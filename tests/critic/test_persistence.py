"""Save/load: critics that own files, the state hash, devices, and every kind of damaged save.

The file-owning critic here is the shape the coreference critic takes: a latent
that is a ragged sequence of strings (a document's section titles), a point-mass
posterior over it, and a KenLM n-gram prior kept as a file beside critic.json.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from critic import Critic, CriticLoadError, Projection, register_critic
from critic.document import Document, Section
from critic.latent import ValuePointMass
from critics.ngram import NgramLM, estimate_ngram
from critics.sections import SectionTransitionCritic


class KenLMChainPrior:
    """P(z) of a chain of title tokens under a KenLM model, in natural log (the Prior protocol)."""

    def __init__(self, lm: NgramLM):
        self.lm = lm

    def log_prob(self, chains) -> torch.Tensor:
        return torch.tensor([self.lm.logprob(c) for c in chains], dtype=torch.float64)


@register_critic("test-title-chain")
class TitleChainCritic(Critic):
    """Trigram KenLM prior over section-title chains; given-title point mass."""

    def __init__(self, order: int = 3):
        self.order = order

    @staticmethod
    def chain(doc: Document) -> list[str]:
        return [(s.title or "untitled").replace(" ", "_") for s in doc.sections]

    def fit(self, docs, *, validation=None):
        self.arpa_path_ = Path(tempfile.mkdtemp()) / "prior.arpa"
        estimate_ngram([self.chain(d) for d in docs], self.order, self.arpa_path_, discount_fallback=True)
        self.lm_ = NgramLM(self.arpa_path_)
        return self

    def check(self, doc):
        return None if doc.sections else "document has no sections"

    def prior(self):
        return KenLMChainPrior(self.lm_)

    def project(self, docs):
        chains = [self.chain(d) for d in docs]
        return Projection([d.id for d in docs], ValuePointMass(chains),
                          torch.tensor([len(c) + 1.0 for c in chains], dtype=torch.float64))

    def _get_state(self):
        return {"order": self.lm_.order}, {}

    def _set_state(self, state, tensors):
        self.loaded_order_ = int(state["order"])

    def _save_files(self, directory):
        shutil.copyfile(self.arpa_path_, directory / "prior.arpa")

    def _load_files(self, directory):
        self.arpa_path_ = directory / "prior.arpa"
        self.lm_ = NgramLM(self.arpa_path_)


def pages(prefix, chains):
    return [Document(f"{prefix}{i}", tuple(Section(t, "text") for t in c)) for i, c in enumerate(chains)]


TRAIN = pages("t", [["name", "synopsis", "description", "see also"]] * 6
              + [["name", "synopsis", "description", "return value", "see also"]] * 4
              + [["name", "description", "see also"]] * 3)
TEST = pages("x", [["name", "synopsis", "description", "see also"], ["see also", "name"],
                   ["name", "description", "return value"], ["errors"]])


@pytest.fixture(scope="module")
def fitted():
    return TitleChainCritic().fit(TRAIN)


def kenlm_nll(arpa_path, docs):
    """-ln P of each document's title chain, straight from the kenlm module (sentence score, <s> and </s>)."""
    import kenlm

    model = kenlm.Model(str(arpa_path))
    return [-model.score(" ".join(TitleChainCritic.chain(d)), bos=True, eos=True) * math.log(10) for d in docs]


def test_file_prior_scores_are_kenlm_sentence_scores(fitted):
    scores = fitted.score(TEST)
    expected = kenlm_nll(fitted.arpa_path_, TEST)
    np.testing.assert_allclose(scores.latent_nll, expected, rtol=1e-12)
    assert scores.estimator == "exact"
    np.testing.assert_array_equal(scores.latent_steps, [5, 3, 4, 2])


def test_file_critic_saves_loads_and_scores_identically(fitted, tmp_path):
    path = fitted.save(tmp_path / "c")
    meta = json.loads((path / "critic.json").read_text())
    assert meta["files"] == {"prior.arpa": hashlib.sha256((path / "prior.arpa").read_bytes()).hexdigest()}
    assert meta["state_sha256"] == fitted.state_sha256()
    again = Critic.load(path)
    assert isinstance(again, TitleChainCritic) and again.loaded_order_ == 3
    np.testing.assert_array_equal(again.score(TEST).latent_nll, fitted.score(TEST).latent_nll)
    np.testing.assert_allclose(again.score(TEST).latent_nll, kenlm_nll(fitted.arpa_path_, TEST), rtol=1e-12)
    assert again.state_sha256() == meta["state_sha256"]
    # a changed file is noticed
    with open(path / "prior.arpa", "a") as fh:
        fh.write("\n")
    changed = hashlib.sha256((path / "prior.arpa").read_bytes()).hexdigest()
    with pytest.raises(CriticLoadError, match=rf"own files differ from those saved: prior.arpa was changed "
                                              rf"\(SHA-256 {changed[:12]}\.\.\., saved {meta['files']['prior.arpa'][:12]}"):
        Critic.load(path)
    (path / "notes.txt").write_text("mine")
    (path / "prior.arpa").unlink()
    with pytest.raises(CriticLoadError, match=r"saved: prior.arpa is missing; notes.txt was added"):
        Critic.load(path)


def test_save_is_atomic_and_replaces_whole(fitted, tmp_path, monkeypatch):
    path = fitted.save(tmp_path / "c")
    before = {p.name: p.read_bytes() for p in path.iterdir()}

    def boom(directory):
        (directory / "half.bin").write_bytes(b"x")
        raise KeyboardInterrupt

    monkeypatch.setattr(fitted, "_save_files", boom)
    with pytest.raises(KeyboardInterrupt):
        fitted.save(path)
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["c"]  # no temporary left behind


def section_chain_nll(train, docs, delta):
    """-log P(z) under add-delta bigrams of normalised titles (<bos> -> K types, a type -> K types + <eos>),
    boilerplate titles ("see also", ...) dropped and unseen titles read as <unk>; in plain Python."""
    from collections import Counter

    from critics.sections.normalize import DEFAULT_DROP_TITLES, TitleNormalizer

    norm = TitleNormalizer()
    drop = {norm(t) for t in DEFAULT_DROP_TITLES}
    chain = lambda d: [t for t in (norm(s.title) for s in d.sections) if t not in drop]  # noqa: E731
    chains = [chain(d) for d in train]
    vocab = {t for c in chains for t in c} | {"<unk>"}
    pairs = Counter((a, b) for c in chains for a, b in zip(["<bos>"] + c, c + ["<eos>"]))
    out_of = Counter(a for a, _ in pairs.elements())
    nll = []
    for d in docs:
        c = [t if t in vocab else "<unk>" for t in chain(d)]
        nll.append(-sum(math.log((pairs[a, b] + delta) / (out_of[a] + delta * (len(vocab) + (a != "<bos>"))))
                        for a, b in zip(["<bos>"] + c, c + ["<eos>"])))
    return nll


@pytest.fixture
def saved_sections(tmp_path):
    critic = SectionTransitionCritic(delta=0.1).fit(TRAIN)
    return critic.save(tmp_path / "sections"), critic


def _edit_json(path: Path, edit) -> None:
    meta = json.loads((path / "critic.json").read_text())
    edit(meta)
    (path / "critic.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("damage, message", [
    (lambda p: (p / "tensors.pt").write_bytes((p / "tensors.pt").read_bytes()[:100]), r"tensors.pt: cannot be read"),
    (lambda p: (p / "tensors.pt").write_bytes(b""), r"tensors.pt: cannot be read"),
    (lambda p: (p / "tensors.pt").unlink(), r"tensors.pt: missing"),
    (lambda p: torch.save({"start": torch.zeros(3)}, p / "tensors.pt"), r"holds tensors \['start'\]"),
    (lambda p: torch.save([1, 2], p / "tensors.pt"), r"mapping of names to tensors"),
    (lambda p: (p / "critic.json").write_text("{\"format_version\": 2,"), r"critic.json: invalid JSON at line 1"),
    (lambda p: (p / "critic.json").write_bytes(b"\xff\xfe"), r"critic.json: not UTF-8"),
    (lambda p: (p / "critic.json").write_text("[1, 2]"), r"expected a JSON object"),
    (lambda p: (p / "critic.json").unlink(), r"no critic.json"),
    (lambda p: _edit_json(p, lambda m: m.update(params="delta")), r"'params' must be a dict"),
    (lambda p: _edit_json(p, lambda m: m.pop("state_sha256")), r"missing key 'state_sha256'"),
    (lambda p: _edit_json(p, lambda m: m.update(format_version=1)), r"format version 1"),
    (lambda p: _edit_json(p, lambda m: m.update(critic="hsmm")), r"changed after saving"),
    (lambda p: _edit_json(p, lambda m: m.update(critic="no-such")), r"unknown critic 'no-such'"),
    (lambda p: _edit_json(p, lambda m: m["state"].update(delta=0.5)), r"changed after saving"),
    (lambda p: _edit_json(p, lambda m: m["state"]["vocab"].pop()), r"changed after saving"),
], ids=["truncated-tensors", "empty-tensors", "missing-tensors", "foreign-tensors", "not-a-mapping",
        "bad-json", "not-utf8", "json-list", "no-json", "wrong-type", "no-hash", "old-version", "relabelled",
        "unknown-kind", "tampered-delta", "tampered-vocab"])
def test_damaged_saves_give_one_named_error(saved_sections, damage, message):
    path, _ = saved_sections
    damage(path)
    with pytest.raises(CriticLoadError, match=message) as info:
        Critic.load(path)
    assert str(path) in str(info.value)


def test_tampered_counts_with_a_forged_hash_still_fail_cleanly(saved_sections):
    """Someone who edits the state and recomputes the hash gets a named error, not a traceback."""
    from critic.critic import _state_digest

    path, _ = saved_sections
    tensors = torch.load(path / "tensors.pt", weights_only=True)
    tensors["transition"] = tensors["transition"][:2]  # wrong shape for the vocabulary
    torch.save(tensors, path / "tensors.pt")
    meta = json.loads((path / "critic.json").read_text())
    meta["state_sha256"] = _state_digest(meta, tensors, meta["files"])
    (path / "critic.json").write_text(json.dumps(meta))
    with pytest.raises(CriticLoadError, match=r"not a valid 'sections' critic \(ValueError"):
        Critic.load(path)


def test_device_is_not_saved_and_loads_on_cpu(saved_sections):
    path, critic = saved_sections
    meta = json.loads((path / "critic.json").read_text())
    assert "device" not in json.dumps(meta["params"])
    again = Critic.load(path, device="cpu")
    assert again.device == torch.device("cpu") and again.prior().transition.device.type == "cpu"
    np.testing.assert_array_equal(again.score(TEST).latent_nll, critic.score(TEST).latent_nll)
    np.testing.assert_allclose(again.score(TEST).latent_nll, section_chain_nll(TRAIN, TEST, 0.1), rtol=1e-12)
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda"):
        Critic.load(path, device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            critic.to("cuda")


def test_save_never_replaces_a_directory_that_is_not_a_saved_critic(fitted, tmp_path):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match=f"{mine}: exists and is not a saved critic; refusing to replace it"):
        fitted.save(mine)
    assert [p.name for p in mine.iterdir()] == ["keep.txt"]


def test_the_state_hash_writes_the_critic_s_files_once_and_again_after_a_refit(tmp_path, monkeypatch):
    """A critic's own files (here its ARPA prior; the JSON state holds only the order) are hashed when saved or
    loaded and reused by state_sha256 while the state is unchanged; refitting on other data, with the same JSON
    state, gives another hash."""
    critic = TitleChainCritic().fit(TRAIN)
    critic.save(tmp_path / "c")
    saved = json.loads((tmp_path / "c" / "critic.json").read_text())["state_sha256"]
    loaded = Critic.load(tmp_path / "c")
    for c in (critic, loaded):
        monkeypatch.setattr(c, "_save_files", lambda directory: pytest.fail("wrote its files again"))
        assert c.state_sha256() == saved
    monkeypatch.undo()
    other = TRAIN[:6] + pages("u", [["name", "errors", "see also"]] * 5)
    critic.fit(other)  # same order, other chains: the same JSON state, another ARPA file
    assert critic._get_state() == loaded._get_state() == ({"order": 3}, {})
    refit = critic.state_sha256()
    assert refit != saved and refit == TitleChainCritic().fit(other).state_sha256()
