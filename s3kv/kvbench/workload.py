"""The KV-cache workload model: users, multi-turn conversations and prefix-chain block keys.

Everything here is a pure function of the seed and the user's place (rank, user, conversation
number), so every rank process builds its own users' conversations, and a replay pass builds
exactly the same keys again.

- A **conversation** has ``turns`` turns. Its total context length C (tokens, including the
  system prompt) is drawn from the ``--context-tokens`` distribution; the conversation's own
  tokens (C minus the system prompt) are split evenly over its turns. Token counts are rounded
  up to whole blocks of ``block_tokens`` tokens (inference engines store whole blocks only).
- Turn k's context is the system prompt plus turns 1..k. The turn looks up that whole chain,
  restores (reads) the leading blocks that are present, and writes the blocks that were not
  (the recomputed prefix and the new turn's blocks). The last turn's blocks are never read by
  their own conversation: the long tail of written-once blocks.
- A share of users (``shared_share``) use one of ``system_prompts`` shared system prompts;
  the other users' conversations start with a private system prompt of the same length.
- A block's **key** is a prefix-chain hash: ``key_i = blake2b(key_{i-1} || content_i)``, where
  ``content_i`` names the tokens of block i (system prompt id and block number, or the
  conversation and block number). Equal prefixes give equal keys, as in vLLM and LMCache.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

from s3kv.errors import ConfigError

#: keys of a run are chained from this root (with the block geometry, so two block sizes never
#: share keys)
KEY_VERSION = "s3kv-kvbench-1"
MAX_CONTEXT_TOKENS = 1 << 20


@dataclass(frozen=True)
class ContextDist:
    """A distribution of context lengths in tokens.

    ``fixed:N`` (or just ``N``), ``uniform:LO-HI`` (integers, both ends included) or
    ``lognormal:MEAN,SIGMA``: the log of the length is normal with standard deviation SIGMA and
    the mean of the length itself is MEAN (so mu = ln(MEAN) - SIGMA^2 / 2). Samples are clipped
    to [1, 1 Mi] tokens.
    """

    kind: str
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, text: str) -> ContextDist:
        kind, sep, rest = text.strip().partition(":")
        if not sep:
            kind, rest = "fixed", kind
        kind = kind.lower()
        try:
            if kind == "fixed":
                dist = cls("fixed", float(int(rest)))
            elif kind == "uniform":
                lo, _, hi = rest.partition("-")
                dist = cls("uniform", float(int(lo)), float(int(hi)))
            elif kind == "lognormal":
                mean, _, sigma = rest.partition(",")
                dist = cls("lognormal", float(mean), float(sigma))
            else:
                raise ValueError(kind)
        except ValueError:
            raise ConfigError(f"invalid --context-tokens {text!r}: write N, uniform:LO-HI "
                              "(e.g. uniform:1000-8000) or lognormal:MEAN,SIGMA (e.g. "
                              "lognormal:4000,0.6)") from None
        dist.validate()
        return dist

    def validate(self) -> None:
        if self.a < 1:
            raise ConfigError("--context-tokens: lengths must be at least 1 token")
        if self.kind == "uniform" and self.b < self.a:
            raise ConfigError("--context-tokens uniform:LO-HI needs LO <= HI")
        if self.kind == "lognormal" and self.b < 0:
            raise ConfigError("--context-tokens lognormal: SIGMA must not be negative")

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            value = self.a
        elif self.kind == "uniform":
            value = rng.randint(int(self.a), int(self.b))
        else:
            mu = math.log(self.a) - self.b * self.b / 2
            value = rng.lognormvariate(mu, self.b)
        return int(min(MAX_CONTEXT_TOKENS, max(1, round(value))))

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"{int(self.a)}"
        if self.kind == "uniform":
            return f"uniform:{int(self.a)}-{int(self.b)}"
        return f"lognormal:{self.a:g},{self.b:g}"


@dataclass(frozen=True)
class Workload:
    """The shape of the workload (the same in every rank)."""

    block_tokens: int
    block_bytes: int
    context: ContextDist
    turns: int = 4
    system_prompt_tokens: int = 1024
    shared_share: float = 0.5
    system_prompts: int = 1
    seed: int = 1

    def __post_init__(self) -> None:
        if self.block_tokens < 1 or self.block_bytes < 1:
            raise ConfigError("block tokens and block bytes must be positive")
        if self.turns < 1:
            raise ConfigError("--turns must be at least 1")
        if self.system_prompt_tokens < 0:
            raise ConfigError("--system-prompt-tokens must not be negative")
        if not 0.0 <= self.shared_share <= 1.0:
            raise ConfigError("--shared-share must be between 0 and 1")
        if self.system_prompts < 1:
            raise ConfigError("--system-prompts must be at least 1")

    def blocks(self, tokens: int) -> int:
        return -(-tokens // self.block_tokens)

    @property
    def root(self) -> bytes:
        return f"{KEY_VERSION}/{self.block_tokens}/{self.block_bytes}".encode()

    def shares_prompt(self, rank: int, user: int, users: int) -> bool:
        """Exactly floor(n * share) of the first n users of the run share a system prompt,
        spread evenly (user g is sharing when floor((g+1)*s) > floor(g*s))."""
        g = rank * users + user
        s = self.shared_share
        return math.floor((g + 1) * s + 1e-9) > math.floor(g * s + 1e-9)

    def conversation(self, rank: int, user: int, users: int, number: int) -> Conversation:
        """Conversation ``number`` (0, 1, ...) of ``user`` in ``rank``."""
        rng = random.Random(f"{self.seed}/{rank}/{user}/{number}")
        g = rank * users + user
        if self.shares_prompt(rank, user, users):
            prompt = f"shared-{g % self.system_prompts}"
        else:
            prompt = f"private-{self.seed}-{rank}-{user}-{number}"
        sys_blocks = self.blocks(self.system_prompt_tokens)
        context = self.context.sample(rng)
        own = max(self.turns, self.blocks(context) - sys_blocks)
        per_turn = [own // self.turns + (1 if t < own % self.turns else 0)
                    for t in range(self.turns)]
        contents = [f"sys/{prompt}/{j}" for j in range(sys_blocks)]
        contents += [f"conv/{self.seed}/{rank}/{user}/{number}/{j}" for j in range(own)]
        ends: list[int] = []
        end = sys_blocks
        for n in per_turn:
            end += n
            ends.append(end)
        return Conversation(rank, user, number, chain_keys(self.root, contents), tuple(ends),
                            sys_blocks, prompt.startswith("shared"))


@dataclass(frozen=True)
class Conversation:
    rank: int
    user: int
    number: int
    keys: tuple[str, ...]  # every block of the conversation, in chain order
    turn_ends: tuple[int, ...]  # turn k's context is keys[:turn_ends[k]]
    system_blocks: int
    shared_prompt: bool

    def turn_keys(self, turn: int) -> tuple[str, ...]:
        return self.keys[:self.turn_ends[turn]]


def chain_keys(root: bytes, contents: list[str]) -> tuple[str, ...]:
    """Prefix-chain hashes: each key hashes its parent key and its block's content id."""
    keys: list[str] = []
    parent = hashlib.blake2b(root, digest_size=16).digest()
    for content in contents:
        parent = hashlib.blake2b(parent + content.encode(), digest_size=16).digest()
        keys.append(parent.hex())
    return tuple(keys)
