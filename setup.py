"""Builds cdcflow's optional compiled core (``cdcflow._native``, the Rust crate in ``native/``).

Everything else is declared in pyproject.toml. The extension is built only when cargo is on the
PATH and ``CDCFLOW_NATIVE_BUILD`` is not ``0``; it is marked optional, so a failed build leaves a
working pure-Python install (``cdcflow plugins list`` says which core is in use).
"""

import os
import shutil

from setuptools import setup

rust_extensions = []
if os.environ.get("CDCFLOW_NATIVE_BUILD", "1") != "0" and shutil.which("cargo"):
    from setuptools_rust import Binding, RustExtension

    rust_extensions.append(
        RustExtension(
            "cdcflow._native",
            "native/Cargo.toml",
            binding=Binding.PyO3,
            optional=True,
            debug=False,
            # An extension module links no libpython (without it, `cargo test` links one to run).
            features=["extension-module"],
        )
    )

setup(rust_extensions=rust_extensions)
