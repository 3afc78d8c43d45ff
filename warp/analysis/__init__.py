"""Analysis of saved records, with Warp's semantics (see :mod:`warp.analysis.aggregate`)."""

from __future__ import annotations

from warp.analysis.aggregate import (
    AnalysisOptions,
    OpAnalysis,
    Percentiles,
    analyze,
    analyze_files,
    percentile,
)

__all__ = ["AnalysisOptions", "OpAnalysis", "Percentiles", "analyze", "analyze_files",
           "percentile"]
