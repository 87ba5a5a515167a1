"""Coreference-chain critic (paper sec. 5, app. G): chains of person mentions under a 5-gram prior.

- :mod:`.resolution` / :mod:`.resolvers`: coreference resolutions (neuralcoref through a Python 3.7
  worker, :mod:`.neuralcoref`; or precomputed clusters) and keeping them with the documents;
- :mod:`.chains`: the chain of sentence starts and person mentions (fig. 5);
- :mod:`.windows`, :mod:`.kenlm_prior`, :mod:`.smoothing`: the relabelled 5-gram windows and the two
  priors over them (KenLM's modified Kneser-Ney; the authors' interpolated absolute discounting);
- :mod:`.critic`: the registered critic ``coref``; :mod:`.diagnostics`: tables 6, 15, 16, 17 and
  rendered documents; :mod:`.corrupt`: pronoun corruptions with known answers.

Importing this package registers the critic, ``critic coref resolve`` and ``critic setup neuralcoref``.
"""

from critic.registry import register_command
from critic.views import register_view

from .chains import Chain, build_chain
from .critic import CorefChainCritic
from .neuralcoref import setup_neuralcoref  # (its module registers `critic setup neuralcoref`)
from .resolution import Mention, Resolution, ResolutionError, from_clusters

register_view(CorefChainCritic, "critics.coref.view:CorefView")  # imported when a report shows one

__all__ = ["CorefChainCritic", "Chain", "build_chain", "Mention", "Resolution", "ResolutionError", "from_clusters",
           "setup_neuralcoref"]


def _resolve_main(args) -> int:
    import json

    from critic.document import write_jsonl
    from critic.cli_args import read_with_args

    from .resolvers import annotate

    docs = read_with_args(args, args.documents)[0]
    resolved, counts = annotate(docs, args.out, batch_size=args.batch_size, progress=True)
    path = write_jsonl(resolved, args.out / "documents.jsonl")
    print(json.dumps({"documents": str(path), "counts": dict(counts)}, indent=1))
    return 0


def _add_parser(p) -> None:
    """Fill ``critic coref``: ``critic coref resolve DOCS.jsonl --out DIR`` puts neuralcoref resolutions into the
    documents, resumably."""
    import argparse
    from pathlib import Path

    from critic.cli_args import add_input_arguments, positive_int

    sub = p.add_subparsers(dest="coref_command", required=True, metavar="COREF_COMMAND")
    r = sub.add_parser("resolve", help="resolve documents with neuralcoref into DIR/documents.jsonl (resumable)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    r.add_argument("documents", type=Path, help="documents (any format critic reads: see --format)")
    r.add_argument("--out", type=Path, required=True, help="folder: resolutions.jsonl (log) and documents.jsonl")
    r.add_argument("--batch-size", type=positive_int, default=16, help="documents per worker request")
    add_input_arguments(r)
    r.set_defaults(func=_resolve_main)


register_command("coref", _add_parser, "coreference tools (resolve documents with neuralcoref)")
