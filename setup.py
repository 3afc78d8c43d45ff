"""The one compiled part of s3kv: kvq's non-BLAS loops (s3kv/store/codecs/_kvq_native.c).

Everything else is in pyproject.toml. The extension is optional: where it does not build (no
C compiler), kvq runs its numpy path, which gives the same bytes.
"""

import sys

from setuptools import Extension, setup

FLAGS = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off", "-std=c11"]

setup(ext_modules=[Extension("s3kv.store.codecs._kvq_native",
                             ["s3kv/store/codecs/_kvq_native.c"],
                             extra_compile_args=FLAGS, optional=True)])
