"""Limits checked on the raw text, before tomllib parses it (a long dotted key costs tomllib time
quadratic in its length: 40 KB took 16 s, docs/reference/security.md "Hostile experiment files")."""

from __future__ import annotations

import pytest

from alloclab import experiment_file
from alloclab.common.errors import UserError

GOOD = 'name = "x"\ncommand = ["/bin/true"]\n[[group]]\nname = "a"\nallocator = "glibc"\n'


def _no_parse(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("tomllib was called before the depth limit was checked")

    monkeypatch.setattr(experiment_file.tomllib, "loads", refuse)


@pytest.mark.parametrize(
    "text",
    [
        "a." * 20_000 + "a = 1\n",  # 40 KB: the campaign's 16 s file
        "a." * 16 + "a = 1\n",  # one part over the limit
        '"a" . ' * 17 + '"a" = 1\n',  # quoted parts, spaces around dots
        "[" + "a." * 500 + "a]\n",  # a table header
        "x = { " + "b." * 300 + "b = 1 }\n",  # inside an inline table
    ],
    ids=["40KB", "17-parts", "quoted", "header", "inline"],
)
def test_a_deep_dotted_key_is_refused_before_parsing(monkeypatch, text):
    _no_parse(monkeypatch)
    with pytest.raises(UserError) as e:
        experiment_file.parse_experiment(GOOD + text, "exp.toml")
    assert "dotted key" in str(e.value) and "16 deep" in str(e.value)


def test_dots_inside_strings_and_comments_are_not_keys():
    text = GOOD.replace('name = "x"', 'name = "x" # ' + "c." * 40) + 'env = { V = "' + "1." * 40 + '1" }\n'
    exp = experiment_file.parse_experiment(text, "exp.toml")
    assert exp.groups[0].env["V"].count(".") == 40
    experiment_file.parse_experiment(
        GOOD + "[[group]]\nname = 'b'\nallocator = '''glibc'''\n# " + "a." * 100 + "\n", "exp.toml"
    )
