"""HTML building blocks: escaping, the page layout, the one stylesheet and the security headers.

Everything dynamic goes through ``e()`` (``html.escape`` with quotes), so a log line holding
``<script>`` is text on the page. The stylesheet is inline and allowed by its hash in the
Content-Security-Policy; nothing else may load or run (``default-src 'none'``, no script at
all), and there are no external assets: GPU nodes are often offline.
"""

from __future__ import annotations

import base64
import hashlib
import html
import urllib.parse
from datetime import UTC, datetime

from sigwatch.model import Severity
from sigwatch.visible import visible
from sigwatch.web.request import Response

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "CSS",
    "SECURITY_HEADERS",
    "ago",
    "e",
    "error_page",
    "fmt_time",
    "layout",
    "safe_href",
    "severity_badge",
]

CSS = """
:root{color-scheme:light dark;--fg:#1b1f24;--bg:#fff;--muted:#5b6570;--line:#d5dae0;
--soft:#f4f6f8;--hit:#fff3b0;--link:#0b57d0;--crit:#8b0000;--err:#c0392b;--warn:#9a6700;
--info:#3b6e8f}
@media (prefers-color-scheme:dark){:root{--fg:#e6e8eb;--bg:#15181c;--muted:#9aa4ae;
--line:#343a41;--soft:#1e2227;--hit:#4d4300;--link:#8ab4f8}}
*{box-sizing:border-box}
body{margin:0;font:16px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
color:var(--fg);background:var(--bg);overflow-wrap:anywhere}
header{display:flex;flex-wrap:wrap;gap:.25rem 1rem;align-items:baseline;padding:.6rem 1rem;
border-bottom:1px solid var(--line);background:var(--soft)}
header .brand{font-weight:700;color:var(--fg);text-decoration:none}
header nav{display:flex;flex-wrap:wrap;gap:.75rem;font-size:.95rem}
main{max-width:72rem;margin:0 auto;padding:1rem}
h1{font-size:1.35rem;margin:.2rem 0 .6rem;overflow-wrap:anywhere}
h2{font-size:1.1rem;margin:1.6rem 0 .5rem;border-bottom:1px solid var(--line);
padding-bottom:.2rem}
a{color:var(--link)}
.muted{color:var(--muted)}
.sev{display:inline-block;padding:0 .45rem;border-radius:.6rem;font-size:.8rem;
font-weight:700;text-transform:uppercase;color:#fff;vertical-align:middle}
.sev-critical{background:var(--crit)}.sev-error{background:var(--err)}
.sev-warning{background:var(--warn)}.sev-info{background:var(--info)}
.sev,th,label,button{overflow-wrap:normal;white-space:nowrap}
.state{font-weight:700}.state-bad{color:var(--err)}.state-ok{color:#2e7d32}
table{border-collapse:collapse;width:100%;font-size:.95rem}
th,td{text-align:left;vertical-align:top;padding:.35rem .5rem;border-bottom:1px solid var(--line)}
th{font-size:.85rem;color:var(--muted);font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
code,pre,.mono{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;
font-size:.88rem}
td .mono,.excerpt{overflow-wrap:anywhere}
pre.log{background:var(--soft);border:1px solid var(--line);border-radius:.3rem;padding:.5rem;
white-space:pre-wrap;overflow-wrap:anywhere;margin:.4rem 0}
pre.log span{display:block}
pre.log .ctx{color:var(--muted)}
pre.log mark{display:block;background:var(--hit);color:var(--fg);font-weight:700;
border-left:4px solid var(--err);padding-left:.3rem}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem;margin:.4rem 0}
dl.meta dt{color:var(--muted)}dl.meta dd{margin:0;overflow-wrap:anywhere}
form.filters{display:flex;flex-wrap:wrap;gap:.5rem;align-items:end;margin:.5rem 0 1rem}
form.filters label{display:flex;flex-direction:column;font-size:.85rem;color:var(--muted)}
select,button{font:inherit;padding:.3rem .4rem;max-width:100%}
.pager{display:flex;gap:1rem;margin:.8rem 0}
header .node{font-weight:700;font-size:1.05rem}
h1.headline{font-size:1.3rem;margin:.1rem 0 .2rem}
.headline-bad{color:var(--err)}.headline-ok{color:#2e7d32}
p.counts{margin:0 0 .5rem;color:var(--muted)}
article.incident{border:1px solid var(--line);border-left:6px solid var(--info);
border-radius:.3rem;padding:.5rem .8rem;margin:.6rem 0}
.incident-critical{border-left-color:var(--crit)!important}
.incident-error{border-left-color:var(--err)!important}
.incident-warning{border-left-color:var(--warn)!important}
h2.incident-title{font-size:1.1rem;margin:.1rem 0 .2rem;border:0;padding:0}
article.incident p{margin:.2rem 0}
article.incident pre.trigger{margin:.3rem 0}
.fix{background:var(--soft);border-radius:.3rem;padding:.3rem .6rem;margin:.3rem 0}
.fix ol.steps{margin:.2rem 0;padding-left:1.4rem}
details.fallout summary,details.filters summary{cursor:pointer;color:var(--link)}
details.filters{margin:.3rem 0 .6rem}
.box{border:1px solid var(--line);border-radius:.3rem;padding:.6rem .8rem;margin:.5rem 0}
ol.steps li{margin:.25rem 0}
@media (max-width:700px){
main{padding:.6rem}
header{padding:.4rem .6rem}
header nav{font-size:.85rem;gap:.6rem}
article.incident{padding:.4rem .5rem}
.fix ol.steps{padding-left:1.1rem}
table.cards thead{display:none}
table.cards,table.cards tbody,table.cards tr,table.cards td{display:block;width:100%}
table.cards tr{border:1px solid var(--line);border-radius:.3rem;margin:.5rem 0;padding:.3rem}
table.cards td{border:0;padding:.15rem .3rem}
table.cards td.num{text-align:left}
table.cards td[data-label]::before{content:attr(data-label) ": ";color:var(--muted);
font-size:.8rem}
dl.meta{grid-template-columns:1fr}dl.meta dd{margin-bottom:.3rem}
}
""".strip()

_CSS_HASH = base64.b64encode(hashlib.sha256(CSS.encode("utf-8")).digest()).decode("ascii")

CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src 'sha256-{_CSS_HASH}'; img-src 'none'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
"""No script, no external resource, only our stylesheet; forms submit only to this server."""

SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
)


def e(value: object) -> str:
    """Escape for HTML text and attribute values (quotes included); controls, bidirectional
    overrides and a file name's undecodable bytes are shown as escapes (``sigwatch.visible``)."""
    return html.escape(visible(str(value)), quote=True)


def safe_href(url: str) -> str | None:
    """``url`` when it is an absolute http(s) link, else None (no ``javascript:`` links)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return None
    if parts.scheme.lower() in {"http", "https"} and parts.netloc:
        return url.strip()
    return None


def fmt_time(t: float) -> str:
    """``2024-05-01 10:02:11 UTC``: one zone for every node of a fleet."""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(t: float, now: float) -> str:
    """A short relative age: ``45 s ago``, ``12 min ago``, ``3 h ago``, ``2 d ago``."""
    delta = max(0.0, now - t)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if delta >= size:
            return f"{int(delta // size)} {unit} ago"
    return f"{int(delta)} s ago"


def severity_badge(severity: Severity) -> str:
    return f'<span class="sev sev-{severity.label}">{severity.label}</span>'


def layout(title: str, body: str, *, node: str = "") -> bytes:
    """A whole page: head, the navigation bar and ``body`` (already escaped HTML).

    ``node`` is the name the daemon reports as (``--node``, else the host name): on-call reads
    it first, so it is in the title and the header.
    """
    where = f" on {e(node)}" if node else ""
    name = f'<span class="node">{e(node)}</span>' if node else ""
    page = (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · sigwatch{where}</title><style>{CSS}</style></head><body>"
        f'<header><a class="brand" href="/">sigwatch</a>{name}'
        '<nav><a href="/">Incidents</a><a href="/#detections">Detections</a>'
        '<a href="/#sources">Readers</a><a href="/api/v1/detections">JSON</a>'
        '<a href="/metrics">Metrics</a></nav></header>'
        f"<main>{body}</main></body></html>\n"
    )
    return page.encode("utf-8", "backslashreplace")  # a surrogate never makes a 500


def error_page(status: int, message: str, headers: list[tuple[str, str]] | None = None,
               ) -> Response:
    body = f'<h1>{status}</h1><p>{e(message)}</p><p><a href="/">Back to the detections</a></p>'
    return Response(status, layout(str(status), body), "text/html; charset=utf-8", headers or [])
