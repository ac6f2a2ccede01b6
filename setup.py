"""The optional compiled simulator: where no C compiler is at hand, mmpool installs without it and
simulates in pure Python (the same results, more slowly)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "mmpool_cli.kernels._fastsim",
            ["mmpool_cli/kernels/_fastsim.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c11"],
        ),
        Extension(
            "mmpool_cli.kernels._stackdist",
            ["mmpool_cli/kernels/_stackdist.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c11"],
        ),
        Extension(
            "mmpool_cli.kernels._cachereplay",
            ["mmpool_cli/kernels/_cachereplay.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c11"],
        ),
        Extension(
            "mmpool_cli.kernels._prefixreplay",
            ["mmpool_cli/kernels/_prefixreplay.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c11"],
        ),
        Extension(
            "mmpool_cli.kernels._behind",
            ["mmpool_cli/kernels/_behind.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c11"],
        ),
        Extension(
            "mmpool_cli.kernels._promptids",
            ["mmpool_cli/kernels/_promptids.c"],
            optional=True,
            extra_compile_args=["-O2", "-std=c11"],
        ),
    ]
)
