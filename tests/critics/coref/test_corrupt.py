from critic.document import Document, Section
from critics.coref.chains import build_chain
from critics.coref.corrupt import corrupt_resolved, swap_gender, swap_number
from critics.coref.resolution import Resolution

from .test_chains import FIG5, fig5_resolution


def fig5_document(split_at: int | None = None) -> Document:
    """The fig. 5 passage as a resolved document (optionally in two sections, joined by a blank line)."""
    res = fig5_resolution()
    if split_at is None:
        sections = (Section(None, FIG5),)
        text = FIG5
    else:
        text = FIG5[:split_at] + "\n\n" + FIG5[split_at + 1:]
        sections = (Section(None, FIG5[:split_at]), Section("b", FIG5[split_at + 1:]))
        res = Resolution.from_dict({k: v for k, v in res.to_dict().items() if k != "text_sha256"}, text)
    return Document("lisa", sections, metadata={"coref": res.to_dict()})


def _diff(a: str, b: str) -> tuple[str, str]:
    i = next(k for k, (x, y) in enumerate(zip(a, b)) if x != y)
    j = 0
    while a[len(a) - 1 - j] == b[len(b) - 1 - j]:
        j += 1
    return a[i:len(a) - j], b[i:len(b) - j]


def test_gender_swap_changes_one_pronoun_and_keeps_clusters():
    for seed in range(6):
        doc = fig5_document()
        bad = swap_gender(doc, seed)
        assert bad.id == "lisa#gender"
        change = bad.metadata["corruption"]
        assert {change["from"], change["to"]} in ({"him", "her"}, {"her", "his"}, {"he", "she"})
        old, new = _diff(doc.text, bad.text)
        assert {old, new} in ({"him", "her"}, {"her", "his"}, {"he", "she"}, {"m", "r"}, {"is", "er"}) or \
            old in change["from"]
        res = Resolution.from_dict(bad.metadata["coref"], bad.text)      # offsets and hash still fit
        tokens = build_chain(res).tokens
        before = build_chain(Resolution.from_dict(doc.metadata["coref"], doc.text)).tokens
        diffs = [(a, b) for a, b in zip(before, tokens) if a != b]
        assert len(diffs) == 1 and diffs[0][0].split(":")[1] == diffs[0][1].split(":")[1]


def test_number_swap_and_case():
    doc = fig5_document()
    seen = set()
    for seed in range(12):
        bad = swap_number(doc, seed)
        c = bad.metadata["corruption"]
        seen.add((c["from"], c["to"]))
    assert seen <= {("him", "them"), ("they", "he"), ("they", "she"), ("her", "them"), ("he", "they"),
                    ("their", "his"), ("their", "her")}
    assert len(seen) >= 4
    # Only the second "she" is eligible: swapping the first would make "They" the first-seen gender,
    # turning Ann plural (a relabelled person, not an inconsistency).
    from critics.coref.resolution import from_clusters
    text = "Ann smiled. She left and she sang."
    res = from_clusters(text, [[[0, 3], [12, 15], [25, 28]]])
    for seed in range(4):
        bad = swap_number(Document("a", (Section(None, text),), metadata={"coref": res.to_dict()}), seed)
        assert bad.text == "Ann smiled. She left and they sang."
    single = from_clusters("Ann smiled. She left.", [[[0, 3], [12, 15]]])
    assert swap_number(Document("b", (Section(None, "Ann smiled. She left."),),
                                metadata={"coref": single.to_dict()}), 0) is None


def test_corruption_lands_in_the_right_section():
    doc = fig5_document(split_at=FIG5.index(" Afterwards"))
    for seed in range(6):
        bad = swap_gender(doc, seed)
        assert bad.sections[1].title == "b" and len(bad.sections) == 2
        assert bad.text == "\n\n".join(s.text for s in bad.sections)


def test_no_eligible_pronoun_is_counted():
    from critics.coref.resolution import from_clusters
    text = "Ann met Bob."
    res = from_clusters(text, [[[0, 3]], [[8, 11]]], persons=[0, 1])
    docs = [Document("x", (Section(None, text),), metadata={"coref": res.to_dict()}), fig5_document()]
    out, counts = corrupt_resolved(docs, "gender", seed=1)
    assert counts == {"no eligible pronoun": 1, "corrupted": 1} and [d.id for d in out] == ["lisa#gender"]
    again, _ = corrupt_resolved(docs, "gender", seed=1)
    assert again[0].text == out[0].text                       # seeded
