"""Corruptions that target the repetition and entity-grid critics: loops and sentence shuffles, checked against
independent rebuilds of what each should write."""

import re

import pytest

from critic.corrupt import CORRUPTIONS, corrupt_all, loop_paragraph, loop_tail, shuffle_document, shuffle_sentences
from critic.document import Document, Section
from critic.sentences import sentence_spans, sentences

DOC = Document("d", (Section("NAME", "Ls lists directory contents."),
                     Section("DESCRIPTION", "List information about the FILEs. Sort entries alphabetically.\n\n"
                                            "Mandatory arguments apply. Long options too.\n"),
                     Section("AUTHOR", "Written by R. Stallman. Then by others. Many others. Thanks all.")))


def _paragraphs(text):
    return [p.strip() for p in re.split(r"\n[ \t]*\n", text) if p.strip()]


@pytest.mark.parametrize("seed", range(6))
def test_a_looped_paragraph_is_written_again_right_after_itself(seed):
    bad = loop_paragraph(DOC, seed, times=2)
    info = bad.metadata["corruption"]
    k, text = info["section"], DOC.sections[info["section"]].text
    paragraph = text[info["start"]:info["end"]]
    assert paragraph in _paragraphs(text)
    assert _paragraphs(bad.sections[k].text) == [p for q in _paragraphs(text) for p in [q] * (3 if q == paragraph
                                                                                               else 1)]
    assert [s for i, s in enumerate(bad.sections) if i != k] == [s for i, s in enumerate(DOC.sections) if i != k]
    assert bad.id == "d#looped-paragraph" and info["times"] == 2


def test_a_looped_tail_repeats_the_last_sentences():
    bad = loop_tail(DOC, sentences=2, times=3)
    old = sentences(DOC.sections[2].text)
    assert sentences(bad.sections[2].text) == old + old[-2:] * 3
    assert bad.sections[:2] == DOC.sections[:2]
    short = Document("s", (Section(None, "Only one."), Section(None, "")))
    assert sentences(loop_tail(short, sentences=3, times=1).sections[0].text) == ["Only one.", "Only one."]
    assert loop_tail(Document("e", (Section(None, " "),))) is None


def _pieces(doc):
    return [sec.text[s:e] for sec in doc.sections for s, e in sentence_spans(sec.text)]


@pytest.mark.parametrize("seed", range(8))
def test_shuffled_sentences_stay_in_their_section_in_the_recorded_order(seed):
    bad = shuffle_sentences(DOC, seed)
    orders = bad.metadata["corruption"]["orders"]
    assert set(orders) == {"1", "2"}  # the one-sentence NAME section is kept
    for k, sec in enumerate(DOC.sections):
        old = sentences(sec.text)
        new = sentences(bad.sections[k].text)
        expected = [old[i] for i in orders[str(k)]] if str(k) in orders else old
        assert new == expected and sorted(new) == sorted(old)
        if str(k) in orders:
            assert new != old
    assert bad.sections[1].text.count("\n\n") == 1  # the text between sentences stays where it was


@pytest.mark.parametrize("seed", range(8))
def test_a_shuffled_document_keeps_each_section_s_number_of_sentences(seed):
    bad = shuffle_document(DOC, seed)
    order = bad.metadata["corruption"]["order"]
    old = _pieces(DOC)
    assert _pieces(bad) == [old[i] for i in order] and order != list(range(len(old)))
    assert [len(sentence_spans(s.text)) for s in bad.sections] == [len(sentence_spans(s.text)) for s in DOC.sections]


def test_the_same_seed_gives_the_same_corruption_whatever_else_is_in_the_set():
    other = Document("o", (Section(None, "A first one. A second one. A third one."),))
    for name in ("looped-paragraph", "shuffled-sentences", "shuffled-document"):
        alone = corrupt_all([DOC], name, seed=3)
        among = corrupt_all([other, DOC], name, seed=3)
        assert alone[0].to_dict() == among[1].to_dict()
    assert shuffle_sentences(DOC, 1).to_dict() != shuffle_sentences(DOC, 2).to_dict() or \
        shuffle_sentences(DOC, 1).to_dict() != shuffle_sentences(DOC, 3).to_dict()


def test_documents_that_cannot_carry_a_shuffle_are_left_out():
    one = Document("one", (Section(None, "Just one sentence here."),))
    assert shuffle_sentences(one) is None and shuffle_document(one) is None
    assert [d.id for d in corrupt_all([one, DOC], "shuffled-document")] == ["d#shuffled-document"]
    assert set(CORRUPTIONS) >= {"looped-paragraph", "looped-tail", "shuffled-sentences", "shuffled-document"}
