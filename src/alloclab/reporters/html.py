"""report.html: one self-contained page (styles, plotly.js, data and charts inline; no network when
opened), readable on a laptop and a phone. Everything from the store or the experiment file is
escaped: text through html.escape, data in a JSON script tag with <, > and & as \\u escapes."""

from __future__ import annotations

import html
import json
import re
from functools import lru_cache
from pathlib import Path

from ..common.outputs import write_output
from ..stats import status_phrase
from .input import ReportInput, Section
from .markdown import METHOD_NOTE, extra_table_rows, group_rows, metadata_rows, replica_rows, summary_note
from .plots import report_figures
from .tables import BESIDE_INTRO, STATUS_RULES, TABLE_HEADERS, beside_lines, table_cells

SEVERITY_ORDER = ("serious", "caution", "info")


def esc(s: object) -> str:
    return html.escape("" if s is None else str(s), quote=True)


def inline_markdown(text: str) -> str:
    """Escaped text with the recommendation's **bold** and *emphasis* as tags."""
    out = esc(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", out)


def script_json(obj: object) -> str:
    """JSON safe inside <script type="application/json">: no '</script>', no '<!--', no entity games."""
    return (
        json.dumps(obj, allow_nan=False, separators=(",", ":"), default=str)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """plotly.js as shipped inside the plotly Python package (one copy per page, no CDN)."""
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    if "</script" in js.lower():  # would end the inline script early
        js = re.sub(r"</(script)", r"<\\/\1", js, flags=re.I)
    return js


def table(headers: list[str], rows: list[list[str]], cls: str = "", raw_cols: tuple[int, ...] = ()) -> str:
    """An escaped table in a horizontally scrolling wrapper (phones). raw_cols: cells already HTML."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if i in raw_cols else esc(c)}</td>" for i, c in enumerate(r)) + "</tr>" for r in rows
    )
    return f'<div class="scroll"><table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


CSS = """
:root{--fg:#1d2329;--muted:#5b6770;--bg:#fff;--line:#dde3e8;--serious:#b00020;--serious-bg:#fde7ea;
--caution:#8a5a00;--caution-bg:#fff4d6;--info:#0b5394;--info-bg:#e8f1fb;--ok:#1e7b34;--ok-bg:#e6f4ea}
*{box-sizing:border-box}body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:1200px;margin:0 auto;padding:16px}h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin:1.4em 0 .5em;
border-bottom:1px solid var(--line);padding-bottom:.2em}.sub{color:var(--muted);margin:0}
nav{display:flex;flex-wrap:wrap;gap:.3em .9em;margin:.8em 0;font-size:.9em}nav a{color:var(--info)}
.rec{border-left:5px solid var(--info);background:var(--info-bg);padding:.6em 1em;border-radius:4px}
.rec .headline{font-size:1.1em;font-weight:600}
.rec.conf-high{border-color:var(--ok);background:var(--ok-bg)}.rec.conf-low,.rec.conf-none{border-color:var(--caution);background:var(--caution-bg)}
.badge{display:inline-block;font-size:.75em;font-weight:600;text-transform:uppercase;padding:.1em .5em;border-radius:3px;margin-right:.4em;color:#fff}
ul.warnings{list-style:none;padding:0}ul.warnings li{padding:.5em .8em;margin:.4em 0;border-radius:4px;border-left:5px solid}
li.sev-serious{background:var(--serious-bg);border-color:var(--serious)}li.sev-serious .badge{background:var(--serious)}
li.sev-caution{background:var(--caution-bg);border-color:var(--caution)}li.sev-caution .badge{background:var(--caution)}
li.sev-info{background:var(--info-bg);border-color:var(--info)}li.sev-info .badge{background:var(--info)}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch;max-width:100%}table{border-collapse:collapse;font-size:.88em;margin:.4em 0}
th,td{border-bottom:1px solid var(--line);padding:.3em .55em;text-align:left;vertical-align:top}th{background:#f4f6f8;white-space:nowrap}
td{font-variant-numeric:tabular-nums}table.summary td:first-child{font-weight:600}table.summary td:nth-child(2),.nw{white-space:nowrap}
figure{margin:1.2em 0}figure h3{font-size:1em;margin:0 0 .2em}.chart{width:100%;min-height:380px}figcaption{color:var(--muted);font-size:.88em}
pre{background:#f4f6f8;padding:.8em;overflow-x:auto;font-size:.85em;border-radius:4px;white-space:pre}
details{margin:.3em 0}summary{cursor:pointer}
@media (max-width:640px){main{padding:8px}body{font-size:14px}.chart{min-height:320px}th,td{padding:.25em .35em}}
"""

RENDER_JS = """
(function () {
  var payload = JSON.parse(document.getElementById('alloclab-data').textContent);
  var narrow = window.innerWidth < 640;
  // on a phone the toolbar (shown on a tap) would cover the legend, which wraps across the width:
  // left out there (pinch and double-tap still zoom)
  var config = {responsive: true, displaylogo: false, displayModeBar: narrow ? false : 'hover'};
  payload.figures.forEach(function (f) {
    var el = document.getElementById('chart-' + f.id);
    var layout = f.figure.layout;
    layout.autosize = true;
    if (narrow) { layout.margin = {l: 48, r: 8, t: 44, b: 60}; }
    Plotly.newPlot(el, f.figure.data, layout, config).then(function () { el.setAttribute('data-drawn', 'yes'); });
  });
})();
"""


TOP_MARGIN = 44  # room above the plot for plotly's toolbar, so it never covers a legend or a phase name


def lift_title(figure: dict) -> str:
    """Take the chart's title out of the plot (a heading above it wraps on a phone; a plotly title
    does not) and return it as plain text."""
    layout = figure["layout"]
    title = (layout.pop("title", None) or {}).get("text", "")
    layout["margin"] = {**layout.get("margin", {}), "t": TOP_MARGIN}
    return html.unescape(title)


def section_html(s: Section, figures: list[dict]) -> str:
    parts = [f'<section id="sec-{esc(s.key)}"><h2>{esc(s.title)}</h2>']
    parts += [f"<p>{inline_markdown(p)}</p>" for p in s.paragraphs]
    if s.table:
        parts.append(table(s.table.headers, s.table.rows))
    for i, fig in enumerate(s.figures):
        fid = f"{s.key}-{i}"
        fig = {"data": fig.get("data", []), "layout": dict(fig.get("layout", {}))}
        title = lift_title(fig)
        figures.append({"id": fid, "figure": fig})
        parts.append(f'<figure><h3>{esc(title)}</h3><div class="chart" id="chart-{esc(fid)}"></div></figure>')
    return "".join(parts) + "</section>"


def _key_cells(cells: list[str]) -> list[str]:
    """The ratio cell as HTML: its estimate and its interval each kept whole ("1.40×" / "[1.23–1.59]"),
    free to go on two lines, so the key columns fit a phone without breaking a number."""
    out = list(cells)
    out[2] = " ".join(f'<span class="nw">{esc(part)}</span>' for part in cells[2].split(" "))
    return out


def render(report: ReportInput) -> str:
    a = report.analysis
    rec = a.recommendation
    drawn = report_figures(a, report.events)
    figures = [{"id": i, "figure": f} for i, _, f in drawn]
    captions = {i: c for i, c, _ in drawn}
    titles = {f["id"]: lift_title(f["figure"]) for f in figures}
    warn = sorted(a.warnings, key=lambda w: SEVERITY_ORDER.index(w.severity) if w.severity in SEVERITY_ORDER else 9)
    body = [
        f"<header><h1>alloclab report: {esc(report.run_name)}</h1>",
        f'<p class="sub">{esc(a.metric.upper())} · baseline {esc(a.baseline)} · {esc(report.meta.get("host", ""))} · '
        f"{esc(report.meta.get('source', 'run'))}</p></header>",
    ]
    links = [
        ("recommendation", "Recommendation"),
        ("warnings", f"Warnings ({len(warn)})"),
        ("summary", "Summary"),
        ("charts", "Charts"),
        *((f"sec-{s.key}", s.title) for s in report.sections),
        ("provenance", "Allocator builds"),
        ("host", "Host and run"),
        ("replicas", "Replicas"),
        ("experiment", "Experiment file"),
        ("method", "Method"),
    ]
    body.append("<nav>" + "".join(f'<a href="#{esc(k)}">{esc(t)}</a>' for k, t in links) + "</nav>")
    conf = esc(rec.confidence if rec else "none")
    body.append(
        f'<section id="recommendation" class="rec conf-{conf}"><h2>Recommendation</h2>'
        + (
            f'<p class="headline">{inline_markdown(rec.headline())}</p><p>{inline_markdown(rec.detail())}</p>'
            if rec
            else "<p>No recommendation.</p>"
        )
        + "</section>"
    )
    body.append(f'<section id="warnings"><h2>Warnings ({len(warn)})</h2>')
    if warn:
        body.append(
            '<ul class="warnings">'
            + "".join(
                f'<li class="sev-{esc(w.severity)}" data-kind="{esc(w.kind)}"><span class="badge">{esc(w.severity)}</span>'
                f"<strong>{esc(w.kind)}</strong>: {esc(w.message)}</li>"
                for w in warn
            )
            + "</ul>"
        )
    else:
        body.append("<p>None.</p>")
    body.append("</section>")
    body.append(
        f'<section id="summary"><h2>Summary</h2><p>{esc(summary_note(a))}</p>'
        + table(TABLE_HEADERS, [_key_cells(table_cells(r)) for r in report.rows], "summary", raw_cols=(2,))
        + table(*extra_table_rows(report))
        + "<h3>Growth across replicas</h3><ul>"
        + "".join(
            f"<li><strong>{esc(g.name)}</strong> ({esc(status_phrase(g.status, g.growth_shape))}): {esc(g.growth.reason or 'not tested')}</li>"
            for g in a.groups
            if g.growth
        )
        + "</ul>"
        + (
            f"<p>{esc(BESIDE_INTRO)}</p><ul>"
            + "".join(
                f"<li><strong>{esc(name)}</strong> {esc(word)}: {esc(why)}</li>" for name, word, why in beside_lines(a)
            )
            + "</ul>"
            if beside_lines(a)
            else ""
        )
        + "</section>"
    )
    body.append('<section id="charts"><h2>Charts</h2>')
    for f in figures:
        body.append(
            f'<figure><h3>{esc(titles[f["id"]])}</h3><div class="chart" id="chart-{esc(f["id"])}"></div>'
            f"<figcaption>{esc(captions.get(f['id'], ''))}</figcaption></figure>"
        )
    body.append("</section>")
    for s in report.sections:
        body.append(section_html(s, figures))
    body.append('<section id="provenance"><h2>Allocator builds</h2>' + table(*group_rows(report)))
    for g in report.groups:
        detail = (
            json.dumps(g.provenance, indent=2, sort_keys=True)
            if g.provenance
            else "no catalog build record (a system library, a path given in the experiment, or glibc)"
        )
        body.append(
            f"<details><summary>{esc(g.name)}: provenance</summary><pre>{esc(detail)}</pre>"
            f"<p>library {esc(g.library_path or '–')}<br>sha256 {esc(g.library_sha256 or '–')}</p></details>"
        )
    body.append("</section>")
    body.append(
        '<section id="host"><h2>Host and run</h2>'
        + table(["run fact", "value"], metadata_rows(report))
        + table(["host fact", "value"], [[k, v] for k, v in report.host.items()])
        + "</section>"
    )
    body.append(
        '<section id="replicas"><h2>Replicas</h2>'
        + table(*replica_rows(report, strong=lambda s: s.upper()))
        + "</section>"
    )
    body.append(
        '<section id="experiment"><h2>Experiment file</h2>'
        + (
            f'<pre id="experiment-text">{esc(report.experiment_text)}</pre>'
            if report.experiment_text is not None
            else "<p>None recorded (imported data).</p>"
        )
        + "</section>"
    )
    body.append(
        '<section id="method"><h2>How the status words are decided</h2><ul>'
        + "".join(f"<li><strong>{esc(w)}</strong>: {esc(rule)}</li>" for w, rule in STATUS_RULES.items())
        + f"</ul><p>{esc(METHOD_NOTE)}</p></section>"
    )
    payload = {"figures": figures, "summary": report.rows}
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>alloclab report: {esc(report.run_name)}</title><style>{CSS}</style></head><body><main>"
        + "\n".join(body)
        + "</main>\n"
        f'<script type="application/json" id="alloclab-data">{script_json(payload)}</script>\n'
        f"<script>{plotly_js()}</script>\n<script>{RENDER_JS}</script>\n</body></html>\n"
    )


class HtmlReporter:
    name = "html"

    def write(self, report: ReportInput, out_dir: Path) -> list[Path]:
        return [write_output(out_dir, "report.html", render(report))]
