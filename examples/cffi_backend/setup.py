"""Only here for cffi: ``cffi_modules`` builds ``riftco_cffi_example._kernels`` at install."""

from setuptools import setup

setup(cffi_modules=["riftco_cffi_example/_build.py:ffibuilder"])
