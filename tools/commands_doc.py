"""Write the generated part of docs/guide/commands.md (every command and option, from the app itself) below its
marker, keeping the hand-written part above it. Run it after changing a command's options; tests/test_docs.py
fails while the file and the app differ."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.main import app  # noqa: E402
from cli.reference import MARKER, commands_reference  # noqa: E402

DOC = next((ROOT / "docs").rglob("commands.md"))  # the command reference, wherever docs/ keeps it


def main() -> None:
    text = DOC.read_text()
    written = text.split(MARKER)[0].rstrip("\n") + "\n\n" + commands_reference(app)
    DOC.write_text(written)
    print(f"wrote {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
