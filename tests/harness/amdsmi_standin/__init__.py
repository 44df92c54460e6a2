"""A stand-in for ROCm's ``amdsmi`` Python package (``amdsmi/``): the real module layout
(``amdsmi``, ``amdsmi.amdsmi_wrapper``, ``amdsmi.amdsmi_exception``), function names,
signatures, enums and exception, answering from a JSON script instead of libamd_smi.so.
A test puts :data:`FOLDER` first on sys.path (or PYTHONPATH) and the script's path in
:data:`SCRIPT_ENV`; ``import amdsmi`` then finds it as it would find the real package."""

from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).resolve().parent  # the folder to put on sys.path
SCRIPT_ENV = "ZT_AMDSMI_SCRIPT"  # the JSON script the stand-in reads at amdsmi_init
