"""The compiled parts of s3kv: kvq's non-BLAS loops (s3kv/store/codecs/_kvq_native.c), a
landing body's receive loop (s3kv/wire/_landrecv.c) and a batch get's check-and-send loop
(s3kv/wire/_blocksend.c).

Everything else is in pyproject.toml. The extensions are optional: where they do not build (no
C compiler), kvq runs its numpy path, which gives the same bytes, and the event loop receives
every landing body and checks and sends every block.
"""

import sys

from setuptools import Extension, setup

FLAGS = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off", "-std=c11"]

setup(ext_modules=[Extension("s3kv.store.codecs._kvq_native",
                             ["s3kv/store/codecs/_kvq_native.c"],
                             extra_compile_args=FLAGS, optional=True),
                   Extension("s3kv.wire._landrecv", ["s3kv/wire/_landrecv.c"],
                             extra_compile_args=FLAGS, optional=True),
                   Extension("s3kv.wire._blocksend", ["s3kv/wire/_blocksend.c"],
                             extra_compile_args=FLAGS, optional=True)])
