"""Run OpenHands' real tool code and print what the model would read, one JSON list on stdout.

Runs under an interpreter that has ``openhands-aci`` and ``openhands-tools`` installed (both need Python
3.12, so :mod:`gen_harness` starts this file with ``OPENHANDS_PYTHON``). Reads a JSON list of requests on
stdin:

- ``{"tool": "aci", "args": {...}}``: ``openhands_aci.editor.file_editor(**args)``; the agent reads the
  ``formatted_output_and_error`` field the runtime takes out of the tagged JSON it returns;
- ``{"tool": "editor", "args": {...}}``: ``openhands.tools.file_editor.impl.file_editor(**args)``, rendered
  with ``to_llm_content`` as the SDK sends it;
- ``{"tool": "terminal", "output": ..., "exit_code": ..., "cwd": ..., "command": ..., "python": ...}``: a
  ``TerminalObservation`` with the metadata the terminal session fills in, rendered with ``to_llm_content``.
"""

from __future__ import annotations

import json
import os
import re
import sys

os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")


def main() -> None:
    from openhands.sdk.llm import TextContent
    from openhands.tools.file_editor.impl import file_editor as tools_editor
    from openhands.tools.terminal.definition import TerminalObservation
    from openhands.tools.terminal.metadata import CmdOutputMetadata
    from openhands_aci.editor import file_editor as aci_editor

    out: list[str] = []
    for req in json.loads(sys.stdin.read()):
        if req["tool"] == "aci":
            tagged = aci_editor(**req["args"])
            body = re.search(r"<oh_aci_output_[0-9a-f]+>\n(.*)\n</oh_aci_output_", tagged, re.S)
            assert body is not None, tagged
            out.append(json.loads(body.group(1))["formatted_output_and_error"])
        elif req["tool"] == "editor":
            obs = tools_editor(**req["args"])
            out.append("".join(c.text for c in obs.to_llm_content if isinstance(c, TextContent)))
        else:
            code = req["exit_code"]
            meta = CmdOutputMetadata(exit_code=code, working_dir=req["cwd"],
                                     py_interpreter_path=req.get("python", sys.executable),
                                     suffix=f"\n[The command completed with exit code {code}.]")
            obs = TerminalObservation.from_text(text=req["output"], command=req["command"], exit_code=code,
                                                metadata=meta)
            out.append("".join(c.text for c in obs.to_llm_content if isinstance(c, TextContent)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
