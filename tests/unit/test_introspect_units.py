"""Introspection pieces without processes: config keys, the schema-4 migration, the text parsers
(on text captured from the real libraries, see docs/how-to/introspection.md), records and staleness."""

from __future__ import annotations

import sqlite3

import pytest

from alloclab.capture import introspect
from alloclab.common.errors import UserError
from alloclab.experiment_file import parse_experiment
from alloclab.store import SCHEMA_VERSION, Store

BASE = 'name = "x"\ncommand = ["true"]\n{extra}\n[[group]]\nname = "g"\nallocator = "glibc"\n'

# mimalloc 2.0.9's table (captured from frag under Debian's libmimalloc.so.2)
MI_209 = """heap stats:    peak      total      freed    current       unit      count
  reserved:  160.0 MiB  160.0 MiB      0      160.0 MiB
 committed:  160.0 MiB  235.1 MiB   75.6 MiB  159.4 MiB
     reset:      0          0          0          0                            ok
  segments:      4         36         36          0                            ok
-abandoned:      4          4          0          4                            not all freed!
     pages:      0          0        9.1 Ki    -9.1 Ki                         ok
-abandoned:    1.4 Ki     1.4 Ki       0        1.4 Ki                         not all freed!
   threads:      3          3          4         -1                            ok
"""
# mimalloc 3.6.1's sections (abridged capture)
MI_361 = """subproc 0
 blocks            peak       total     current       block      total#
  bin S   24  :     1.4 MiB   190.7 MiB   637.4 KiB     1.0 KiB   195.3 K    not all freed

  allocated   :    86.9 MiB    15.6 GiB    17.2 MiB
  freed       :                15.6 GiB

 pages             peak       total     current
  pages       :     1.4 K       6.9 K     292
  abandoned   :     1.4 K      65.4 K     285

 arenas            peak       total     current
  reserved    :     1.0 GiB     1.0 GiB     1.0 GiB
  committed   :   152.9 MiB   152.9 MiB   152.9 MiB
  purged      :     3.0 MiB
"""
MALLOC_INFO = """<malloc version="1">
<heap nr="0">
<sizes>
</sizes>
<total type="fast" count="3" size="96"/>
<total type="rest" count="10" size="5000"/>
<system type="current" size="135168"/>
</heap>
<heap nr="1">
<total type="fast" count="0" size="0"/>
<total type="rest" count="2" size="700"/>
</heap>
<total type="fast" count="3" size="96"/>
</malloc>
"""


def test_config_keys():
    exp = parse_experiment(BASE.format(extra="introspect = true\nintrospect_budget = 0.02"))
    assert exp.introspect is True and exp.introspect_budget == 0.02
    assert parse_experiment(BASE.format(extra="")).introspect is False
    with pytest.raises(UserError, match="introspect"):
        parse_experiment(BASE.format(extra='introspect = "yes"'))
    with pytest.raises(UserError, match="introspect_budget"):
        parse_experiment(BASE.format(extra="introspect_budget = 2"))


def _schema4_store(db):
    """A store as alloclab wrote it at schema 4: no alloc_stats table (schema 5 added it)."""
    store = Store.create(db)
    store.conn.execute("DROP TABLE alloc_stats")
    store.set_meta(schema_version=4)
    store.close()


def test_schema4_store_gains_alloc_stats(tmp_path):
    db = tmp_path / "run.db"
    _schema4_store(db)
    reopened = Store.open(tmp_path)
    assert reopened.meta()["schema_version"] == str(SCHEMA_VERSION) and reopened.alloc_stats() == []
    reopened.close()
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'alloc_stats'").fetchone()[0] == 1


def test_mimalloc_text_parsers():
    old = introspect.parse_mi_stats(MI_209)
    assert old["in_use"] is None and old["committed"] == int(159.4 * 2**20) and old["reserved"] == 160 * 2**20
    assert old["pages_abandoned"] == int(1.4 * 1024)
    new = introspect.parse_mi_stats(MI_361)
    assert new["in_use"] == int(17.2 * 2**20) and new["committed"] == int(152.9 * 2**20)
    assert new["pages_abandoned"] == 285 and new["pages"] == 292 and new["purged"] == 3 * 2**20


def test_malloc_info_parser():
    assert introspect.parse_malloc_info(MALLOC_INFO) == [5096, 700]


def test_staleness():
    rec = introspect.Record("glibc", 1000.0, 3, 0.0, 0.0, 1.0, {}, "", 0, "")
    assert not introspect.is_stale(rec, 1004.9) and introspect.is_stale(rec, 1005.1)


def test_an_older_schemas_store_is_upgraded_for_reading_not_called_damaged(tmp_path, monkeypatch):
    """report/compare/export open stores with Store.open_checked: a schema-4 store lacks alloc_stats
    (schema 5), which the damage check read as 'table alloc_stats is missing'."""
    _schema4_store(tmp_path / "run.db")
    reread = Store.open_checked(tmp_path)
    assert reread.meta()["schema_version"] == str(SCHEMA_VERSION) and reread.alloc_stats() == []
    reread.close()
    _schema4_store(tmp_path / "b.db")
    monkeypatch.setattr("alloclab.store.os.access", lambda path, mode: False)  # root may write anywhere
    with pytest.raises(UserError, match=r"has schema 4, older than this alloclab's .* cannot be upgraded"):
        Store.open_checked(tmp_path / "b.db")
