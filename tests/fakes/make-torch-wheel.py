#!/usr/bin/env python3
"""TEST STAND-IN for a torch wheel built for a CUDA version: `torch/version.py` and nothing
else (no library, nothing to import but the version), written as a valid wheel that pip and uv
install. Hosts without a GPU use it to show the driver check of an upgrade plan against the
CUDA a candidate's torch is built for; never in a wheelhouse a deploy serves from.

    make-torch-wheel.py DEST_DIR VERSION CUDA     e.g. /opt/wh 2.9.1+cu128 12.8
"""

import base64
import hashlib
import os
import sys
import zipfile


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make(dest, version, cuda):
    dist = f"torch-{version}.dist-info"
    files = {
        "torch/__init__.py": f'"""TEST STAND-IN torch {version}: version.py only."""\n'
                             "from .version import __version__  # noqa: F401\n",
        "torch/version.py": f"__version__ = '{version}'\ncuda = '{cuda}'\ngit_version = ''\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
                            "Summary: TEST STAND-IN (torch/version.py only)\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: make-torch-wheel\nRoot-Is-Purelib: true\n"
                         "Tag: py3-none-any\n",
    }
    path = os.path.join(dest, f"torch-{version}-py3-none-any.whl")
    lines = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            data = text.encode()
            archive.writestr(name, data)
            lines.append(_record_line(name, data))
        archive.writestr(f"{dist}/RECORD", "\n".join(lines + [f"{dist}/RECORD,,"]) + "\n")
    return path


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    print(make(*sys.argv[1:]))
