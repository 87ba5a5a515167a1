"""The entity grid read from spaCy's parse: a hand-written text gives the hand-built grid, sentences are the rule
splitter's, each sentence's roles depend on its text alone, and spaCy is imported only to parse."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from critic.corrupt import shuffle_document
from critic.sentences import sentences
from critics.entitygrid import (DEFAULT_SPACY, EntityGrid, SentenceParser, build_grid, document_sentences,
                                sentence_parser)
from critics.entitygrid.grid import ROLE_SYMBOLS

from .texts import CHAINS, ENTITIES, SECTIONS, document


def parse(text: str) -> list[tuple[str, str, str, str]]:
    """``(token, dependency, tag, head)`` of each token of one sentence."""
    return [(t.text, t.dep_, t.pos_, t.head.text) for t in sentence_parser(DEFAULT_SPACY).nlp(text)]


def test_the_parses_the_hand_built_grid_relies_on():
    """The grid below is built by hand from these parses: assert them, so that a new model version shows here."""
    passive = parse("The module was loaded by the kernel.")
    assert (passive[1], passive[6]) == (("module", "nsubjpass", "NOUN", "loaded"), ("kernel", "pobj", "NOUN", "by"))
    justice = parse("The Justice Department sued the company.")
    assert justice[1:3] == [("Justice", "compound", "PROPN", "Department"), ("Department", "nsubj", "PROPN", "sued")]
    john = parse("John and Mary saw the dog and the cat.")
    assert [t for t in john if t[2] in ("NOUN", "PROPN")] == [
        ("John", "nsubj", "PROPN", "saw"), ("Mary", "conj", "PROPN", "John"), ("dog", "dobj", "NOUN", "saw"),
        ("cat", "conj", "NOUN", "dog")]
    assert parse("The cat saw the dog of the cat.")[7] == ("cat", "pobj", "NOUN", "of")
    assert parse("It frees memory for the processes.")[0] == ("It", "nsubj", "PRON", "frees")


def test_a_hand_written_text_gives_the_hand_built_grid():
    (grid,) = SentenceParser(DEFAULT_SPACY).grids([document("d", *SECTIONS)])
    assert grid.entities == ENTITIES
    assert [grid.chain(e) for e in range(len(ENTITIES))] == list(CHAINS)
    assert grid.roles.dtype == np.int8 and grid.sentences == 6
    assert grid.mentions.tolist() == [sum(r != "-" for r in chain) for chain in CHAINS]


def test_sentences_are_the_rule_splitter_s_in_section_order():
    doc = document("d", SECTIONS[0], "", SECTIONS[1])
    assert document_sentences(doc) == sentences(SECTIONS[0]) + sentences(SECTIONS[1])
    assert document_sentences(document("e", " ", "")) == []


def test_a_shuffled_document_s_grid_is_the_original_s_with_columns_permuted():
    """Each rule-split sentence is parsed alone, so shuffling sentences permutes the grid's columns."""
    doc = document("d", " ".join(SECTIONS))
    shuffled = shuffle_document(doc, seed=3)
    order = shuffled.metadata["corruption"]["order"]
    original, moved = SentenceParser(DEFAULT_SPACY).grids([doc, shuffled])
    for e, name in enumerate(original.entities):
        assert moved.chain(moved.entities.index(name)) == "".join(original.chain(e)[i] for i in order)
    assert sorted(moved.entities) == sorted(original.entities)


def test_roles_do_not_depend_on_what_else_is_parsed(manpages):
    """Alone, in one batch, in reverse order, or found in the memo: the same grids (spaCy parses each sentence on its
    own; a parser's memo only saves the work)."""
    docs = manpages["test"] + [document("d", *SECTIONS)]
    together = SentenceParser(DEFAULT_SPACY).grids(docs)
    alone = [SentenceParser(DEFAULT_SPACY, batch_size=7).grids([d])[0] for d in docs]
    reverse = SentenceParser(DEFAULT_SPACY, batch_size=3).grids(docs[::-1])[::-1]
    shared = sentence_parser(DEFAULT_SPACY)
    shared.grids(docs[:2])
    again = shared.grids(docs)
    for found in (alone, reverse, again):
        assert found == together
    assert sum(len(g.entities) for g in together) > 100


def test_build_grid_keeps_first_mention_order_and_empty_sentences():
    grid = build_grid([(("b", 1), ("a", 3)), (), (("a", 2),)])
    assert grid == EntityGrid(("b", "a"), np.array([[1, 0, 0], [3, 0, 2]], dtype=np.int8))
    assert grid != EntityGrid(("a", "b"), grid.roles) and grid != EntityGrid(grid.entities, grid.roles[:, :2])
    assert [grid.chain(e) for e in range(2)] == ["X--", "S-O"] and ROLE_SYMBOLS == "-XOS"
    assert build_grid([(), ()]).roles.shape == (0, 2)


def test_importing_the_critic_imports_no_spacy():
    code = ("import json, sys\nimport critics.entitygrid\nfrom critics.entitygrid import EntityGridCritic\n"
            "EntityGridCritic().check_params()\nprint(json.dumps('spacy' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) is False
