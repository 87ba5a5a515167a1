"""Plain-Python references the coreference tests compare the vectorised code with."""

from critics.coref.windows import PAD


def random_chains(rng, n, *, max_len=20, max_id=4, texts=(".", ".", "M", "F", "he", "she", "his", "They")):
    """``n`` chains of up to ``max_len`` tokens drawn uniformly from ``texts`` (``.`` bare, others ``TEXT:ID``)."""
    out = []
    for _ in range(n):
        chain = []
        for _ in range(int(rng.integers(0, max_len + 1))):
            t = texts[int(rng.integers(len(texts)))]
            chain.append(t if t == "." else f"{t}:{int(rng.integers(max_id))}")
        out.append(chain)
    return out


def py_windows(chain, n=5):
    """The relabelled windows of ``chain``: pad on the left, renumber each window's ids by first appearance."""
    padded = [PAD] * (n - 1) + list(chain)
    for i in range(len(chain)):
        ids, window = {}, []
        for tok in padded[i:i + n]:
            if ":" in tok:
                text, ident = tok.rsplit(":", 1)
                ids.setdefault(ident, len(ids))
                window.append(f"{text}:{ids[ident]}")
            else:
                window.append(tok)
        yield tuple(window)
