from critic.document import Document, Section
from critics.sections import CorpusFilter, TitleNormalizer


def test_title_normalisation_app_e():
    norm = TitleNormalizer()
    assert norm("RETURN VALUES") == "return value"
    assert norm("2.1 Results") == "result"
    assert norm("Acknowledgements") == "acknowledgment"
    assert norm("See Also") == "see also"
    assert norm("References") == "reference"
    assert norm("1.") == ""
    assert TitleNormalizer(lemmatize=False)("Notes 3") == "notes"


def doc(i, titles, words=5):
    return Document(f"d{i}", tuple(Section(t, " ".join(["w"] * words)) for t in titles))


def test_corpus_filter_records_every_removal():
    splits = {
        "train": [doc(0, ["Intro", "Method", "Result", "References"]),
                  doc(1, ["Intro", "Method", "Result"]),
                  doc(2, ["Intro", "Notes", "Result"]),                # 2 sections left
                  doc(3, ["Intro", "Method", "Result"], words=100),     # too long
                  doc(4, ["Intro", "Method", "Oddity"])],               # rare title
        "test": [doc(5, ["Intro", "Method", "Result", "Result"]), doc(6, ["Intro", "Method", "Appendix"])],
    }
    filt = CorpusFilter(min_sections=3, min_section_tokens=2, max_section_tokens=50, min_title_count=2)
    kept, report = filt.apply(splits)
    assert [d.id for d in kept["train"]] == ["d0", "d1"]
    assert kept["train"][0].section_titles == ["intro", "method", "result"]
    assert [d.id for d in kept["test"]] == ["d5"]
    assert report.removed == {
        "train/d2": "2 sections after normalisation (< 3)",
        "train/d3": "section 0 ('intro') has 100 tokens (> 50)",
        "train/d4": "infrequent title 'oddity' (1 < 2 in train)",
        "test/d6": "infrequent title 'appendix' (0 < 2 in train)",
    }
    assert report.sections_dropped == {"reference": 1, "note": 1}


def test_a_document_longer_than_max_document_tokens_is_removed_with_its_count():
    """Whole-document length over the kept sections (boilerplate dropped first): 3 sections of 10 words = 30."""
    splits = {"train": [doc(0, ["Intro", "Method", "Result"], words=10), doc(1, ["Intro", "Method", "Result"]),
                        doc(2, ["Intro", "Method", "Result", "References"], words=10)]}
    kept, report = CorpusFilter(min_sections=3, max_document_tokens=30).apply(splits)
    assert [d.id for d in kept["train"]] == ["d0", "d1", "d2"]  # 30 tokens is not more than 30
    kept, report = CorpusFilter(min_sections=3, max_document_tokens=29).apply(splits)
    assert [d.id for d in kept["train"]] == ["d1"]  # 3 sections of 5 words
    assert report.removed["train/d0"] == "30 tokens in its sections (> 29)"
    assert report.removed["train/d2"] == "30 tokens in its sections (> 29)"  # the dropped References not counted
