from critic.corpora.manpages import build_manpages, parse_roff, split_of
from critic.document import read_jsonl

ROFF = r""".\" Copyright notice lines are comments
.TH demo 7 2023-01-01 "Linux man-pages"
.SH NAME
demo \- show \fBbold\fP and \fIitalic\fR text
.SH "RETURN VALUE"
On success,
.B zero
is returned.
.IP \(bu 2
item one
.SH SEE ALSO
.BR open (2),
"""


def test_parse_roff_sections_and_text():
    doc = parse_roff(ROFF, page="demo.7")
    assert doc.id == "demo.7" and doc.title == "demo.7"
    assert doc.section_titles == ["NAME", "RETURN VALUE", "SEE ALSO"]
    assert doc.sections[0].text == "demo - show bold and italic text"
    assert doc.sections[1].text == "On success, zero is returned. * item one"
    assert doc.sections[2].text == "open(2),"


def test_alias_pages_are_not_documents():
    assert parse_roff(".so man3/other.3\n", page="alias.3") is None


def test_build_fixture_corpus_counts_everything(fixture_manpage_root, tmp_path):
    report = build_manpages(tmp_path, root=fixture_manpage_root, install=False)
    assert report.counts["files"] == 31
    assert report.excluded == {"queue.3": "alias (.so redirection to another page)"}
    splits = {s: read_jsonl(tmp_path / f"{s}.jsonl") for s in ("train", "valid", "test")}
    assert sum(len(v) for v in splits.values()) == 30
    for name, docs in splits.items():
        assert all(split_of(d.id) == name for d in docs)
    open2 = next(d for v in splits.values() for d in v if d.id == "open.2")
    assert open2.section_titles[:3] == ["NAME", "LIBRARY", "SYNOPSIS"]
    assert "open and possibly create a file" in open2.sections[0].text
    # deterministic: a second build writes identical files
    build_manpages(tmp_path / "again", root=fixture_manpage_root, install=False)
    for s in ("train", "valid", "test"):
        assert (tmp_path / s).with_suffix(".jsonl").read_bytes() == (tmp_path / "again" / f"{s}.jsonl").read_bytes()


def test_split_fractions_on_many_ids():
    names = [f"page{i}.3" for i in range(20_000)]
    share = {s: sum(split_of(n) == s for n in names) / len(names) for s in ("train", "valid", "test")}
    assert abs(share["test"] - 0.1) < 0.01 and abs(share["valid"] - 0.1) < 0.01
