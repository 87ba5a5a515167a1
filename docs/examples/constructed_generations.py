"""Write free-text "generations" made from real documents, for trying `critic report` without a model.

Each document is rendered as Markdown (``# title`` over each section's text), in the JSONL a user brings
(``{"text": ...}``, no id); one third are left as they are, one third have their sections shuffled, one
third repeat one section: known structural faults the section critic should flag.  The screenshot in
docs/images/report.png was made from the machine's man pages with:

    critic data build manpages --out data/manpages
    python docs/examples/constructed_generations.py data/manpages/test.jsonl generations.jsonl
    (then the three commands of the README's "Criticise your own generations")
"""

import json
import sys

from critic.corrupt import CORRUPTIONS
from critic.document import read_jsonl


def main(documents: str, out: str, seed: int = 0) -> None:
    with open(out, "w", encoding="utf-8") as fh:
        for k, doc in enumerate(read_jsonl(documents)):
            kind = (None, "permuted", "repeated")[k % 3]
            made = doc if kind is None else CORRUPTIONS[kind](doc, seed + k)
            text = "\n\n".join(f"# {s.title}\n{s.text}" for s in made.sections)
            fh.write(json.dumps({"text": text, "construction": kind or "real"}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
