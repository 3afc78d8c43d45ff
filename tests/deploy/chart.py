"""Rendering the Helm chart (charts/s3kv) in-process for its tests.

No `helm` binary can be installed here. `helm-python-sdk` bundles Helm's own Go SDK (v4) as a
shared library, so `helm lint` and `helm template` run in-process with Helm's real template
engine, values coalescing and values.schema.json validation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "s3kv"
CI_FILES = sorted((CHART / "ci").glob("*.yaml"))


class _StrictLoader(yaml.SafeLoader):
    """YAML loader that rejects duplicate keys, as the API server's strict decoding does."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False
                   ) -> dict[Any, Any]:
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dupes = {k for k in keys if keys.count(k) > 1}
    if dupes:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {dupes}",
                                                node.start_mark)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def load_values(path: Path | None) -> dict[str, Any] | None:
    return yaml.safe_load(path.read_text()) if path else None


def render(values: dict[str, Any] | None = None, *, name: str = "rel",
           namespace: str = "kv") -> list[dict[str, Any]]:
    """`helm template`: every rendered object (NOTES.txt and empty documents left out)."""
    with helm.Chart.load(str(CHART)) as chart:
        files = chart.render(values, name=name, namespace=namespace, is_install=True)
    docs = []
    for path, text in sorted(files.items()):
        if not path.endswith(".yaml"):
            continue
        for doc in yaml.load_all(text, Loader=_StrictLoader):  # a SafeLoader subclass
            if doc:
                doc["__template__"] = path
                docs.append(doc)
    return docs


def notes(values: dict[str, Any] | None = None) -> str:
    with helm.Chart.load(str(CHART)) as chart:
        files = chart.render(values, name="rel", namespace="kv", is_install=True)
    return next(text for path, text in files.items() if path.endswith("NOTES.txt"))


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    workload = [d for d in docs if d["kind"] in ("Deployment", "DaemonSet")]
    assert len(workload) == 1
    spec: dict[str, Any] = workload[0]["spec"]["template"]["spec"]
    return spec


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


CASES = [pytest.param(None, id="defaults")] + [pytest.param(p, id=p.stem) for p in CI_FILES]

