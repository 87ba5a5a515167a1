"""Why the entity-grid critic finds a document unlikely: the order line, then the entities with the largest -log P,
named on a hand-made case, the same from the extras as from the document, the order line placed by the p-values."""

from __future__ import annotations

import pytest

from critic.results import DocumentResult
from critics.entitygrid import EntityGridCritic

from .texts import document

TRAINING = [document(f"t{k}", text) for k, text in enumerate((
    "The judge gave the lawyer a book. The driver reads the file.",
    "A user opens a terminal. The farmer sells the apples.",
    "The teacher reads a story. The kernel loads the module.",
    "The driver reads the file. The judge gave the lawyer a book. A user opens a terminal."))]
"""No entity of these documents is mentioned twice: the prior has never seen a salient entity."""

ODD = document("odd", "The kernel loads the module. The kernel starts. The judge gave the lawyer a book.")
"""``kernel`` is the subject of two sentences: a salient entity, which the training documents never had."""


def result_of(critic, doc, p_values=None) -> DocumentResult:
    scores = critic.score([doc])
    (t,), (m,) = scores.latent_nll, scores.latent_steps
    return DocumentResult(doc.id, float(t), float(m), float(t / m), 0.01, p_values=p_values,
                          extras={name: values[0] for name, values in scores.extras.items()})


@pytest.fixture(scope="module")
def critic():
    return EntityGridCritic().fit(TRAINING)


def test_the_reasons_name_the_entity_the_prior_finds_least_likely(critic):
    (grid,) = critic.grids([ODD])
    nll = dict(zip(grid.entities, critic.entity_nll(grid)))
    assert grid.chain(grid.entities.index("kernel")) == "SS-" and max(nll, key=nll.get) == "kernel"
    assert critic.class_counts_[1] == 0  # P(salient) = 0.1 / (n + 0.2): kernel's class alone costs 4.5 nats
    lines = critic.explain(result_of(critic, ODD), ODD)
    rank = critic.score([ODD]).extras["order_rank"][0]
    assert lines[0] == (f"sentence order: {rank:.0%} of 6 orders of its sentences are more likely under the prior "
                        f"(order rank {rank:.2f}, ties counting half)")
    assert lines[1] == f"entity 'kernel': S S -, -log P = {nll['kernel']:.1f} nats (1st of 5), 0.0 above random orders"
    # the salient chain is the smoothing's uniform one: every order of kernel's mentions costs the same
    named = [line.split("'")[1] for line in lines[1:]]
    assert named == sorted(nll, key=lambda e: (-nll[e], grid.entities.index(e)))[:4] and len(lines) == 5


def test_the_extras_and_the_document_give_the_same_reasons(critic):
    result = result_of(critic, ODD)
    bare = DocumentResult(result.id, result.latent_nll, result.latent_steps, result.latent_nll_per_step, 0.01)
    assert critic.explain(bare, ODD) == critic.explain(result, None) == critic.explain(result, ODD)
    with pytest.raises(ValueError, match="no 'least_likely_entities' extra and no document"):
        critic.explain(bare, None)
    with pytest.raises(ValueError, match="document has no sentences"):
        critic.explain(DocumentResult("empty", 1.0, 1.0, 1.0, 0.5), document("empty"))


def test_the_order_line_comes_last_when_t_m_ranks_the_document(critic):
    by_order = critic.explain(result_of(critic, ODD, {"latent_nll_per_step": 0.4, "order_rank": 0.01}), ODD)
    by_t = critic.explain(result_of(critic, ODD, {"latent_nll_per_step": 0.01, "order_rank": 0.4}), ODD)
    assert by_order[0].startswith("sentence order:") and by_t[-1] == by_order[0] and by_t[:-1] == by_order[1:]


def test_long_chains_are_shown_by_their_mentions(critic):
    doc = document("long", " ".join(["The kernel loads the module."] + ["The judge gave the lawyer a book."] * 24
                                    + ["The kernel starts."]))
    lines = critic.explain(result_of(critic, doc), doc)
    kernel = next(line for line in lines if line.startswith("entity 'kernel'"))
    assert kernel.startswith("entity 'kernel': S in 1, S in 26 of 26 sentences, -log P = ")
    assert lines[0].startswith("sentence order: ") and "of 100 orders" in lines[0]
