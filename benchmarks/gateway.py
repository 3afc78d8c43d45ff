"""Gateway benchmark: the gateway's S3 front against one object per block, in one run.

Measured side by side against the same S3 server (Ceph RGW by default; ``--server s3rver``,
``--server moto``, or ``--endpoint URL`` for a running one), with the same client on both sides
(``--client``, benchmarks/s3_clients.py: aiobotocore by default, SigV4, path-style, one
connection per concurrent request; or ``warp``); ``--split-cores`` puts the server on one CPU and
the client plus the gateway on the other (benchmarks/harness.py).

The client shares the inference core with the gateway, so its own CPU bounds what the
comparison can show: with ``--split-cores`` on a 2-core machine, aiobotocore's own CPU per GiB
of 256 KiB PUTs (the ``client`` entry of ``{side}_put_cpu_s_per_GiB_...``) holds the gateway's
PUT ratio near 3 however cheap the gateway gets.
``--client warp`` drives both sides with the load generator's own client instead (warp.s3's
``S3Client``, as ``s3kv bench put|get`` does: raw aiohttp, its own SigV4 signer,
UNSIGNED-PAYLOAD bodies sent as views of the block; GETs still read each whole body and compare
it with the block). ``--payload`` is aiobotocore's; warp's client always sends
UNSIGNED-PAYLOAD. The JSON records both (``client``, ``payload``).

What is measured:

- block PUT and GET throughput through the gateway's S3 front (a ``s3kv serve`` subprocess on
  an ``s3://`` store on that server) against the same client writing one object per block
  straight to the server, for 256 KiB and 2 MiB blocks at concurrency 1 and 8. The gateway's
  timed PUT phase ends with ``POST /v1/flush``, so every byte is on the server when the clock
  stops; its GETs are served from the server (the DRAM tier is off);
- the time to restore a 10K-token session (Qwen2.5-7B geometry: 56 KiB per token, 16-token
  blocks of 896 KiB, 625 blocks) as a prefix chain: one native prefix lookup plus streamed
  native batch gets (``S3KVClient.fetch``, ``--restore-batch`` keys per request, by default
  the whole chain in one; every block is received into one buffer, checked and dropped, as the
  per-block side does) against per-block GETs
  of one object per block at concurrency 8 (and, for reference, per-block GETs through the
  gateway's S3 front at concurrency 8). ``--restore-block-tokens 4,16,64`` restores the
  session in each of those block sizes, each beside its own per-block GETs: how the gap
  between one GET per block and the packed restore follows the block's size on this server
  (``restore_ratio_{T}tok``, drawn by benchmarks/restore_plot.py; ``restore_ratio`` is the
  first size's, by default 16 tokens).

Every PUT phase is also costed on the server's side: CPU-seconds per GiB written of each process
(client, gateway, and the server's: RGW's radosgw, OSD and mon, summed as ``server``) and, on
RGW, HTTP requests and bytes per GiB as radosgw counts them (``..._put_requests_per_GiB_...``);
``backend_cpu_ratio_put_256KiB`` and ``backend_requests_ratio_put_256KiB`` are the gateway's
over direct's at c=8.

Every byte read back is compared with what was written. Ratios are gateway / direct (for the
restore: per-block time / batch time); compare ratios between versions of our code, not the
absolute MiB/s of a local server (DESIGN.md, "Testing").

    python benchmarks/gateway.py --split-cores --repeats 3    # RGW, text report
    python benchmarks/gateway.py --json                # one JSON object on stdout
    python benchmarks/gateway.py --server moto --quick --json    # tiny profile (CI smoke)
    python benchmarks/gateway.py --server rgw --split-cores --client warp --repeats 3 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `s3kv` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gateway_phases import (
    BLOCK_TOKENS,
    GW_ACCESS,
    GW_SECRET,
    MODEL,
    SESSION_TOKENS,
    KiB,
    MiB,
    restore,
    throughput,
    warm_up,
)
from benchmarks.harness import (
    BenchServer,
    CPUMeter,
    Progress,
    S3Side,
    add_arguments,
    gateway_pid,
    medians,
    per_gib,
    server_counters,
)
from benchmarks.harness import gateway_process as harness_gateway
from benchmarks.runner import run_on_server
from benchmarks.s3_clients import CLIENTS, PAYLOAD_SIGNING, open_client
from s3kv.client import S3KVClient
from s3kv.gateway.native import MAX_BATCH_KEYS
from s3kv.models import block_bytes, kv_bytes_per_token
from s3kv.sizes import format_size, parse_size

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Profile:
    volume: int  # block bytes per PUT/GET phase
    session_tokens: int
    segment_size: str
    part_size: str
    warm_requests: int  # untimed 256 KiB PUT+GET pairs per side before the first phase
    etag: str = "md5"  # the gateway's --etag


#: 1 GiB per phase, four of the default segments: the gateway's PUT phases end with a flush
#: whose tail (sealing the segment being filled: its last part uploaded after the client's last
#: PUT, and the Complete) is a fixed cost per phase that a continuous write stream never pays.
#: The 384 MiB phases used until session 8 never filled a second segment, and the tail was
#: 10-20 % of a gateway phase on RGW with 64 MiB parts (docs/performance-log.md)
FULL = Profile(volume=1024 * MiB, session_tokens=SESSION_TOKENS, segment_size="256MiB",
               part_size="16MiB", warm_requests=1024)
QUICK = Profile(volume=4 * MiB, session_tokens=256, segment_size="16MiB", part_size="8MiB",
                warm_requests=16)


# ---- the gateway process -------------------------------------------------------------------
@contextmanager
def gateway_process(server: BenchServer, bucket: str, profile: Profile,
                    max_block: int) -> Iterator[str]:
    """A ``s3kv serve`` subprocess on ``s3://bucket/gw`` of the server; yields its URL."""
    args = ["--segment-size", profile.segment_size, "--part-size", profile.part_size,
            "--max-block-size", str(max_block), "--log-level", "warning",
            "--sync-interval", "0", "--node-id", "bench", "--etag", profile.etag]
    with harness_gateway(server, f"s3://{bucket}/gw?endpoint={server.url}", args,
                         access=GW_ACCESS, secret=GW_SECRET) as url:
        yield url


def gateway_client_kwargs(server: BenchServer, url: str) -> dict[str, str]:
    """``create_client`` (and :func:`open_client`) arguments for the front of the gateway at
    ``url`` (the one :func:`gateway_process` started: its credentials, the server's region)."""
    return {"endpoint_url": url, "region_name": server.region,
            "aws_access_key_id": GW_ACCESS, "aws_secret_access_key": GW_SECRET}


def gateway_flush(url: str) -> Callable[[], Awaitable[None]]:
    """``POST /v1/flush`` on the gateway at ``url``: an :class:`S3Side`'s ``flush``, so its
    timed PUT phase ends with every byte on the server."""

    async def flush() -> None:
        async with S3KVClient(url, token=f"{GW_ACCESS}:{GW_SECRET}") as kv:
            await kv.flush()

    return flush


def put_costing(meter: CPUMeter) -> Any:
    """What a PUT phase cost, per GiB of blocks written: CPU-s of each process (and the
    server's sum), and on RGW the requests and bytes radosgw counted."""

    def cost(pair: tuple[dict[str, Any], dict[str, Any]], nbytes: int) -> dict[str, Any]:
        before, after = pair
        cpu = per_gib(meter.delta(before["cpu"], after["cpu"]), nbytes)
        out: dict[str, Any] = {"cpu_s_per_GiB": cpu, "server_cpu_s_per_GiB": cpu["server"]}
        c0, c1 = before.get("counters"), after.get("counters")
        if c0 is not None and c1 is not None:
            out["requests_per_GiB"] = round((c1["req"] - c0["req"]) * (1 << 30) / nbytes, 2)
            out["server_bytes_in_per_GiB"] = round((c1["put_b"] - c0["put_b"]) / nbytes
                                                   * (1 << 30))
        else:
            out["requests_per_GiB"] = None
        return out

    return cost


async def run(server: BenchServer, profile: Profile, args: argparse.Namespace,
              say: Progress, topology: dict[str, Any]) -> dict[str, Any]:
    say(f"server: {server.name} at {server.url}")
    backend_bucket = f"gwbench-{uuid.uuid4().hex[:8]}"
    direct_bucket = f"direct-{uuid.uuid4().hex[:8]}"
    async with open_client(args.client, server.client_kwargs(), payload=args.payload) as admin:
        await admin.create_bucket(backend_bucket)
        await admin.create_bucket(direct_bucket)
    max_block = max(2 * MiB, *(block_bytes(MODEL, t) for t in args.restore_block_tokens))
    results: dict[str, Any] = {"server": server.name, "model": MODEL,
                               "segment_size": profile.segment_size,
                               "part_size": profile.part_size, "etag": profile.etag,
                               "kv_bytes_per_token": kv_bytes_per_token(MODEL),
                               "profile": "quick" if args.quick else "full",
                               "client": args.client, "payload": args.payload, **topology}
    with gateway_process(server, backend_bucket, profile, max_block) as gw_url:
        async with open_client(args.client, gateway_client_kwargs(server, gw_url),
                               payload=args.payload) as gwc, \
                open_client(args.client, server.client_kwargs(), payload=args.payload) as dc:
            ns = "bench"
            await gwc.create_bucket(ns)
            gw = S3Side("gateway", gwc, ns, gateway_flush(gw_url))
            direct = S3Side("direct", dc, direct_bucket)
            meter = CPUMeter.for_run(server, gateway=gateway_pid())

            def sample() -> dict[str, Any]:
                return {"cpu": meter.sample(), "counters": server_counters(server)}

            gw.sample = direct.sample = sample
            costing = put_costing(meter)
            say("warm-up (untimed): 256 KiB PUTs and GETs on both sides, the gateway's flushed")
            await warm_up(gw, direct, profile.warm_requests, parse_size(profile.segment_size))
            rounds: list[dict[str, float]] = []
            for r in range(args.repeats):
                if args.repeats > 1:
                    say(f"repeat {r + 1} of {args.repeats}")
                one: dict[str, float] = {}
                for size in (256 * KiB, 2 * MiB):
                    n = max(1, profile.volume // size)
                    tag = "256KiB" if size < MiB else "2MiB"
                    for c in (1, 8):
                        got = await throughput(gw, direct, size, n, c, say, costing)
                        one.update({f"{k}_{tag}_c{c}": v for k, v in got.items()})
                one.update(backend_ratios(one))
                for i, t in enumerate(args.restore_block_tokens):
                    got = await restore(gw_url, gw, direct, profile.session_tokens,
                                        args.restore_batch, args.restore_concurrency, say,
                                        meter, block_tokens=t)
                    if i == 0:
                        one.update(got)
                    one.update({f"{k}_{t}tok": got[k] for k in BY_BLOCK_KEYS if k in got})
                rounds.append(one)
            # every figure is the median over the repeats (each ratio's own median); the
            # repeats' values are kept beside it
            results.update(medians(rounds))
            results["repeats"] = args.repeats
            results["restore_block_tokens"] = args.restore_block_tokens
            if args.repeats > 1:
                results["per_repeat"] = {k: [one[k] for one in rounds] for k in SUMMARY_KEYS}
            results["gateway_put_slowdowns"] = gw.slowdowns
            results["direct_put_slowdowns"] = direct.slowdowns
    return results


def backend_ratios(one: dict[str, Any]) -> dict[str, Any]:
    """The gateway's server cost per GiB over direct's, 256 KiB PUTs at c=8 (None where the
    server counts no requests)."""
    out: dict[str, Any] = {}
    g, d = one["gateway_put_server_cpu_s_per_GiB_256KiB_c8"], \
        one["direct_put_server_cpu_s_per_GiB_256KiB_c8"]
    out["backend_cpu_ratio_put_256KiB"] = round(g / d, 3) if d else None
    g, d = one["gateway_put_requests_per_GiB_256KiB_c8"], \
        one["direct_put_requests_per_GiB_256KiB_c8"]
    out["backend_requests_ratio_put_256KiB"] = round(g / d, 4) if g is not None and d else None
    return out


#: a restore's figures kept for every --restore-block-tokens size, as ``{key}_{T}tok``
BY_BLOCK_KEYS = ("restore_ratio", "restore_block_bytes", "restore_batch_s",
                 "restore_per_block_direct_c8_s", "restore_batch_server_cpu_s",
                 "restore_per_block_server_cpu_s")
SUMMARY_KEYS = ("put_ratio_256KiB_c1", "put_ratio_256KiB_c8", "get_ratio_2MiB_c1",
                "get_ratio_2MiB_c8", "restore_ratio", "backend_cpu_ratio_put_256KiB",
                "backend_requests_ratio_put_256KiB")
#: issue 16's targets on RGW with --split-cores (lower is better for the backend ratios)
TARGETS = {"put_ratio_256KiB_c1": 2.0, "put_ratio_256KiB_c8": 3.0, "get_ratio_2MiB_c1": 0.9,
           "get_ratio_2MiB_c8": 0.9, "restore_ratio": 2.5}
CEILINGS = {"backend_cpu_ratio_put_256KiB": 0.3, "backend_requests_ratio_put_256KiB": 0.01}


def block_tokens_list(text: str) -> list[int]:
    """``--restore-block-tokens``: positive token counts, comma-separated, each once."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected token counts such as 4,16,64") from None
    if not sizes or min(sizes) < 1 or len(set(sizes)) != len(sizes):
        raise argparse.ArgumentTypeError(f"{text!r}: each size a positive token count, once")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--quick", action="store_true",
                        help="tiny profile (a few MiB per phase; for CI smoke runs on moto)")
    parser.add_argument("--client", choices=CLIENTS, default="aiobotocore",
                        help="the S3 client on both sides: aiobotocore, or warp (warp.s3's "
                        "S3Client, as `s3kv bench` uses: far less CPU per byte; the client "
                        "shares the inference core with the gateway, so its own CPU bounds the "
                        "ratios this can show); warp always sends UNSIGNED-PAYLOAD "
                        "[default: aiobotocore]")
    parser.add_argument("--payload", choices=sorted(PAYLOAD_SIGNING), default=None,
                        help="how aiobotocore treats bodies (--client aiobotocore only; warp is "
                        "always unsigned): signed = SHA-256 payload signature and CRC32 "
                        "checksum, botocore's default over plain HTTP; unsigned = "
                        "UNSIGNED-PAYLOAD, no checksum, like Warp's --disable-sha256-payload "
                        "[default: signed; with --client warp: unsigned]")
    parser.add_argument("--restore-batch", type=int, default=None, metavar="N",
                        help="keys per native batch-get request [default: the whole chain in "
                        f"one streamed request: {SESSION_TOKENS // BLOCK_TOKENS} keys at "
                        f"{BLOCK_TOKENS}-token blocks]")
    parser.add_argument("--restore-block-tokens", type=block_tokens_list,
                        default=[BLOCK_TOKENS], metavar="T[,T...]",
                        help="tokens per block of the restored session (Qwen2.5-7B: 56 KiB a "
                        "token), one restore per size, each against per-block GETs of blocks "
                        "that size; restore_ratio is the first size's, every size's is "
                        f"restore_ratio_{{T}}tok [default: {BLOCK_TOKENS}, vLLM's block]")
    parser.add_argument("--restore-concurrency", type=int, default=1, metavar="N",
                        help="batch-get requests in flight during the restore [default: 1]")
    parser.add_argument("--repeats", type=int, default=1, metavar="N",
                        help="run every phase N times (fresh keys each time, one gateway) and "
                        "report each figure's median, the per-repeat ratios beside them "
                        "[default: 1]")
    parser.add_argument("--volume", metavar="SIZE", default=None,
                        help=f"block bytes per PUT and GET phase [default: "
                        f"{format_size(FULL.volume)}; --quick {format_size(QUICK.volume)}]")
    parser.add_argument("--segment-size", metavar="SIZE", default=None,
                        help=f"the gateway's --segment-size [default: {FULL.segment_size}; "
                        f"--quick {QUICK.segment_size}]")
    parser.add_argument("--part-size", metavar="SIZE", default=None,
                        help=f"the gateway's --part-size; equal to the segment size, every "
                        f"segment is one PUT [default: {FULL.part_size}; --quick "
                        f"{QUICK.part_size}]")
    parser.add_argument("--etag", choices=("md5", "fast"), default="md5",
                        help="the gateway's --etag: md5 (S3's ETag, the default) or fast (no "
                        "MD5 pass over each body) [default: md5]")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if args.restore_batch is not None and args.restore_batch < 1:
        parser.error("--restore-batch must be >= 1")
    tokens = QUICK.session_tokens if args.quick else SESSION_TOKENS
    if args.restore_batch is None and -(-tokens // min(args.restore_block_tokens)) > \
            MAX_BATCH_KEYS:
        parser.error(f"--restore-block-tokens {min(args.restore_block_tokens)} makes more "
                     f"blocks than one batch get takes ({MAX_BATCH_KEYS}): give "
                     "--restore-batch N or larger blocks")
    if args.client == "warp" and args.payload == "signed":
        parser.error("--payload signed needs --client aiobotocore: warp's S3 client always "
                     "sends UNSIGNED-PAYLOAD")
    args.payload = args.payload or ("unsigned" if args.client == "warp" else "signed")
    profile = QUICK if args.quick else FULL
    profile = replace(profile, segment_size=args.segment_size or profile.segment_size,
                      part_size=args.part_size or profile.part_size, etag=args.etag,
                      volume=parse_size(args.volume) if args.volume else profile.volume)
    say = Progress(not args.json)
    results = run_on_server(args, lambda server, topology: run(server, profile, args, say,
                                                               topology))
    if results is None:
        return 1
    if args.json:
        print(json.dumps(results, sort_keys=True))
    else:
        print(f"\nserver: {results['server']} ({results['profile']} profile; segments "
              f"{results['segment_size']} in {results['part_size']} parts; client "
              f"{results['client']}, payload {results['payload']})")
        per = results.get("per_repeat", {})
        for key in SUMMARY_KEYS:
            value = results[key]
            if value is None:
                print(f"  {key:34s}      -  (the server counts no requests)")
                continue
            if key in TARGETS:
                ok = "ok" if value >= TARGETS[key] else "below target"
                goal = f"target >= {TARGETS[key]}: {ok}"
            else:
                ok = "ok" if value <= CEILINGS[key] else "above target"
                goal = f"target <= {CEILINGS[key]}: {ok}"
            runs = (f"  repeats: {', '.join(f'{v:.3f}' for v in per[key])}"
                    if key in per and None not in per[key] else "")
            print(f"  {key:34s} {value:6.3f}  ({goal}){runs}")
        for phase, name in (("put", "256KiB"), ("get", "2MiB")):
            for side in ("direct", "gateway"):
                cpu = results.get(f"{side}_{phase}_cpu_s_per_GiB_{name}_c8", {})
                print(f"  CPU-s per GiB, {name} {phase.upper()} c=8, {side}: "
                      + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cpu.items())))
        for t in results["restore_block_tokens"]:
            print(f"  restore at {t}-token blocks "
                  f"({results[f'restore_block_bytes_{t}tok'] / KiB:.0f} KiB): ratio "
                  f"{results[f'restore_ratio_{t}tok']:.3f}; server CPU-s batch "
                  f"{results[f'restore_batch_server_cpu_s_{t}tok']:.2f}, per-block "
                  f"{results[f'restore_per_block_server_cpu_s_{t}tok']:.2f}")
        for kind in ("batch", "per_block"):
            spent = {k.removeprefix(f"restore_{kind}_").removesuffix("_cpu_s"): v
                     for k, v in results.items()
                     if k.startswith(f"restore_{kind}_") and k.endswith("_cpu_s")}
            per_cpu = [v for k, v in sorted(results.items())
                       if k.startswith(f"restore_{kind}_cpu") and k.endswith("_busy")]
            print(f"  CPU-s of the {kind.replace('_', '-')} restore: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in sorted(spent.items()))
                  + f"; server busy {results.get(f'restore_{kind}_server_busy', 0):.2f}"
                  + "; CPUs busy " + " / ".join(f"{v:.2f}" for v in per_cpu))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
