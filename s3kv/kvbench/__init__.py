"""``s3kv bench kv``: a KV-cache workload against the gateway or plain per-block S3.

- :mod:`s3kv.kvbench.workload`: the workload model (users, conversations, turns, prefix-chain
  keys, context-length distributions), a pure function of the seed;
- :mod:`s3kv.kvbench.targets`: how one turn's lookup, reads and writes reach a target (the
  gateway's native API, or one S3 object per block);
- :mod:`s3kv.kvbench.rank`: one rank (an OS process) running its users, one pass at a time;
- :mod:`s3kv.kvbench.report`: per-rank and run figures (tokens/s, GiB/s, P50/P95/P99, hit
  ratio, restore time), text and JSON;
- :mod:`s3kv.kvbench.command`: the subcommand, the rank processes and the progress bar.

The workload and every figure are documented in docs/kv-bench.md.
"""
