"""Regenerate the `config` section of values.schema.json from s3kv's one settings table.

The chart's ConfigMap turns each `config.<name>` value into the environment variable
`S3KV_<NAME>` that `s3kv serve` reads (s3kv/config.py). This script writes one schema property
per setting, with the setting's help text, type and choices, so the chart accepts exactly the
settings the gateway reads. tests/deploy/test_chart.py fails when the two drift apart.

    python charts/s3kv/sync_settings.py          # rewrite values.schema.json
    python charts/s3kv/sync_settings.py --check  # exit 1 if it is out of date
"""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from s3kv.config import Settings

SCHEMA = Path(__file__).with_name("values.schema.json")

#: settings the chart sets itself rather than from `config`: the listen address follows
#: `containerPort`, the replica id follows the pod (or node), and keys come from the Secret
CHART_MANAGED = {"listen", "node_id", "access_key", "secret_key"}

SIZE_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*([kKmMgGtT][iI]?[bB]?|[bB])?\s*$"


def setting_schema(kind: str, choices: tuple[str, ...], help_text: str, env: str) -> dict[str, Any]:
    desc = f"{help_text} (rendered as {env})"
    if choices:
        return {"type": "string", "enum": list(choices), "description": desc}
    if kind == "size":
        return {"description": desc + "; bytes or a size such as 256MiB",
                "anyOf": [{"type": "integer", "minimum": 0},
                          {"type": "string", "pattern": SIZE_PATTERN}]}
    if kind == "int":
        return {"type": "integer", "description": desc}
    if kind == "float":
        return {"type": "number", "minimum": 0, "description": desc}
    if kind == "bool":
        return {"type": "boolean", "description": desc}
    return {"type": "string", "description": desc}


def config_schema() -> dict[str, Any]:
    props = {}
    for f in fields(Settings):
        if f.name in CHART_MANAGED:
            continue
        meta = f.metadata
        props[f.name] = setting_schema(meta["kind"], meta["choices"], meta["help"],
                                       Settings.env_name(f.name))
    return {
        "type": "object",
        "description": "gateway settings (s3kv serve --help); each key becomes S3KV_<NAME> in "
                       "the ConfigMap. listen, node_id and the keys are set by the chart.",
        "additionalProperties": False,
        "properties": props,
    }


def main(argv: list[str]) -> int:
    schema = json.loads(SCHEMA.read_text())
    want = config_schema()
    if "--check" in argv:
        if schema["properties"].get("config") != want:
            print(f"{SCHEMA} is out of date with s3kv/config.py: run "
                  f"python {Path(__file__).as_posix()}", file=sys.stderr)
            return 1
        return 0
    schema["properties"]["config"] = want
    SCHEMA.write_text(json.dumps(schema, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
