"""The repetition critic in the HTML report: a document's copies marked in place (the marked text is exactly the
copied units'), everything escaped, each set's copied and looped shares, and `critic report` end to end."""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser

import pytest

from critic import criticize
from critic.cli import main
from critic.corrupt import corrupt_all
from critic.document import Document, Section, write_jsonl
from critic.views import document_view, set_statistics
from critics.repetition import RepetitionCritic
from critics.repetition.units import document_units
from tests.critics.view_html import rows

TRAIN = [Document(f"d{i}", (Section("NAME", f"Tool {i} does things. It is good."),
                            Section("DESCRIPTION", "It reads. It writes. It reads. It stops."))) for i in range(12)]
LOOPED = Document("looped", (
    Section("NAME", "Tool <b>does</b> a thing & more."),
    Section("DESCRIPTION", "It reads. It writes. It stops. It reads. It writes. It stops. It reads. Done."),
    Section("<script>alert(1)</script>", "Tool <b>does</b> a thing & more.")))


class Marks(HTMLParser):
    """``(class, data-copy, data-units, text)`` of every ``<mark>`` and the text of every ``repetition-text``
    paragraph, unescaped."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.marks, self.paragraphs, self._mark, self._paragraph = [], [], None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "mark":
            self._mark = [attrs["class"], attrs["data-copy"], attrs["data-units"], ""]
        elif tag == "p" and attrs.get("class") == "repetition-text":
            self._paragraph = []

    def handle_endtag(self, tag):
        if tag == "mark":
            self.marks.append(tuple(self._mark))
            self._mark = None
        elif tag == "p" and self._paragraph is not None:
            self.paragraphs.append("".join(self._paragraph))
            self._paragraph = None

    def handle_data(self, data):
        if self._mark is not None:
            self._mark[3] += data
        if self._paragraph is not None:
            self._paragraph.append(data)


def read(fragment: str) -> Marks:
    reader = Marks()
    reader.feed(fragment)
    return reader


@pytest.fixture(scope="module")
def critic():
    return RepetitionCritic(unit="sentence").fit(TRAIN)


def test_the_marked_text_is_the_copied_units_and_nothing_is_lost(critic):
    view = document_view(critic, LOOPED, None)
    found = read(view)
    # by hand: sentence 1 is NAME's, 2-9 DESCRIPTION's, 10 the third section's; 5-8 repeat 2-4 (a loop of period
    # 3), 10 repeats 1
    assert found.marks == [
        ("loop", "1", "5-8", "It reads. It writes. It stops. It reads."),
        ("copy", "2", "10", "Tool <b>does</b> a thing & more."),
    ]
    assert found.paragraphs == [s.text for s in LOOPED.sections]  # the text in place, escaped, nothing dropped
    table = rows(view, "repetition-copies")
    assert [(r["attrs"]["data-start"], r["attrs"]["data-length"], r["attrs"]["data-source"]) for r in table] == [
        ("4", "4", "1"), ("9", "1", "0")]
    assert [r["cells"][1:4] for r in table] == [["5-8", "2-4", "1.33333"], ["10", "1", ""]]
    costs = critic.copy_costs([(4, 4, 1), (9, 1, 0)], 10)
    assert [float(r["cells"][4]) for r in table] == pytest.approx(costs, abs=5e-3)


def test_marks_follow_a_copy_across_sections_in_word_units():
    critic = RepetitionCritic(unit="token", min_copy=3).fit(TRAIN)
    doc = Document("x", (Section("a", "one two three four"), Section("b", "five six"),
                         Section("c", "seven one two three four five six")))
    units = document_units(doc, "token")
    copies = critic.factorize(units).copies
    assert copies == [(7, 6, 0)]  # "one two three four" of section a, then "five six" of section b
    assert read(document_view(critic, doc, None)).marks == [("copy", "1", "8-13", "one two three four five six")]


def test_everything_from_the_document_is_escaped(critic):
    view = document_view(critic, LOOPED, None)
    assert "<script>" not in view and "<b>" not in view
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in view
    assert "Tool &lt;b&gt;does&lt;/b&gt; a thing &amp; more." in view
    assert "cannot read this document: document has no sentences" in html.unescape(
        document_view(critic, Document("e", (Section("<i>", "  "),)), None))


def test_set_statistics_are_each_set_s_pooled_shares(critic):
    other = [Document("plain", (Section("A", "Nothing repeats here. At all."),))]
    result = criticize(critic, TRAIN, {"looped": [LOOPED] + other}, n_bootstrap=10, n_permutations=10)
    stats = set_statistics(critic, result, {})
    # by hand: TRAIN pages repeat "It reads." once in 6 sentences; LOOPED 5 of 10 (4 in the loop), plain 0 of 2
    assert stats["copied_share"] == ({"reference": pytest.approx(1 / 6), "looped": pytest.approx(5 / 12)}, {})
    assert stats["looped_share"] == ({"reference": 0.0, "looped": pytest.approx(4 / 12)}, {})


def test_critic_report_flags_looped_pages_and_shows_the_view(system_manpages, tmp_path):
    train = write_jsonl(system_manpages["train"][:300], tmp_path / "train.jsonl")
    test = system_manpages["test"]
    reference = write_jsonl(test[:60], tmp_path / "reference.jsonl")
    looped = corrupt_all(test[60:80], "looped-paragraph", seed=0)
    mixed = write_jsonl(test[80:] + looped, tmp_path / "mixed.jsonl")
    assert main(["fit", "repetition", "--train", str(train), "--out", str(tmp_path / "c")]) == 0
    assert main(["report", "--critic", str(tmp_path / "c"), "--reference", str(reference), "--candidate",
                 f"mixed={mixed}", "--n-bootstrap", "20", "--out", str(tmp_path / "r")]) == 0
    saved = json.loads((tmp_path / "r" / "results.json").read_text())
    documents = [json.loads(line) for line in (tmp_path / "r" / "documents.jsonl").read_text().splitlines()]
    flagged = {d["id"] for d in documents if d["set"] == "mixed" and d["q_value"] <= 0.1}
    assert len(flagged & {d.id for d in looped}) >= 0.8 * len(looped)
    assert len(flagged - {d.id for d in looped}) <= 0.2 * len(flagged)
    pages = [p.read_text() for p in (tmp_path / "r" / "documents").glob("*.html")]
    assert any('<mark class="loop"' in page and "in loops, right after what they repeat" in page for page in pages)
    shares = saved["critics"]["c"]
    assert shares["candidates"]["mixed"]["looped_share"] > shares["reference"]["looped_share"] >= 0
