"""Why a document is unlikely: its copies, named where they are and where their text was first written."""

import math

import pytest
import torch

from critic import criticize
from critic.document import Document, Section
from critics.repetition import RepetitionCritic
from critics.repetition.prior import COPY, NEW

TRAIN = [Document(f"d{i}", (Section("NAME", f"Tool {i} does things. It is good."),
                            Section("DESCRIPTION", "It reads. It writes. It reads. It stops. Tool is here.")))
         for i in range(12)]

# units (sentences): 1 NAME; 2-4 the loop's source; 5-10 it twice more; 11 new; 12 a copy of 1
LOOPED = Document("looped", (
    Section("NAME", "Tool does a thing."),
    Section("DESCRIPTION", "It reads. It writes. It stops. It reads. It writes. It stops. It reads. It writes.\n"
                           "It stops. Done here."),
    Section("SEE ALSO", "Tool  does a thing.")))


@pytest.fixture(scope="module")
def critic():
    return RepetitionCritic(unit="sentence").fit(TRAIN)


@pytest.fixture(scope="module")
def result(critic):
    return criticize(critic, TRAIN, {"looped": [LOOPED]}, n_bootstrap=10, n_permutations=10).candidates["looped"] \
        .documents[0]


def cost(critic, previous, length, offset):
    """-log of a copy's factors: entering it, its duration and its offset (the prior's tables)."""
    p = critic.prior()
    d, o = torch.tensor([length]), torch.tensor([offset])
    return -float(p.log_transition[previous, COPY] + p.log_duration(torch.tensor([COPY]), d) + p.log_offset(d, o))


def test_reasons_name_the_loop_and_the_distant_copy_with_their_sources(critic, result):
    assert result.extras["copies"] == [[4, 6, 1], [11, 1, 0]]
    loop, distant = cost(critic, NEW, 6, 3), cost(critic, NEW, 1, 11)
    lines = critic.explain(result, LOOPED)
    copies = [f"sentences 5-10 (section 'DESCRIPTION') repeat sentences 2-4 (section 'DESCRIPTION') 2 times in a "
              f'row: "It reads. It writes. It stops." (-log P = {loop:.1f})',
              f"sentence 12 (section 'SEE ALSO') repeats sentence 1 (section 'NAME'): \"Tool does a thing.\" "
              f"(-log P = {distant:.1f})"]
    assert lines == ["7 of 12 sentences (58%) repeat earlier text in 2 copies; 6 (50%) in loops, right after what "
                     "they repeat"] + sorted(copies, key=lambda line: -float(line.rsplit("= ", 1)[1][:-1]))
    # each copy's factor is its share of T(x): with the NEW segments' and END's they sum to it
    p = critic.prior()
    new = [-float(p.log_duration(torch.tensor([NEW]), torch.tensor([n]))) for n in (4, 1)]
    enter_new = -math.log(float(p.log_transition[COPY, NEW].exp()))
    end = -float(p.log_transition[COPY, 2])
    assert loop + distant + new[0] + new[1] + enter_new + end == pytest.approx(result.latent_nll, rel=1e-12)


def test_without_the_document_the_reasons_keep_the_spans(critic, result):
    lines = critic.explain(result)
    assert "sentences 5-10 repeat sentences 2-4 2 times in a row (-log P = " in " ".join(lines)
    assert "sentence 12 repeats sentence 1 (-log P = " in " ".join(lines)


def test_another_document_is_refused(critic, result):
    other = Document("looped", (Section("NAME", "Only one sentence."),))
    with pytest.raises(ValueError, match="has 1 sentences, its result 12"):
        critic.explain(result, other)


def test_a_document_without_copies_says_so_and_many_copies_give_five_lines(critic):
    plain = Document("plain", (Section("NAME", "One thing. Another thing."),))
    many = Document("many", (Section("X", " ".join(f"S{i} is. Filler {i} here. S{i} is." for i in range(8))),))
    result = criticize(critic, TRAIN, {"c": [plain, many]}, n_bootstrap=10, n_permutations=10).candidates["c"]
    lines = {d.id: critic.explain(d, doc) for d, doc in zip(result.documents, [plain, many])}
    assert lines["plain"] == [f"no sentence repeats earlier text: 2 sentences of new text (-log P = "
                              f"{result.documents[0].latent_nll:.1f})"]
    assert len(lines["many"]) == 5
    assert lines["many"][0].startswith("8 of 24 sentences (33%) repeat earlier text in 8 copies")


def test_word_units_name_words():
    critic = RepetitionCritic(unit="token", min_copy=3).fit(TRAIN)
    scored = criticize(critic, TRAIN, {"looped": [LOOPED]}, n_bootstrap=10, n_permutations=10).candidates["looped"]
    lines = critic.explain(scored.documents[0], LOOPED)
    assert lines[0].startswith("16 of 28 words (57%) repeat earlier text in 2 copies; 12 (43%) in loops")
    assert any(line.startswith("words 11-22 (section 'DESCRIPTION') repeat words 5-10 (section 'DESCRIPTION') 2 "
                               'times in a row: "It reads. It writes. It stops"') for line in lines)
