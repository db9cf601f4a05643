"""Text that must stay on one line: a path in an experiment file, a value in a systemd drop-in."""

from __future__ import annotations

import re

# control characters, C1 ones (U+0085 NEL) and U+2028/U+2029: every character str.splitlines()
# (or a reader in another language) may take for a line break, so none can end a directive
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
