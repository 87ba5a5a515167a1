"""The README's "Criticise your own generations" commands, run as written (on the shipped man-page fixture and
generations made from it): at most three commands from a JSONL of {"text": ...} to index.html."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from critic.cli import main
from critic.document import read_jsonl
from critic.panel import PanelResult, load_results

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_commands(section: str) -> list[list[str]]:
    """The commands of the first bash block under the README heading ``section`` (continuations joined)."""
    text = README.read_text()
    block = re.search(rf"^## {re.escape(section)}\n.*?```bash\n(.*?)```", text, re.S | re.M).group(1)
    return [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_own_generations_to_html_in_three_commands_after_command_1(tmp_path, monkeypatch, fixture_manpage_root):
    """The block runs verbatim in a clean folder where command 1's main job ran (its config's man-page root set
    to the shipped fixture): its corpus in runs/manpages/data/, the generations written as a user's would be."""
    commands = readme_commands("Criticise your own generations")
    assert 1 <= len(commands) <= 3 and all(c[0] == "critic" for c in commands)
    monkeypatch.chdir(tmp_path)
    config = (README.parent / "experiments" / "manpages" / "sections.toml").read_text()
    Path("sections.toml").write_text(config.replace('root = "/usr/share/man"', f'root = "{fixture_manpage_root}"'))
    assert main(["run", "sections.toml", "--out", "runs/manpages"]) == 0  # command 1's main job
    data = Path("runs/manpages/data")
    generations = [{"text": "\n\n".join(f"# {s.title}\n{s.text}" for s in d.sections)}
                   for d in read_jsonl(data / "test.jsonl") + read_jsonl(data / "valid.jsonl")]
    Path("generations.jsonl").write_text("".join(json.dumps(g) + "\n" for g in generations))
    for command in commands:
        assert main(command[1:]) == 0, command
    out = Path(commands[-1][commands[-1].index("--out") + 1])
    assert (out / "index.html").is_file()
    panel = load_results(out)
    assert isinstance(panel, PanelResult) and len(panel.results) == 2
    assert all(r.set("mymodel").n + r.set("mymodel").n_skipped == len(generations) for r in panel.results.values())
