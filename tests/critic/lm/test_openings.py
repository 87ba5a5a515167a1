"""Openings: which texts begin as documents, and the samples' share over the data's, counted by hand."""

from __future__ import annotations

import pytest

from critic.document import Document, Section
from critic.lm.format import DocumentFormat
from critic.lm.openings import begins_as_document, opening_shares


def test_begins_as_document():
    assert begins_as_document("Ada Lovelace was", None) and begins_as_document("1984 is", None)
    assert begins_as_document("\u00c9mile Zola", None) and begins_as_document('"Weird Al" Yankovic', None)
    assert not begins_as_document(" The", None) and not begins_as_document("- and", None)
    assert not begins_as_document("", None) and not begins_as_document("<|endoftext|>", None)
    titles = frozenset({"abstract"})
    assert begins_as_document("abstract\nAda", titles)
    assert not begins_as_document("abstract", titles) and not begins_as_document("Ada\nabstract", titles)


TRAIN = [Document("a", (Section("name", "ls - list"), Section("synopsis", "ls [OPTION]"))),
         Document("b", (Section("name", "Cat - join"),)),
         Document("c", (Section("description", "Echo writes"),))]


def test_opening_shares_with_titles_count_first_section_titles():
    texts = ["name\nls - x", "synopsis\nfoo", "description\nEcho", "name", " name\nx"]
    got = opening_shares(DocumentFormat(True), TRAIN, texts)
    # titles of first sections: {name, description}; every training document opens with one
    assert got["samples"] == [2, 5] and got["data"] == [3, 3]
    assert got["share"] == pytest.approx(0.4) and got["ratio"] == pytest.approx(0.4)


def test_opening_shares_without_titles_compare_with_the_data_s_own_share():
    texts = ["Ls x", "ls y", "\"Quoted\"", "3 items"]
    got = opening_shares(DocumentFormat(False), TRAIN, texts)
    assert got["data"] == [2, 3] and got["samples"] == [3, 4]             # 'ls - list' opens in lower case
    assert got["ratio"] == pytest.approx((3 / 4) / (2 / 3))
    assert opening_shares(DocumentFormat(False), TRAIN, [])["ratio"] is None


def test_an_opening_pattern_replaces_the_prose_rule_without_titles():
    from critic.lm.openings import MAN_NAME_START

    names = ["ls - list", "_exit, _Exit - terminate", "gcc-12 -- compile", "a,b - c", "ls -\n",
             "fscanf, fscanprintf, fscanobysf, ...", "sockaddr, sockaddr_in, socklen_t, in_addr"]  # opens; no dash yet
    others = [" ls - list", "ls: list", "The ls command", "two words - x", "ls\n<file_sep>", ", ls - x",
              "#include <x.h>"]
    assert all(begins_as_document(t, None, MAN_NAME_START) for t in names)
    assert not any(begins_as_document(t, None, MAN_NAME_START) for t in others)
    got = opening_shares(DocumentFormat(False), TRAIN, ["ls - x", "Ls x", "cat - y z"], MAN_NAME_START)
    assert got["data"] == [2, 3] and got["samples"] == [2, 3]         # 'Echo writes' is no NAME line
    assert got["ratio"] == pytest.approx(1.0)
    assert opening_shares(DocumentFormat(True), TRAIN, ["name\nx"], MAN_NAME_START)["samples"] == [1, 1]  # titles win
