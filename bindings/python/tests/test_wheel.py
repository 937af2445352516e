"""The wheel for PyPI (scripts/wheel.sh): maturin's manylinux check passes
and the wheel carries a manylinux tag, not the plain ``linux`` one of the
source install (which PyPI refuses).

The script reuses the release build that ``pip install ./bindings/python``
left in bindings/python/target, so this takes a second or two after the
README's test command installed the module; from a cold target it builds
the module again (minutes).
"""

import importlib.metadata
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MANYLINUX = re.compile(r"manylinux(2014|_\d+_\d+)_x86_64")


@pytest.mark.timeout(1500)
def test_the_wheel_for_pypi_is_manylinux(tmp_path):
    result = subprocess.run(
        ["bash", str(ROOT / "scripts/wheel.sh"), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=1440,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    wheels = list(tmp_path.glob("*.whl"))
    assert len(wheels) == 1, wheels

    # flowctrl-0.3.0-cp39-abi3-manylinux_2_34_x86_64.whl
    name, version, python, abi, platform = wheels[0].stem.split("-")
    assert (name, version) == ("flowctrl", importlib.metadata.version("flowctrl"))
    assert MANYLINUX.fullmatch(platform), wheels[0].name
    with zipfile.ZipFile(wheels[0]) as wheel:
        meta = wheel.read(f"flowctrl-{version}.dist-info/WHEEL").decode()
        assert f"Tag: {python}-{abi}-{platform}\n" in meta, meta
        module = wheel.extract("flowctrl/_flowctrl.abi3.so", tmp_path)

    # The C library's SONAME must stay its own: cargo hands a dependency's
    # cdylib link arguments to dependents (see build.rs).
    assert shutil.which("readelf"), "readelf missing: scripts/setup.sh installs binutils"
    dynamic = subprocess.run(
        ["readelf", "-d", module], capture_output=True, text=True, check=True
    ).stdout
    assert "(SONAME)" not in dynamic, dynamic
