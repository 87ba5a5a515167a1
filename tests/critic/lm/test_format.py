"""DocumentFormat: render/parse round trips, parse failures by reason, word counts, persistence."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from critic.document import Document, DocumentError, Section
from critic.lm.format import PARSE_REASONS, DocumentFormat, GenerationParseError

W, WO = DocumentFormat(with_titles=True), DocumentFormat(with_titles=False)

DOC = Document("ls.1", (Section("NAME", "ls - list directory contents"),
                        Section("DESCRIPTION", "List  information\nabout the FILEs.\n\n  Indented.\n"),
                        Section("SEE ALSO", "dir(1), vdir(1)")), title="ls")


def test_render_with_titles_is_the_documented_text():
    assert W.render(DOC) == ("NAME\nls - list directory contents\n<|section|>\nDESCRIPTION\nList  information\n"
                             "about the FILEs.\n\n  Indented.\n\n<|section|>\nSEE ALSO\ndir(1), vdir(1)<|endofdoc|>")
    assert WO.render(DOC) == ("ls - list directory contents\n<|section|>\nList  information\nabout the FILEs.\n\n"
                              "  Indented.\n\n<|section|>\ndir(1), vdir(1)<|endofdoc|>")


@pytest.mark.parametrize("fmt", [W, WO])
def test_round_trip_keeps_texts_exactly_and_titles_in_metadata(fmt):
    doc = fmt.parse(fmt.render(DOC), doc_id="gen-000001", metadata={"index": 1})
    assert [s.text for s in doc.sections] == [s.text for s in DOC.sections]
    assert all(s.title is None for s in doc.sections)
    assert doc.id == "gen-000001" and doc.metadata["index"] == 1
    if fmt.with_titles:
        assert doc.metadata["generated_titles"] == ["NAME", "DESCRIPTION", "SEE ALSO"]
    else:
        assert "generated_titles" not in doc.metadata


def test_round_trip_unicode_and_edge_newlines():
    doc = Document("u", (Section("Überblick ✓", "\nLeading newline, ünïcödé, 漢字, emoji 🎉\n"),
                         Section("Второй", "tab\there\r\nand CRLF\n\n"), Section("x", "  ")))
    for fmt in (W, WO):
        text = fmt.render(doc.replace_sections(doc.sections[:2]))
        back = fmt.parse(text, doc_id="g")
        assert [s.text for s in back.sections] == [s.text for s in doc.sections[:2]]
    assert W.parse(W.render(doc.replace_sections(doc.sections[:2])), doc_id="g").metadata["generated_titles"] == \
        ["Überblick ✓", "Второй"]


_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30).filter(
    lambda t: t.strip() and "<|" not in t)
_title = _text.filter(lambda t: "\n" not in t and "\r" not in t)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_title, _text), min_size=1, max_size=4))
def test_round_trip_property(sections):
    doc = Document("p", tuple(Section(t, x) for t, x in sections))
    for fmt in (W, WO):
        back = fmt.parse(fmt.render(doc), doc_id="p")
        assert [s.text for s in back.sections] == [x for _, x in sections]
    assert W.parse(W.render(doc), doc_id="p").metadata["generated_titles"] == [t for t, _ in sections]


@pytest.mark.parametrize("fmt, text, reason", [
    (W, "NAME\nls - list", "no end-of-document"),                      # cut by the token budget
    (W, "NAME\nls<|endofdoc|> trailing", "text after end-of-document"),
    (W, "<|endofdoc|>", "empty document"),
    (W, " \n <|endofdoc|>", "empty document"),
    (W, "NAME\nls\n<|section|>\nSYNOPSIS\n \n<|endofdoc|>", "empty section"),
    (WO, "ls\n<|section|>\n<|section|>\nmore<|endofdoc|>", "empty section"),
    (W, "NAME only, no newline<|endofdoc|>", "missing title line"),
    (W, "NAME\nls\n<|section|>\n\ntext after a blank title<|endofdoc|>", "missing title line"),
])
def test_parse_failures_have_reasons(fmt, text, reason):
    with pytest.raises(GenerationParseError) as info:
        fmt.parse(text, doc_id="g")
    assert info.value.reason == reason and reason in PARSE_REASONS
    assert isinstance(info.value, ValueError)


def test_parse_accepts_markers_without_newlines():
    doc = WO.parse("first<|section|>second<|endofdoc|>", doc_id="g")
    assert [s.text for s in doc.sections] == ["first", "second"]


@pytest.mark.parametrize("doc, message", [
    (Document("a", (Section(None, "text"),)), "no title"),
    (Document("a", (Section("two\nlines", "text"),)), "spans lines"),
    (Document("a", (Section("T", "has <|endofdoc|> inside"),)), "special token"),
    (Document("a", (Section("T<|section|>", "x"),)), "special token"),
    (Document("a", ()), "no sections"),
])
def test_render_refuses_what_cannot_be_parsed_back(doc, message):
    with pytest.raises(DocumentError, match=message):
        W.render(doc)


def test_without_titles_ignores_titles_and_accepts_none():
    assert WO.render(Document("a", (Section(None, "x"), Section("T", "y")))) == "x\n<|section|>\ny<|endofdoc|>"


def test_count_words_counts_markers_as_words():
    assert WO.count_words("a b<|section|>c\n\nd<|endofdoc|>") == 6
    # NAME | ls - list directory contents | marker | DESCRIPTION | List information about the FILEs. Indented.
    # | marker | SEE ALSO | dir(1), vdir(1) | end
    assert W.count_words(W.render(DOC)) == 1 + 5 + 1 + 1 + 6 + 1 + 2 + 2 + 1


def test_dict_round_trip_and_bad_dicts():
    for fmt in (W, WO, DocumentFormat(True, "<sec>", "<eod>")):
        assert DocumentFormat.from_dict(fmt.to_dict()) == fmt
    assert W.to_dict()["format"] == "with-titles" and DocumentFormat.named("without-titles") == WO
    assert DocumentFormat.named("with-titles", end_of_document="<|endoftext|>") == \
        DocumentFormat(True, end_of_document="<|endoftext|>")
    with pytest.raises(ValueError, match="unknown key"):
        DocumentFormat.from_dict({"with_titles": True, "marker": "x"}, where="f.json")
    with pytest.raises(ValueError, match="f.json: 'format'"):
        DocumentFormat.from_dict({"with_titles": True, "format": "without-titles"}, where="f.json")
    with pytest.raises(ValueError, match="with_titles"):
        DocumentFormat.from_dict({}, where="f.json")
    with pytest.raises(ValueError, match="must not contain"):
        DocumentFormat(True, "<x>", "<x>")
    with pytest.raises(ValueError, match="named|format must be"):
        DocumentFormat.named("titles")


def test_a_start_token_is_kept_out_of_the_text_and_saved_with_the_format():
    fmt = DocumentFormat(False, end_of_document="<|endoftext|>", start_of_document="<|im_start|>")
    assert fmt.render(DOC) == WO.render(DOC).replace(WO.end_of_document, "<|endoftext|>")   # not in the text
    assert fmt.prompt_tokens == ("<|endoftext|>", "<|im_start|>") and WO.prompt_tokens == (WO.end_of_document,)
    assert "<|im_start|>" in fmt.special_tokens and len(WO.special_tokens) == 2
    assert DocumentFormat.from_dict(fmt.to_dict()) == fmt
    assert DocumentFormat.from_dict({"with_titles": False}).start_of_document is None     # folders saved before
    with pytest.raises(DocumentError, match=re.escape("special token '<|im_start|>'")):
        fmt.render(Document("d", (Section(None, "a <|im_start|> b"),)))
    for bad, message in (("", "start_of_document must be a non-empty string"),
                         ("<|endoftext|>", "end_of_document '<|endoftext|>' and start_of_document")):
        with pytest.raises(ValueError, match=re.escape(message)):
            DocumentFormat(False, end_of_document="<|endoftext|>", start_of_document=bad)
