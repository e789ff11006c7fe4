"""`rolecall report`: one self-contained HTML page (inline SVG, no network) from run directories."""
from rolecall.report.html import build_page, write_report
from rolecall.report.load import ReportError, Run, load_run, normalise

__all__ = ["ReportError", "Run", "build_page", "load_run", "normalise", "write_report"]
