"""``python -m critic.lm_eval --out TASKS --data PROMPTS.jsonl --critic CRITIC``: write the task template filled in
(:func:`critic.lm_eval.write_task`), for ``lm_eval --include_path TASKS --tasks TASK --log_samples ...``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import CRITIC_ENV, write_task


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m critic.lm_eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="the folder to write TASK.yaml and TASK_critic.py in")
    p.add_argument("--data", required=True, type=Path, help="the prompts: a JSON-lines file")
    p.add_argument("--critic", type=Path, help=f"a saved critic's folder (default: ${CRITIC_ENV} when lm-eval runs)")
    p.add_argument("--task", default="critic_latent", help="the task's name (default critic_latent)")
    p.add_argument("--doc-to-text", default="{{prompt}}", help="the prompt: a Jinja template over a record's fields "
                                                               "(default {{prompt}})")
    p.add_argument("--generation-kwargs", type=json.loads, default=None, metavar="JSON",
                   help='lm-eval\'s generation_kwargs as JSON (default {"max_gen_toks": 256})')
    p.add_argument("--seed", type=int, default=0, help="critic score's --seed (default 0)")
    p.add_argument("--sections", default="auto", help="critic score's --sections (default auto)")
    p.add_argument("--device", default="cpu", help="the critic's torch device (default cpu)")
    args = p.parse_args(argv)
    try:
        path = write_task(args.out, data=args.data, critic=args.critic, task=args.task, doc_to_text=args.doc_to_text,
                          generation_kwargs=args.generation_kwargs, seed=args.seed, sections=args.sections,
                          device=args.device)
    except (OSError, ValueError) as exc:
        print(f"python -m critic.lm_eval: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}; run: lm_eval --include_path {args.out} --tasks {args.task} --log_samples --output_path OUT "
          "--model ...")
    return 0


if __name__ == "__main__":
    sys.exit(main())
