"""systemd unit-file syntax: the one place that turns values into unit-file text and back.

Everything alloclab writes into a unit or drop-in goes through `environment_line`,
`exec_line` or `comment_line`, which refuse what systemd's syntax cannot carry safely and escape
the rest, so a value can never become a new directive, a new section or a specifier:

- control characters (newline, NUL, ...) are refused outright: a newline would end the
  directive, and none of the values alloclab writes needs one;
- inside double quotes, `\\` and `"` are backslash-escaped (systemd C-unescapes quoted words);
- `%` is doubled (systemd expands specifiers such as %n, %h in these settings);
- in command lines `$` is doubled too (systemd expands $VAR and ${VAR} there, not in
  Environment=);
- environment names must be POSIX names; an LD_PRELOAD path may hold no ':' or white space
  (the dynamic loader splits on them).

`split_words` reads such text back the way systemd does for these settings (quotes, C escapes,
`%%`, `$$`); the LocalUnits stand-in uses it, and tests check it against `systemd-analyze verify`.
See docs/reference/security.md.
"""

from __future__ import annotations

import re

from ..common.errors import UserError
from ..common.text import CONTROL

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_VALUE = 4096  # far above any allocator option string; bounds the line
_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "s": " ",
    "\\": "\\",
    '"': '"',
    "'": "'",
}


def check_value(value: str, what: str) -> str:
    """A value that can stand in a unit file: a string, no control characters, bounded, UTF-8."""
    if not isinstance(value, str):
        raise UserError(f"{what} must be a string, not {type(value).__name__}", "fix the groups file or plan")
    if CONTROL.search(value):
        bad = CONTROL.search(value).group()
        raise UserError(
            f"{what} contains a control character ({bad!r})",
            "remove newlines, tabs and other control characters from the value",
        )
    if len(value) > MAX_VALUE:
        raise UserError(f"{what} is {len(value)} characters long", f"keep it under {MAX_VALUE}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"{what} is not valid UTF-8", "use a UTF-8 value") from None
    return value


def check_env_name(name: str, what: str = "environment variable") -> str:
    if not isinstance(name, str) or not ENV_NAME.match(name):
        raise UserError(
            f"{what} name {name!r} is not a valid name", "use letters, digits and _ only, not starting with a digit"
        )
    return name


def check_env(env: dict, what: str) -> dict[str, str]:
    """An environment table that can be written to a unit file, checked key by key."""
    if not isinstance(env, dict):
        raise UserError(f'{what}: env must be a table of NAME = "value"', "fix the groups file or plan")
    for k, v in env.items():
        check_env_name(k, f"{what}: environment variable")
        check_value(v, f"{what}: value of {k}")
    return env


def check_preload_path(path: str, what: str) -> str:
    check_value(path, what)
    if not path.startswith("/") or re.search(r"[\s:]", path):
        raise UserError(
            f"{what} {path!r} cannot be preloaded",
            "give an absolute library path without spaces or ':' (the loader splits on them)",
        )
    return path


def _quote(value: str, command: bool) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    if command:
        escaped = escaped.replace("$", "$$")
    return f'"{escaped}"'


def environment_line(name: str, value: str, what: str = "environment") -> str:
    """`Environment="NAME=value"`, refusing or escaping whatever systemd would read differently."""
    check_env_name(name, what)
    return "Environment=" + _quote(f"{name}={check_value(value, f'{what}: value of {name}')}", command=False)


def exec_line(key: str, argv: list[str], what: str = "command") -> str:
    """`ExecStart="/abs/prog" "arg" ...`: every word quoted, `%` and `$` doubled."""
    if not argv or not argv[0].startswith("/"):
        raise UserError(f"{what}: the program must be an absolute path", "give its full path")
    return f"{key}=" + " ".join(_quote(check_value(a, f"{what} argument"), command=True) for a in argv)


def comment_line(text: str) -> str:
    """A comment that stays one comment: control characters become spaces."""
    return "# " + CONTROL.sub(" ", text)


# ---- reading back (the LocalUnits stand-in) --------------------------------------------------------


def split_words(value: str, command: bool = False) -> list[str]:
    """Words of a setting's value as systemd reads them: white space separates, quotes group,
    C escapes are resolved, `%%` is `%`, and in command lines `$$` is `$`. Specifiers and
    variable references other than those are refused: alloclab never writes them."""
    words: list[str] = []
    word: list[str] | None = None
    quote = ""
    i = 0
    while i < len(value):
        c = value[i]
        if c == "%":
            if value[i + 1 : i + 2] != "%":
                raise UserError(
                    f"specifier %{value[i + 1 : i + 2]} in {value!r} is not supported by the stand-in",
                    "write %% for a literal %",
                )
            c, i = "%", i + 1
        elif command and c == "$":
            if value[i + 1 : i + 2] != "$":
                raise UserError(
                    f"variable reference in {value!r} is not supported by the stand-in", "write $$ for a literal $"
                )
            c, i = "$", i + 1
        elif c == "\\" and i + 1 < len(value):
            c, i = _unescape(value, i + 1)
            word = (word or []) + [c]
            continue
        elif quote and c == quote:
            quote = ""
            i += 1
            continue
        elif not quote and c in "\"'":
            quote, word = c, word or []
            i += 1
            continue
        elif not quote and c.isspace():
            if word is not None:
                words.append("".join(word))
                word = None
            i += 1
            continue
        word = (word or []) + [c]
        i += 1
    if quote:
        raise UserError(f"unterminated quote in {value!r}", "fix the unit file")
    if word is not None:
        words.append("".join(word))
    return words


def _unescape(value: str, i: int) -> tuple[str, int]:
    """The character of the C escape starting at value[i] (after the backslash), and the next index."""
    c = value[i]
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c], i + 1
    if c == "x" and re.match(r"[0-9a-fA-F]{2}", value[i + 1 : i + 3]):
        return chr(int(value[i + 1 : i + 3], 16)), i + 3
    if re.match(r"[0-7]{3}", value[i : i + 3]):
        return chr(int(value[i : i + 3], 8)), i + 3
    if c == "u" and re.match(r"[0-9a-fA-F]{4}", value[i + 1 : i + 5]):
        return chr(int(value[i + 1 : i + 5], 16)), i + 5
    raise UserError(f"unknown escape \\{c} in {value!r}", "fix the unit file")


def settings(text: str) -> list[tuple[str, str, str]]:
    """(section, key, raw value) of every directive, with systemd's line continuation (a line
    ending in a backslash goes on) and comments (# or ; at the start) skipped."""
    out: list[tuple[str, str, str]] = []
    section, pending = "", ""
    for raw in text.split("\n"):  # systemd ends a line at \n only (not at U+2028, U+0085...)
        raw = raw.removesuffix("\r")
        line = pending + raw
        pending = ""
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending = stripped[:-1] + " "
            continue
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1]
            continue
        key, sep, value = stripped.partition("=")
        if sep:
            out.append((section, key.strip(), value.strip()))
    return out
