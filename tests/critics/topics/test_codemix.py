"""Constructed code-mixed documents: their text, ids and recorded answers."""

from __future__ import annotations

import re

import pytest

from critic.document import Document, Section
from critics.topics.codemix import KINDS, code_mix, code_mixed_set, split_sentences


def doc(id: str, text: str, language: str) -> Document:
    return Document(id=id, sections=(Section("abstract", text),), title=id, metadata={"language": language})


EN = doc("en1", "The cat sat. It was on the mat! Was it happy? Nobody knows.", "en")
ES = doc("es1", "El gato duerme. La casa es grande. Fin.", "es")


def test_split_sentences():
    assert split_sentences(EN.text) == ["The cat sat.", "It was on the mat!", "Was it happy?", "Nobody knows."]
    assert split_sentences("  one sentence without end ") == ["one sentence without end"]
    assert split_sentences("Wait… what? 3.5 is a number.") == ["Wait…", "what?", "3.5 is a number."]
    assert split_sentences("") == []


def test_sentence_runs_alternate_until_one_document_ends():
    mixed = code_mix(EN, ES, "sentences")
    assert mixed.id == "en1+es1#sentences"
    assert mixed.text == "The cat sat. El gato duerme. It was on the mat! La casa es grande. Was it happy? Fin."
    info = mixed.metadata["code_mix"]
    assert info["kind"] == "sentences" and info["sources"] == ["en1", "es1"] and info["languages"] == ["en", "es"]
    assert (info["run"], info["sentences_a"], info["sentences_b"]) == (1, 3, 3)
    assert (info["words_a"], info["words_b"]) == (11, 8) and info["fraction_b"] == pytest.approx(8 / 19)
    two = code_mix(EN, ES, "sentences", run=2)
    assert two.text == ("The cat sat. It was on the mat! El gato duerme. La casa es grande. "
                        "Was it happy? Nobody knows. Fin.")
    assert two.metadata["code_mix"]["fraction_b"] == pytest.approx(8 / 21)
    assert mixed.sections[0].title == "abstract" and mixed.title == "en1"


def test_word_mixing_replaces_words_in_order_at_the_rate():
    a = doc("a", " ".join(f"a{i}" for i in range(2000)), "en")
    b = doc("b", " ".join(f"b{i}" for i in range(50)), "fr")
    mixed = code_mix(a, b, "words", rate=0.3, seed=1)
    words = mixed.text.split()
    assert len(words) == 2000
    assert all(w == f"a{i}" or w.startswith("b") for i, w in enumerate(words))  # a's words stay in place
    from_b = [w for w in words if w.startswith("b")]
    assert from_b == [f"b{i % 50}" for i in range(len(from_b))]  # b's words in order, starting over
    info = mixed.metadata["code_mix"]
    assert info["replaced"] == len(from_b) == info["words_b"] and info["words"] == 2000
    assert info["fraction_b"] == pytest.approx(len(from_b) / 2000)
    assert abs(info["fraction_b"] - 0.3) < 0.04
    assert code_mix(a, b, "words", rate=0.3, seed=1).text == mixed.text  # seeded
    assert code_mix(a, b, "words", rate=0.3, seed=2).text != mixed.text
    short = code_mix(doc("s", "x y", "en"), b, "words", rate=0.01)  # at least one word replaced, one kept
    assert short.metadata["code_mix"]["replaced"] == 1


def test_fraction_counts_word_tokens_not_whitespace_pieces():
    a = doc("a", "l'été est là , oui", "fr")
    b = doc("b", "the end", "en")
    info = code_mix(a, b, "words", rate=0.5, seed=0).metadata["code_mix"]
    total = len(re.findall(r"\w+", code_mix(a, b, "words", rate=0.5, seed=0).text))
    assert info["words_a"] + info["words_b"] == total


def test_code_mixed_set_pairs_each_document_once_and_is_seeded():
    docs_a = [doc(f"a{i}", f"Sentence a{i} one. Sentence a{i} two.", "en") for i in range(10)]
    docs_b = [doc(f"b{i}", f"Frase b{i} uno. Frase b{i} dos.", "es") for i in range(8)]
    out = code_mixed_set(docs_a, docs_b, n=5, seed=3)
    assert len(out) == 10 and [d.metadata["code_mix"]["kind"] for d in out] == list(KINDS) * 5
    pairs = [tuple(d.metadata["code_mix"]["sources"]) for d in out[::2]]
    assert len({a for a, _ in pairs}) == 5 and len({b for _, b in pairs}) == 5
    assert all(d.id == f"{a}+{b}#{d.metadata['code_mix']['kind']}" for d, (a, b) in zip(out, [p for p in pairs
                                                                                          for _ in KINDS]))
    assert [d.text for d in code_mixed_set(docs_a, docs_b, n=5, seed=3)] == [d.text for d in out]
    assert [d.id for d in code_mixed_set(docs_a, docs_b, n=5, seed=4)] != [d.id for d in out]
    assert len(code_mixed_set(docs_a, docs_b, kinds=["words"])) == 8
    with pytest.raises(ValueError, match="n=9"):
        code_mixed_set(docs_a, docs_b, n=9)


@pytest.mark.parametrize("kwargs", [dict(kind="letters"), dict(kind="sentences", run=0),
                                    dict(kind="words", rate=0.0), dict(kind="words", rate=1.0)])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        code_mix(EN, ES, **kwargs)


def test_documents_that_cannot_be_mixed_are_refused():
    with pytest.raises(ValueError, match="empty"):
        code_mix(EN, doc("empty", "   ", "es"), "sentences")
    with pytest.raises(ValueError, match="one"):
        code_mix(doc("one", "word", "en"), ES, "words")
