"""The page ``dvc plots show`` fills, with Vega, Vega-Lite and Vega-Embed inlined.

DVC's own page loads the three libraries from a CDN, so on a machine without network the
charts are blank. ``.dvc/config`` names this page instead (``plots.html_template``); it has no
``{scripts}`` placeholder, so DVC adds none of its script tags, and the libraries come from
the ``vl-convert-python`` package (installed with multilab from PyPI's default index), whose
bundle puts ``vega``, ``vegaLite`` and ``vegaEmbed`` on ``window``, as DVC's charts expect.

Bundling takes seconds, so the page is written once per vl-convert version (its first line
says which); the ``plots_page`` stage keeps it (``persist``) and rewrites it only when that
line changes.
"""

from __future__ import annotations

from pathlib import Path

from multilab.errors import UserError
from multilab.files import write_text

#: DVC's chart specs are Vega-Lite 5 (dvc-render's templates); the bundle's compiler matches
VEGA_LITE_VERSION = "5.21"
#: bump when the page's own HTML changes, so that an older page is rewritten
PAGE_VERSION = 1

_PAGE = """<!DOCTYPE html>
<!-- {stamp} -->
<html>
<head>
<meta charset="utf-8">
<title>multilab: DVC plots</title>
<script>
{bundle}
</script>
<script>
// DVC's charts call vegaEmbed(element, spec): no link to the online editor, export kept
(function () {{
  var embed = window.vegaEmbed;
  window.vegaEmbed = function (element, spec, options) {{
    var actions = {{export: true, source: true, compiled: false, editor: false}};
    return embed(element, spec, Object.assign({{actions: actions}}, options || {{}}));
  }};
}})();
</script>
<style>
body {{ font-family: sans-serif; margin: 1em 2em; }}
body > div {{ display: inline-block; vertical-align: top; margin: 0 2em 2em 0; }}
</style>
</head>
<body>
<h1>multilab: training curves</h1>
<p>Every study row and the variant in its own colour. Drawn offline: Vega {vega}, Vega-Lite
{vega_lite} and Vega-Embed {embed} are in this page.</p>
{{plot_divs}}
</body>
</html>
"""


def _stamp() -> str:
    import vl_convert

    version = getattr(vl_convert, "__version__", "") or vl_convert.get_vega_version()
    return (f"multilab plots page {PAGE_VERSION}, vl-convert {version}, "
            f"Vega-Lite {VEGA_LITE_VERSION}")


def write_plots_page(path: Path) -> bool:
    """Write the page unless the one there was made by this vl-convert and page version;
    returns whether it wrote."""
    try:
        import vl_convert
    except ImportError as err:
        raise UserError("the offline page of `dvc plots show` needs vl-convert-python "
                        "(`pip install -e .` installs it)") from err
    stamp = _stamp()
    if path.is_file():
        with path.open(encoding="utf-8") as handle:
            handle.readline()
            if handle.readline().strip() == f"<!-- {stamp} -->":
                return False
    bundle = vl_convert.javascript_bundle(vl_version=VEGA_LITE_VERSION)
    if "</script" in bundle.lower():  # would end the inline script early
        bundle = bundle.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")
    page = _PAGE.format(stamp=stamp, bundle=bundle, vega=vl_convert.get_vega_version(),
                        vega_lite=VEGA_LITE_VERSION,
                        embed=vl_convert.get_vega_embed_version())
    write_text(path, page)
    return True
