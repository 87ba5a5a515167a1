import pytest

from critics.coref.chains import SENTENCE, build_chain, is_person_pronoun, pronoun_gender
from critics.coref.resolution import Mention, Resolution, ResolutionError, from_clusters, split_sentences

# Paper fig. 5 (a sample from LM1), with the clusters the figure marks.
FIG5 = ("Lisa runs off to find him and they kiss passionately. Afterwards, Josh tells her the reason "
        "why he's going to their first gig, and that Lisa is going to do it, too.")


def spans(text, *words):
    """Character spans of successive occurrences of ``words`` (each searched after the previous)."""
    out, at = [], 0
    for w in words:
        start = text.index(w, at)
        while (start > 0 and text[start - 1].isalnum()) or (start + len(w) < len(text) and text[start + len(w)].isalnum()):
            start = text.index(w, start + 1)
        out.append([start, start + len(w)])
        at = start + len(w)
    return out


def fig5_resolution():
    lisa = spans(FIG5, "Lisa", "her", "Lisa")
    josh = spans(FIG5, "him", "Josh", "he")
    they = spans(FIG5, "they", "their")
    return from_clusters(FIG5, [lisa, josh, they])


def test_fig5_chain_is_the_papers():
    chain = build_chain(fig5_resolution())
    assert " ".join(chain.tokens) == ". F:0 him:1 they:2 . M:1 her:0 he:1 their:2 F:0"
    assert chain.spans[0] is None
    assert [FIG5[s:e] for s, e in filter(None, chain.spans)] == \
        ["Lisa", "him", "they", "Josh", "her", "he", "their", "Lisa"]


def test_fig13_gender_from_majority_and_case_kept():
    text = "The henchwoman saw his boat. He left. She stayed and the henchwoman waved."
    hench = spans(text, "henchwoman", "his", "He", "henchwoman")
    she = spans(text, "She")
    chain = build_chain(from_clusters(text, [hench, she]))
    # henchwoman corefers with two male pronouns: Male, as in fig. 13; "He" keeps its case.
    assert chain.tokens == (".", "M:0", "his:0", ".", "He:0", ".", "She:1", "M:0")


def test_non_person_entities_dropped_unless_listed():
    text = "The river floods. It rises. Paris is old."
    river = spans(text, "river", "It")
    paris = spans(text, "Paris")
    chain = build_chain(from_clusters(text, [river, paris]))
    assert chain.tokens == (".", ".", ".")
    listed = build_chain(from_clusters(text, [river, paris], persons=[1]))
    assert listed.tokens == (".", ".", ".", "N:0")


def test_ner_person_and_pron_tag_make_people():
    text = "Ann met Bob. Who knows."
    res = Resolution(text, split_sentences(text), [
        Mention(0, 3, 0, (0, 3), "Ann", "PROPN", "NNP", "PERSON"),
        Mention(8, 11, 1, (8, 11), "Bob", "PROPN", "NNP", ""),
        Mention(13, 16, 1, (13, 16), "Who", "PRON", "WP", ""),
    ])
    chain = build_chain(res)
    assert chain.tokens == (".", "N:0", "N:1", ".", "Who:1")


def test_shared_root_goes_to_largest_cluster_and_counts_for_both():
    text = "Tom said he would come."
    res = Resolution(text, [(0, len(text))], [
        Mention(0, 3, 0, (0, 3), "Tom"),
        Mention(9, 11, 0, (9, 11), "he"),
        Mention(9, 11, 2, (9, 11), "he"),
    ])
    assert build_chain(res).tokens == (".", "M:0", "he:1")


def test_gender_tie_goes_to_first_seen():
    text = "Sam called her and him."
    sam = spans(text, "Sam", "her", "him")
    assert build_chain(from_clusters(text, [sam])).tokens == (".", "F:0", "her:0", "him:0")


def test_pronoun_helpers():
    assert pronoun_gender("Himself") == "M" and pronoun_gender("their") == "P" and pronoun_gender("I") is None
    assert is_person_pronoun("I") and not is_person_pronoun("it", "PRON") and is_person_pronoun("whom", "PRON")
    assert not is_person_pronoun("whom")


def test_sentence_marker():
    assert SENTENCE == "."


def test_resolution_roundtrip_and_errors():
    res = fig5_resolution()
    again = Resolution.from_dict(res.to_dict(), FIG5, where="doc 7")
    assert build_chain(again).tokens == build_chain(res).tokens
    with pytest.raises(ResolutionError, match=r"doc 7: was computed on another text"):
        Resolution.from_dict(res.to_dict(), FIG5 + " ", where="doc 7")
    bad = res.to_dict()
    bad["mentions"][0]["end"] = 10_000
    del bad["text_sha256"]
    with pytest.raises(ResolutionError, match=r"doc 7: mentions\[0\]: span \[0, 10000\) is not inside"):
        Resolution.from_dict(bad, FIG5, where="doc 7")
    bad["mentions"][0].update(end=4, cluster=-1)
    with pytest.raises(ResolutionError, match="non-negative integer"):
        Resolution.from_dict(bad, FIG5, where="doc 7")
