"""The coherence study on the paper's corpora as ``critic data convert`` writes them (issue 41): toy inputs in the
converters' own source formats -- Cohan et al.'s arXiv and PubMed JSON lines (``train.txt``, ``val.txt``,
``test.txt``) and a bzip2-compressed MediaWiki XML dump -- converted with ``critic data convert``, then one
``critic run`` of the cpu preset at toy size studying all three.  The numbers are checked against the inputs
(documents and sections per split, the filter's removals), against an independent recomputation (the data's
Latent PPL from ``documents.jsonl``) and across a rerun (the files keyed by content)."""

from __future__ import annotations

import bz2
import contextlib
import io
import json
import math
import random
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from critic.config import ConfigError, check_config, read_toml
from critic.corpora.manpages import split_of
from critic.document import read_jsonl

CORPORA = ("arxiv", "pubmed", "wikipedia")
STAGES = ("data", "filtered", "critic", "tokenizer", "lm_w_title", "samples_w_title", "ppl_w_title",
          "lm_wo_title", "samples_wo_title", "ppl_wo_title", "report")
EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments" / "coherence"

# ------------------------------------------------------------------ toy sources in the converters' formats
WORDS = {  # a section type's own words (a TF-IDF posterior tells them apart) and words all share
    "introduction": "we study problem recent work motivate propose question prior approach".split(),
    "method": "model estimate parameter sample procedure algorithm define compute variable assume".split(),
    "result": "table figure show observe increase significant measure value compare improvement".split(),
    "discussion": "suggest explain limitation interpret implication finding consistent future".split(),
    "conclusion": "summary conclude contribution present demonstrate outlook overall final".split(),
    "background": "history earlier studies known review literature context established".split(),
    "appendix": "proof lemma derivation supplementary detail additional extended".split(),
    "reference": "journal vol pp press doi et al".split(),
}
SHARED = "the of and a in to is for with on".split()


def _sentence(rng: random.Random, kind: str, words: int) -> str:
    return " ".join(rng.choice(WORDS[kind] if rng.random() < 0.6 else SHARED) for _ in range(words))


def _section(rng: random.Random, kind: str, words: int | None = None) -> list[str]:
    """Sentences of about ``words`` words (Cohan's sections: a list of sentence strings)."""
    words = words or rng.randint(8, 16)
    out = []
    while words > 0:
        k = min(words, rng.randint(4, 8))
        out.append(_sentence(rng, kind, k))
        words -= k
    return out


ORDERS = [["introduction", "method", "result", "conclusion"], ["introduction", "method", "result", "discussion"],
          ["introduction", "background", "method", "result", "conclusion"], ["introduction", "result", "discussion"]]
PUBMED_TITLES = {"introduction": "1. Introduction", "method": "2. Materials and Methods", "result": "3. Results",
                 "discussion": "4. Discussion", "conclusion": "5. Conclusions", "background": "Background",
                 "appendix": "Appendix", "reference": "References"}
ARXIV_TITLES = {"introduction": "introduction", "method": "the model", "result": "numerical results",
                "discussion": "discussion", "conclusion": "conclusions", "background": "background",
                "appendix": "appendix", "reference": "references"}


def _cohan_article(rng: random.Random, article_id: str, kinds: list[str], titles: dict[str, str],
                   short: str | None = None) -> dict:
    sections = [_section(rng, k, 2 if k == short else None) for k in kinds]
    abstract = [f"<S> {s} </S>" for s in _section(rng, "introduction", 10)]
    return {"article_id": article_id, "article_text": [s for sec in sections for s in sec],
            "abstract_text": abstract, "section_names": [titles[k] for k in kinds], "sections": sections}


def _cohan_files(root: Path, name: str, titles: dict[str, str], seed: int) -> dict[str, list[dict]]:
    """``root/{train,val,test}.txt`` of 24 / 6 / 6 articles, and in train the articles the filters remove:
    ``<name>-two`` (2 sections), ``<name>-short`` (a 2-word section), ``<name>-rare`` (an appendix, once in
    train: under min_title_count = 2); ``<name>-refs`` keeps 4 sections once its references are dropped.  One
    test article has an appendix too (the title is counted on train)."""
    rng = random.Random(seed)
    splits = {}
    for split, n in (("train", 24), ("val", 6), ("test", 6)):
        articles = [_cohan_article(rng, f"{name}-{split}-{i}", ORDERS[i % len(ORDERS)], titles) for i in range(n)]
        splits[split] = articles
    splits["train"] += [
        _cohan_article(rng, f"{name}-two", ["introduction", "conclusion"], titles),
        _cohan_article(rng, f"{name}-short", ["introduction", "method", "result"], titles, short="method"),
        _cohan_article(rng, f"{name}-rare", ["introduction", "method", "appendix"], titles),
        _cohan_article(rng, f"{name}-refs", ["introduction", "method", "result", "conclusion", "reference"], titles),
    ]
    splits["test"].append(_cohan_article(rng, f"{name}-test-rare", ["introduction", "result", "appendix"], titles))
    root.mkdir(parents=True)
    for split, articles in splits.items():
        (root / f"{split}.txt").write_text("".join(json.dumps(a) + "\n" for a in articles))
    return splits


WIKI_TITLES = {"background": "Early life", "method": "Career", "result": "Personal life", "conclusion": "Legacy",
               "discussion": "Honours and awards"}
WIKI_ORDERS = [["background", "method", "result", "conclusion"], ["background", "method", "conclusion"],
               ["background", "method", "result"], ["method", "discussion"]]


def _wiki_page(title: str, text: str, ns: int = 0, page_id: int = 1, redirect: str | None = None) -> str:
    return (f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{ns}</ns>\n    <id>{page_id}</id>\n"
            + (f'    <redirect title="{escape(redirect)}" />\n' if redirect else "")
            + f"    <revision>\n      <id>{page_id + 1000}</id>\n      <model>wikitext</model>\n"
              f"      <format>text/x-wiki</format>\n"
              f'      <text bytes="{len(text.encode())}" xml:space="preserve">{escape(text)}</text>\n'
              f"    </revision>\n  </page>\n")


def _wiki_article(rng: random.Random, name: str, kinds: list[str]) -> tuple[str, list[str]]:
    """Wikitext of an article (an infobox, a lead, level-2 sections with a level-3 one folded in, references,
    a file link) and the section titles the converter must give it."""
    lead = " ".join(_section(rng, "introduction"))
    parts = [f"{{{{Infobox person\n| name = {name}\n| image = {name}.jpg\n}}}}\n'''{name}''' {lead}"
             f"<ref>{{{{cite web|url=http://example.org|title=x}}}}</ref> [[Category:People]]\n"]
    for k in kinds:
        body = " ".join(_section(rng, k))
        parts.append(f"\n== {WIKI_TITLES[k]} ==\n{body} [[Main Page|see]].\n")
        if k == "method":
            parts.append(f"\n=== Later work ===\n[[File:{name}.png|thumb|a caption]] "
                         f"{' '.join(_section(rng, k))}\n")
    parts.append("\n== References ==\n{{reflist}}\n<references />\n\n== External links ==\n* [http://x.org site]\n")
    return "".join(parts), ["abstract", *(WIKI_TITLES[k] for k in kinds), "External links"]


def _wiki_dump(path: Path, seed: int) -> dict[str, list[str]]:
    """A bzip2-compressed pages-articles dump of 40 articles, ``Person 0`` ... (``Person 3`` and every fourth
    after it have 3 sections once their external links are dropped: fewer than min_sections = 4), a redirect, a
    disambiguation page, an article about a year and a talk page; returns title -> expected section titles."""
    rng = random.Random(seed)
    pages, expected = [], {}
    for i in range(40):
        title = f"Person {i}"
        text, titles = _wiki_article(rng, title, WIKI_ORDERS[i % len(WIKI_ORDERS)])
        pages.append(_wiki_page(title, text, page_id=10 + i))
        expected[title] = titles
    pages += [_wiki_page("Persons", "#REDIRECT [[Person 0]]", page_id=90, redirect="Person 0"),
              _wiki_page("Person (disambiguation)", "'''Person''' may be:\n{{disambiguation}}", page_id=91),
              _wiki_page("1999", "'''1999''' was a year. " * 5 + "\n== Events ==\nthings happened", page_id=92),
              _wiki_page("Talk:Person 0", "== Comment ==\nnice article", ns=1, page_id=93)]
    xml = ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">\n'
           "  <siteinfo>\n    <sitename>Wikipedia</sitename>\n    <namespaces>\n"
           '      <namespace key="0" case="first-letter" />\n      <namespace key="1" case="first-letter">Talk'
           "</namespace>\n    </namespaces>\n  </siteinfo>\n" + "".join(pages) + "</mediawiki>\n")
    path.write_bytes(bz2.compress(xml.encode("utf-8")))
    return expected


def _convert(*argv: str) -> dict:
    """``critic data convert ...`` in-process; the skip report it prints."""
    from critic.cli import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["data", "convert", *argv]) == 0
    return json.loads(printed.getvalue().strip().splitlines()[-1])


TOY_TABLES = '''
[arxiv]
kind = "converted"
train = "{root}/arxiv/train.jsonl"
valid = "{root}/arxiv/valid.jsonl"
test = "{root}/arxiv/test.jsonl"
min_section_tokens = 5
min_title_count = 2

[pubmed]
train = "{root}/pubmed/train.jsonl"
valid = "{root}/pubmed/valid.jsonl"
test = "{root}/pubmed/test.jsonl"
min_section_tokens = 5
min_title_count = 2

[wikipedia]
documents = "{root}/wikipedia.jsonl"
valid_fraction = 0.25
test_fraction = 0.25
min_section_tokens = 5
min_title_count = 2

[lm]
'''


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The toy sources and their conversions: ``(folder, {corpus: what the source holds})``."""
    root = tmp_path_factory.mktemp("converted")
    made = {"arxiv": _cohan_files(root / "src" / "arxiv", "arxiv", ARXIV_TITLES, seed=1),
            "pubmed": _cohan_files(root / "src" / "pubmed", "pubmed", PUBMED_TITLES, seed=2)}
    reports = {}
    for corpus in ("arxiv", "pubmed"):
        (root / corpus).mkdir()
        for src, dst in (("train", "train"), ("val", "valid"), ("test", "test")):
            reports[f"{corpus}/{dst}"] = _convert("cohan", str(root / "src" / corpus / f"{src}.txt"),
                                                  "--out", str(root / corpus / f"{dst}.jsonl"))
    made["wikipedia"] = _wiki_dump(root / "src" / "enwiki-pages-articles.xml.bz2", seed=3)
    reports["wikipedia"] = _convert("wikipedia", str(root / "src" / "enwiki-pages-articles.xml.bz2"),
                                    "--out", str(root / "wikipedia.jsonl"))
    return root, made, reports


def _toy_config(coherence_config, fixture_manpage_root, path: Path, root: Path, **kw) -> Path:
    return coherence_config(path, fixture_manpage_root, extra={
        'corpora = ["manpages"]': 'corpora = ["arxiv", "pubmed", "wikipedia"]',
        "\n[lm]\n": TOY_TABLES.format(root=root)}, **kw)


@pytest.fixture(scope="module")
def study(toy_job, sources, coherence_config, fixture_manpage_root):
    """The toy study of the three corpora, its filter streaming 5 documents at a time (so chunks split)."""
    from experiments.coherence import run

    root = sources[0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run, "FILTER_CHUNK", 5)
        return toy_job("coherence-converted",
                       lambda path: _toy_config(coherence_config, fixture_manpage_root, path, root))


def test_the_converters_keep_every_article_and_section_of_the_sources(sources):
    root, made, reports = sources
    for corpus in ("arxiv", "pubmed"):
        for src, dst in (("train", "train"), ("val", "valid"), ("test", "test")):
            docs = read_jsonl(root / corpus / f"{dst}.jsonl")
            assert reports[f"{corpus}/{dst}"] == {"kept": len(made[corpus][src])}
            assert [d.id for d in docs] == [a["article_id"] for a in made[corpus][src]]
            assert [list(d.section_titles) for d in docs] == [a["section_names"] for a in made[corpus][src]]
            assert [[s.text for s in d.sections] for d in docs] == [[" ".join(s) for s in a["sections"]]
                                                                     for a in made[corpus][src]]
    docs = read_jsonl(root / "wikipedia.jsonl")
    assert reports["wikipedia"] == {"kept": 40, "redirect": 1, "disambiguation": 1, "article about a year": 1,
                                    "not an article (namespace)": 1}
    assert {d.id: list(d.section_titles) for d in docs} == made["wikipedia"]
    text = " ".join(s.text for d in docs for s in d.sections)
    for markup in ("{{", "[[", "<ref", "Infobox", "Category:", ".png", "'''"):
        assert markup not in text


def test_each_corpus_is_split_as_its_files_say(study, sources):
    """Cohan's splits are the files' own; the one Wikipedia file is split by a hash of each title."""
    _, made, _ = sources
    _, out = study
    for corpus in ("arxiv", "pubmed"):
        for src, dst in (("train", "train"), ("val", "valid"), ("test", "test")):
            docs = read_jsonl(out / corpus / "data" / f"{dst}.jsonl")
            assert [d.id for d in docs] == [a["article_id"] for a in made[corpus][src]]
            assert sum(len(d.sections) for d in docs) == sum(len(a["sections"]) for a in made[corpus][src])
        build = json.loads((out / corpus / "data" / "build.json").read_text())
        assert build["counts"] == {"train": 28, "valid": 6, "test": 7} and build["n_ids_in_two_splits"] == 0
    expected = {s: [t for t in made["wikipedia"] if split_of(t, valid_fraction=0.25, test_fraction=0.25) == s]
                for s in ("train", "valid", "test")}
    assert all(expected.values())
    for split, titles in expected.items():
        docs = read_jsonl(out / "wikipedia" / "data" / f"{split}.jsonl")
        assert [d.id for d in docs] == titles
        assert [list(d.section_titles) for d in docs] == [made["wikipedia"][t] for t in titles]


def test_the_filters_of_app_e_apply_as_to_a_built_corpus(study, sources):
    """The streamed filter removes what one ``CorpusFilter.apply`` over the splits removes, for the reasons the
    toy sources were made to trigger."""
    from critics.sections import CorpusFilter
    from experiments.lm_stages import read_splits

    _, out = study
    settings = {"arxiv": (3, 5), "pubmed": (3, 5), "wikipedia": (4, 5)}
    for corpus, (min_sections, min_tokens) in settings.items():
        filt = CorpusFilter(min_sections=min_sections, min_section_tokens=min_tokens, max_section_tokens=2000,
                            min_title_count=2)
        kept, report = filt.apply(read_splits(out / corpus / "data"))
        written = json.loads((out / corpus / "filtered" / "filter.json").read_text())
        assert written["removed"] == report.removed and written["sections_dropped"] == dict(report.sections_dropped)
        for split, docs in kept.items():
            assert [d.to_dict() for d in read_jsonl(out / corpus / "filtered" / f"{split}.jsonl")] == \
                [d.to_dict() for d in docs]
        removed = written["removed"]
        if corpus == "wikipedia":   # every fourth article: 3 sections once its external links are dropped
            assert {k.split("/", 1)[1] for k in removed} == {f"Person {i}" for i in range(3, 40, 4)}
            assert written["sections_dropped"] == {"external link": 40}
            continue
        assert removed[f"train/{corpus}-two"] == "2 sections after normalisation (< 3)"
        assert removed[f"train/{corpus}-short"].endswith("has 2 tokens (< 5)")
        assert removed[f"train/{corpus}-rare"].startswith("infrequent title 'appendix' (1 < 2 in train)")
        assert removed[f"test/{corpus}-test-rare"].startswith("infrequent title 'appendix'")
        assert len(removed) == 4 and written["sections_dropped"] == {"reference": 1}
        refs = next(d for d in read_jsonl(out / corpus / "filtered" / "train.jsonl") if d.id == f"{corpus}-refs")
        assert len(refs.sections) == 4


def test_reference_set_and_latent_ppl_recomputed_from_the_documents(study, report_json):
    """The data set is every filtered test document, each scored over its sections + 1 steps; its Latent PPL is
    exp(total Latent NLL / total steps) of ``documents.jsonl``'s rows."""
    _, out = study
    for corpus in CORPORA:
        test = read_jsonl(out / corpus / "filtered" / "test.jsonl")
        results = report_json(out / corpus / "report" / "results.json")
        assert results["reference"]["n"] == len(test) and results["reference"]["n_skipped"] == 0
        rows = [json.loads(line) for line in
                (out / corpus / "report" / "documents.jsonl").read_text().splitlines()]
        data = [r for r in rows if r["set"] == "data"]
        assert sorted(r["id"] for r in data) == sorted(d.id for d in test)
        assert sum(r["latent_steps"] for r in data) == sum(len(d.sections) + 1 for d in test)
        ppl = math.exp(sum(r["latent_nll"] for r in data) / sum(r["latent_steps"] for r in data))
        assert results["reference"]["latent_ppl"] == pytest.approx(ppl, rel=1e-9)
        assert set(results["candidates"]) == {"lm_w_title", "lm_wo_title"}
        assert results["run"]["corpus"] == corpus
        assert results["run"]["config"][corpus]["kind"] == "converted"
    table = (out / "table2.md").read_text()
    assert all(f"| {c}: Latent PPL ↓ [95% CI] |" in table for c in CORPORA)


def test_rerun_reuses_the_stages_and_a_changed_file_redoes_its_corpus(study, sources, run_experiment,
                                                                       coherence_config, fixture_manpage_root,
                                                                       tmp_path):
    """Converted files key the data stage by content: an unchanged rerun (from a moved copy of the files) reuses
    everything; one more test article redoes PubMed from its data stage and leaves the others alone."""
    import shutil

    root, _, _ = sources
    _, out = study
    moved = tmp_path / "moved"
    shutil.copytree(root, moved, ignore=shutil.ignore_patterns("src"))
    again = _toy_config(coherence_config, fixture_manpage_root, tmp_path / "again.toml", moved)
    printed, _ = run_experiment(again, out, "[coherence:arxiv]", STAGES)
    for corpus in CORPORA:
        assert [s for s in STAGES if f"[coherence:{corpus}] {s}: up to date" not in printed] == [], corpus
    before = read_jsonl(moved / "pubmed" / "test.jsonl")
    extra = before[0].to_dict()
    extra["id"] = "pubmed-extra"
    with open(moved / "pubmed" / "test.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(extra) + "\n")
    printed, how = run_experiment(again, out, "[coherence:pubmed]", STAGES)
    assert how == dict.fromkeys(STAGES, "computed")
    assert "[coherence:arxiv] report: up to date" in printed and "[coherence:wikipedia] report: up to date" in printed
    assert len(read_jsonl(out / "pubmed" / "data" / "test.jsonl")) == len(before) + 1


# ------------------------------------------------------------------ the config: checked before any stage runs
def _schema():
    from critic import registry

    return registry.get_runner("experiments.coherence.run:main").schema


@pytest.mark.parametrize("table, message", [
    ('[arxiv]\nkind = "built"\ntrain = "a"\nvalid = "b"\ntest = "c"\n',
     r"\[arxiv\] kind = 'built': only manpages, linux-doc are built"),
    ('[arxiv]\ndocuments = "all.jsonl"\ntrain = "a.jsonl"\n', r"\[arxiv\] give documents .* or train, valid and test"),
    ('[arxiv]\ntrain = "a.jsonl"\ntest = "c.jsonl"\n', r"\[arxiv\] train, test given without valid"),
    ("[arxiv]\nmin_title_count = 200\n", r"\[arxiv\] kind = 'converted' needs documents = FILE"),
    ('[arxiv]\nkind = "converted"\ndocument = "a.jsonl"\n', r"\[arxiv\] unknown key 'document' \(did you mean "
                                                             r"'documents'\?\)"),
    ('[arxiv]\nkind = "copied"\ndocuments = "a.jsonl"\n', r"\[arxiv\] kind: 'copied' is not one of 'built', "
                                                          r"'converted'"),
    ('[wikipedia]\ndocuments = "a.jsonl"\nvalid_fraction = 0.6\n', r"\[wikipedia\] valid_fraction must be <= 0.5"),
    ('[manpages]\nroot = "/usr/share/man"\ntrain = "a.jsonl"\n', r"\[manpages\] train names a converted corpus's "
                                                                 r"file, but kind = 'built'"),
])
def test_a_corpus_that_names_its_documents_wrongly_is_refused_with_its_line(tmp_path, table, message):
    corpus = table[1:table.index("]")]
    path = tmp_path / "bad.toml"
    path.write_text(f'runner = "experiments.coherence.run:main"\ncorpora = ["{corpus}"]\n\n{table}')
    data, text = read_toml(path)
    with pytest.raises(ConfigError, match=rf"bad\.toml:\d+: {message}"):
        check_config(data, _schema(), where=str(path), text=text, allowed=("runner",))


def test_a_missing_converted_file_stops_the_run_before_any_stage(tmp_path, capsys, sources):
    """The second corpus's wrong path is found before the first corpus is studied."""
    from critic.cli import main

    root = sources[0]
    path = tmp_path / "job.toml"
    path.write_text(f'runner = "experiments.coherence.run:main"\ncorpora = ["arxiv", "pubmed"]\n\n'
                    f'[arxiv]\ntrain = "{root}/arxiv/train.jsonl"\nvalid = "{root}/arxiv/valid.jsonl"\n'
                    f'test = "{root}/arxiv/test.jsonl"\n\n[pubmed]\ndocuments = "{tmp_path}/nowhere.jsonl"\n')
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    assert f"[pubmed] documents = '{tmp_path}/nowhere.jsonl': no such file" in capsys.readouterr().err
    assert not (tmp_path / "run" / "arxiv").exists()


@pytest.mark.parametrize("corpus, min_sections, min_title_count, files", [
    ("arxiv", 3, 200, ("train", "valid", "test")), ("pubmed", 3, 500, ("train", "valid", "test")),
    ("wikipedia", 4, 4000, ("documents",))])
def test_the_paper_preset_of_each_corpus_has_app_e_settings(corpus, min_sections, min_title_count, files):
    """``paper-<corpus>.toml`` passes the schema (loaded, not run) with the paper's settings: app. E's filters
    and thresholds, GPT-2 small fine-tuned 20 epochs at lr 5e-5 (batch 8, window 1024), a fine-tuned BERT
    posterior in MAP mode."""
    path = EXPERIMENTS / f"paper-{corpus}.toml"
    data, text = read_toml(path)
    config = check_config(data, _schema(), where=str(path), text=text, allowed=("runner",))
    table = config[corpus]
    assert config["corpora"] == [corpus] and table["kind"] == "converted"
    assert [k for k in ("documents", "train", "valid", "test") if k in data[corpus]] == list(files)
    assert (table["min_sections"], table["min_section_tokens"], table["max_section_tokens"],
            table["min_title_count"]) == (min_sections, 30, 2000, min_title_count)
    assert (table["valid_fraction"], table["test_fraction"]) == (0.1, 0.1)
    lm = config["lm"]
    assert (lm["model"], lm["context"], lm["batch_size"], lm["learning_rate"], lm["epochs"]) == \
        ("gpt2", 1024, 8, 5e-5, 20)
    assert lm["end_of_document"] == "<|endoftext|>" and "max_tokens" not in lm
    assert config["critic"] == {**config["critic"], "classifier": "encoder", "encoder": "bert-base-uncased",
                                "finetune": True, "mode": "map"}
    for src in files:   # the command the preset's comment gives writes the file it reads
        assert f"--out {data[corpus][src]}" in text


def test_a_config_without_corpora_studies_the_built_ones_and_needs_no_files():
    """The converted corpora are studied only when named: their tables' files are not asked for otherwise."""
    config = check_config({"runner": "experiments.coherence.run:main"}, _schema(), allowed=("runner",))
    assert config["corpora"] == ["manpages", "linux-doc"]
    assert {c: config[c]["kind"] for c in CORPORA} == dict.fromkeys(CORPORA, "converted")
