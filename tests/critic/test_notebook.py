"""A notebook shows results as the report's summary table: ``import critic`` inside IPython registers the HTML
formatters by name, outside IPython it registers nothing, and neither imports the rendering."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.splitlines()[-1])


def test_importing_critic_inside_ipython_registers_the_result_formatters():
    inside = _run(
        "import json, sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "import critic\n"
        "printers = shell.display_formatter.formatters['text/html'].deferred_printers\n"
        "print(json.dumps({'types': sorted('.'.join(k) for k in printers if k[0].startswith('critic')),\n"
        "                  'html': 'critic.html' in sys.modules}))")
    assert inside == {"types": ["critic.panel.PanelResult", "critic.results.CriticismResult"], "html": False}
    outside = _run("import json, sys\nimport critic\n"
                   "print(json.dumps({'notebook': 'critic.notebook' in sys.modules, 'IPython': 'IPython' in sys.modules}))")
    assert outside == {"notebook": False, "IPython": False}
