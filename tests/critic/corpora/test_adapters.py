import bz2
import json
from collections import Counter

import pytest

from critic.corpora.cohan import iter_cohan
from critic.corpora.wikipedia import iter_wikipedia, wikitext_to_sections
from critic.document import DocumentError


def test_cohan_lines_become_sectioned_documents(tmp_path):
    path = tmp_path / "val.txt"
    rows = [
        {"article_id": "PMC1", "abstract_text": ["<S> we study x . </S>"], "article_text": [],
         "section_names": ["introduction", "methods"], "sections": [["a b .", "c d ."], ["e f ."]]},
        {"article_id": "PMC2", "abstract_text": [], "section_names": ["results"], "sections": [["g ."]]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    docs = list(iter_cohan(path))
    assert [d.id for d in docs] == ["PMC1", "PMC2"]
    assert docs[0].section_titles == ["introduction", "methods"]
    assert docs[0].sections[0].text == "a b . c d ."
    assert docs[0].metadata["abstract"] == "we study x ."


def test_cohan_mismatch_names_line_and_article(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text(json.dumps({"article_id": "A9", "section_names": ["x", "y"], "sections": [["s"]]}) + "\n")
    with pytest.raises(DocumentError, match=r"bad.txt:1: article 'A9' has 2 section names but 1 sections"):
        list(iter_cohan(path))


WIKITEXT = """{{Infobox person|name=Ada}}
'''Ada Example''' (born 1900) was a [[chemist]].<ref>A source.</ref>

== Early life ==
Ada grew up in [[Paris|the capital]].
[[File:Ada.jpg|thumb|Ada as a child]]

=== Education ===
She studied chemistry.

== Career ==
She worked on ''catalysis''.{{citation needed}}

== References ==
{{reflist}}
"""


def test_wikitext_sections_with_intro_as_abstract():
    sections = wikitext_to_sections(WIKITEXT)
    assert [s.title for s in sections] == ["abstract", "Early life", "Career"]
    assert sections[0].text == "Ada Example (born 1900) was a chemist."
    assert sections[1].text == "Ada grew up in the capital. Education She studied chemistry."
    assert sections[2].text == "She worked on catalysis."


def _page(title, text, ns=0, redirect=False):
    red = f'<redirect title="{title}x"/>' if redirect else ""
    return (f"<page><title>{title}</title><ns>{ns}</ns>{red}<revision><text>{text}</text></revision></page>")


def test_dump_skips_are_counted(tmp_path):
    from xml.sax.saxutils import escape

    pages = [_page("Ada Example", escape(WIKITEXT)), _page("Ada", "#REDIRECT [[Ada Example]]", redirect=True),
             _page("Mercury", escape("'''Mercury''' may be:\n{{disambiguation}}")), _page("1848", "A year."),
             _page("Talk:Ada", "chat", ns=1)]
    xml = "<mediawiki>" + "".join(pages) + "</mediawiki>"
    path = tmp_path / "dump.xml.bz2"
    path.write_bytes(bz2.compress(xml.encode()))
    report = Counter()
    docs = list(iter_wikipedia(path, report))
    assert [d.id for d in docs] == ["Ada Example"]
    assert report == {"kept": 1, "redirect": 1, "disambiguation": 1, "article about a year": 1,
                      "not an article (namespace)": 1}


def test_cli_convert_cohan(tmp_path, capsys):
    from critic.cli import main
    from critic.document import read_jsonl

    src = tmp_path / "test.txt"
    src.write_text(json.dumps({"article_id": "X1", "section_names": ["intro"], "sections": [["hello ."]]}) + "\n")
    assert main(["data", "convert", "cohan", str(src), "--out", str(tmp_path / "x.jsonl")]) == 0
    assert read_jsonl(tmp_path / "x.jsonl")[0].sections[0].text == "hello ."


def test_unique_ids_rename_repeats_deterministically():
    from critic.document import unique_ids
    from critic.document import Document, Section

    docs = [Document(i, (Section("t", "x"),)) for i in ("a", "b", "a", "a#2", "a")]
    out, renamed = unique_ids(docs)
    assert [d.id for d in out] == ["a", "b", "a#3", "a#2", "a#4"]  # a#2 was taken by a document of its own
    assert renamed == {"a#3": "a", "a#4": "a"}
    assert out[2].metadata == {"original_id": "a"} and docs[2].metadata == {}
    assert unique_ids(docs) == (out, renamed)


def test_cohan_never_splits_a_string_into_characters(tmp_path):
    path = tmp_path / "val.txt"
    path.write_text(json.dumps({"article_id": "A", "section_names": ["intro"], "sections": ["one sentence ."]}) + "\n")
    with pytest.raises(DocumentError, match=r"val.txt:1: article 'A': section 0 \('intro'\) must be a list"):
        list(iter_cohan(path))


def test_dump_pages_without_title_are_counted(tmp_path):
    path = tmp_path / "dump.xml"
    path.write_text("<mediawiki>" + _page("", "Some text.") + _page("Ada", "Ada was a chemist.") + "</mediawiki>")
    report = Counter()
    assert [d.id for d in iter_wikipedia(path, report)] == ["Ada"]
    assert report == {"kept": 1, "no title": 1}


def test_damaged_dump_names_file_and_line(tmp_path):
    path = tmp_path / "dump.xml"
    path.write_text("<mediawiki>\n" + _page("Ada", "x") + "\n<page>\n</mediawiki>\n")
    with pytest.raises(DocumentError, match=r"dump.xml:4: not a well-formed XML dump"):
        list(iter_wikipedia(path))
